"""In-process object stores for the remote-storage tests: GCS (gcp-storage-emulator) and S3 (moto).

The pipeline opens every URL with `fsspec.core.url_to_fs(uri)` and no storage options, so the
emulators are wired in the way a deployment would configure real credentials: environment
variables (`STORAGE_EMULATOR_HOST`, `AWS_*`) plus fsspec's global config (`fsspec.config.conf`),
which fsspec applies to every filesystem it constructs. Both servers listen on 127.0.0.1 on a
free port and live for one test module.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import sys
from http import HTTPStatus
from typing import Iterator, Optional

import fsspec

# gcsfs reads this at import time; against an emulator the default (true) makes every open wait
# 60 s on a gRPC bucket-type lookup. conftest sets it too, but this module may be imported first.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("NO_GCE_CHECK", "true")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing(*modules: str) -> Optional[str]:
    """Why the emulator tests cannot run (a skip reason), or None when every module imports."""
    absent = []
    for name in modules:
        try:
            __import__(name)
        except ImportError:
            absent.append(name)
    if not absent:
        return None
    return (f"{', '.join(absent)} not installed; pip install gcp-storage-emulator 'moto[server]' s3fs "
            f"(the test extra) to run the remote-storage tests")


@contextlib.contextmanager
def _fsspec_conf(protocol: str, options: dict) -> Iterator[None]:
    """Default storage options for every `protocol` filesystem fsspec makes, and a fresh cache."""
    old = fsspec.config.conf.get(protocol)
    fsspec.config.conf[protocol] = options
    fsspec.get_filesystem_class(protocol).clear_instance_cache()
    try:
        yield
    finally:
        if old is None:
            fsspec.config.conf.pop(protocol, None)
        else:
            fsspec.config.conf[protocol] = old
        fsspec.get_filesystem_class(protocol).clear_instance_cache()


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _install_gcs_move_to() -> None:
    """Give gcp-storage-emulator the objects.move endpoint (`POST …/o/SRC/moveTo/o/DEST`).

    gcsfs 2026.x renames within a bucket with moveTo and falls back to copy+delete only after six
    retried 501s (~30 s per rename); real GCS implements moveTo, the emulator does not. The route
    is prepended to the emulator's routing table, so the emulator answers as GCS would.
    """
    from gcp_storage_emulator import server
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    if getattr(server, "_lerobot_move_to", False):
        return

    def move(request, response, storage, *args, **kwargs):
        params = request.params
        bucket = params["bucket_name"]
        try:
            dest = objects._copy(request.base_url, storage, bucket, params["object_id"], bucket,
                                 params["dest_object_id"])
            storage.delete_file(bucket, params["object_id"])
        except NotFound:
            response.status = HTTPStatus.NOT_FOUND
            return
        response.json(dest)

    routes = tuple((rf"^{prefix}/b/(?P<bucket_name>[-.\w]+)/o/(?P<object_id>.*[^/]+)/moveTo/o/"
                    rf"(?P<dest_object_id>.*[^/]+)$", {server.POST: move})
                   for prefix in ("/storage/v1", ""))
    server.HANDLERS = routes + tuple(server.HANDLERS)
    server._lerobot_move_to = True


#: "bucket/key" of the objects whose reads the emulators refuse while `deny_reads` lists them.
_DENIED_READS: set[str] = set()


@contextlib.contextmanager
def deny_reads(*urls: str) -> Iterator[None]:
    """While active, downloading any of these gs:// or s3:// objects gets 403 from the emulator, as a store
    answers a caller who lost read access; listing them and their metadata still work, and the objects
    keep their generation / ETag (a permission change rewrites nothing)."""
    names = {url.split("://", 1)[1] for url in urls}
    _DENIED_READS.update(names)
    try:
        yield
    finally:
        _DENIED_READS.difference_update(names)


def _install_gcs_read_denials() -> None:
    """Make gcp-storage-emulator refuse media downloads of `_DENIED_READS` (before its routing, so the
    routing table other helpers wrap is left as it is)."""
    from urllib.parse import parse_qs, unquote, urlsplit

    from gcp_storage_emulator import server

    if getattr(server, "_lerobot_read_denials", False):
        return
    get = server.RequestHandler.do_GET
    media = re.compile(r"^(?:/download)?(?:/storage/v1)?/b/(?P<bucket>[-.\w]+)/o/(?P<object>.+)$")

    def do_get(handler):
        url = urlsplit(handler.path)
        found = media.fullmatch(url.path)
        downloading = url.path.startswith("/download/") or parse_qs(url.query).get("alt") == ["media"]
        if found and downloading and f"{found['bucket']}/{unquote(found['object'])}" in _DENIED_READS:
            body = json.dumps({"error": {"code": 403, "message": "caller does not have storage.objects.get "
                                         "access to the object"}}).encode()
            handler.send_response(HTTPStatus.FORBIDDEN)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        get(handler)

    server.RequestHandler.do_GET = do_get
    server._lerobot_read_denials = True


def _deny_s3_reads(app):
    """moto's WSGI app behind a check: a GET of an object in `_DENIED_READS` gets S3's AccessDenied."""
    from urllib.parse import unquote

    def wrapped(environ, start_response):
        name = unquote(environ.get("PATH_INFO", "")).lstrip("/")
        if environ.get("REQUEST_METHOD") == "GET" and name in _DENIED_READS:
            body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
                    b"<Message>Access Denied</Message></Error>")
            start_response("403 Forbidden", [("Content-Type", "application/xml"),
                                              ("Content-Length", str(len(body)))])
            return [body]
        return app(environ, start_response)

    return wrapped


def _quiet_disconnects(httpd) -> None:
    """Drop the traceback http.server prints when a client closes a ranged read early (harmless)."""
    if httpd is None:
        return
    report = httpd.handle_error

    def handle_error(request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            report(request, client_address)

    httpd.handle_error = handle_error


@contextlib.contextmanager
def gcs_emulator() -> Iterator[str]:
    """A GCS JSON API on 127.0.0.1; yields its URL. gs:// URLs reach it anonymously while active."""
    from gcp_storage_emulator.server import create_server

    _install_gcs_move_to()
    _install_gcs_read_denials()
    for noisy in ("gcp_storage_emulator", "gcp_storage_emulator.server", "gcsfs"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    _quiet_disconnects(getattr(getattr(server, "_api", None), "_httpd", None))
    url = f"http://127.0.0.1:{port}"
    try:
        with _env(STORAGE_EMULATOR_HOST=url), _fsspec_conf("gcs", {"token": "anon", "project": "test"}):
            yield url
    finally:
        server.stop()


@contextlib.contextmanager
def s3_emulator() -> Iterator[str]:
    """moto's S3 on 127.0.0.1; yields its endpoint URL. s3:// URLs reach it while active."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    httpd = getattr(server, "_server", None)  # werkzeug's server: its `app` is what each request calls
    if httpd is not None:
        httpd.app = _deny_s3_reads(httpd.app)
    url = f"http://127.0.0.1:{port}"
    try:
        # Dummy credentials through the standard variables (botocore reads them); the endpoint
        # through fsspec's config, since the pipeline passes no storage options. (botocore's
        # AWS_ENDPOINT_URL_S3 variable works as well.)
        with _env(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_SESSION_TOKEN="testing",
                  AWS_DEFAULT_REGION="us-east-1"), \
                _fsspec_conf("s3", {"client_kwargs": {"endpoint_url": url}}):
            yield url
    finally:
        server.stop()
