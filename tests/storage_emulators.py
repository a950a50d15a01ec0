"""In-process object stores for the remote-storage tests: GCS (gcp-storage-emulator) and S3 (moto).

The pipeline opens every URL with `fsspec.core.url_to_fs(uri)` and no storage options, so the
emulators are wired in the way a deployment would configure real credentials: environment
variables (`STORAGE_EMULATOR_HOST`, `AWS_*`) plus fsspec's global config (`fsspec.config.conf`),
which fsspec applies to every filesystem it constructs. Both servers listen on 127.0.0.1 on a
free port and live for one test module.
"""

from __future__ import annotations

import contextlib
import logging
import os
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
