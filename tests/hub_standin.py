"""A loopback stand-in for the Hugging Face Hub, for tests of `hf://datasets/...` imports.

`HubStandIn` serves local dataset folders as Hub dataset repos through the HTTP endpoints that
`huggingface_hub` (2.4) calls, in the shapes its parsers expect, and counts every request and the
body bytes sent per file. It never touches the network: one `ThreadingHTTPServer` on 127.0.0.1
is "the Hub", a second one on another port is "the CDN" that big (LFS) files redirect to, as the
real Hub does.

    with HubStandIn() as hub, hub.configure():
        sha = hub.add_dataset("lerobot/so101", folder, revisions={"main": None, "v3.0": None})
        fs = HfFileSystem()                       # reads HF_ENDPOINT / constants.ENDPOINT
        fs.cat_file("datasets/lerobot/so101@v3.0/meta/info.json")
        hub.bytes_by_file()                       # {"meta/info.json": 1234}

Endpoints served (repo ids are OWNER/NAME; revisions are a branch, a tag, a full 40-hex commit or
`refs/pr/N`, URL-encoded in one path segment as huggingface_hub sends them):

    GET  /api/datasets?author=OWNER&search=...               list of datasets (private ones need a token)
    GET  /api/datasets/{repo}[/revision/{rev}]               repo info with `sha` (blobs=1 adds sizes)
    GET  /api/datasets/{repo}/tree/{rev}[/{path}]            ?recursive=&expand=&cursor=; Link rel="next"
    POST /api/datasets/{repo}/paths-info/{rev}               form or JSON body: paths=..., expand=...
    GET  /api/datasets/{repo}/refs[?include_prs=1]           branches, tags, pull requests
    GET  /api/datasets/{repo}/commits/{rev}                  the commit chain, newest first
    GET/HEAD /datasets/{repo}/resolve/{rev}/{path}           bytes; Range -> 206 + Content-Range
    GET/HEAD <cdn>/blobs/{sha256}?name=&repo=                where LFS files redirect (302) to

Errors carry the `X-Error-Code` / `X-Error-Message` headers that `hf_raise_for_status` maps:
`RepoNotFound` (401 without a token, 404 with one: missing or private repo) ->
RepositoryNotFoundError; `GatedRepo` (401 without a token, 403 with a token not granted) ->
GatedRepoError; `RevisionNotFound` (404) -> RevisionNotFoundError; `EntryNotFound` (404) ->
RemoteEntryNotFoundError (a subclass of EntryNotFoundError). A token the stand-in has never
issued gets 401 "Invalid credentials in Authorization header", which huggingface_hub raises as a
plain HfHubHTTPError. Note that huggingface_hub only maps a 401 *without* X-Error-Code to
RepositoryNotFoundError for https URLs, so the stand-in always sends the code.

No Xet: tree entries carry no `xetHash` and resolve responses no `X-Xet-*` headers or
`Link: rel="xet-auth"`, so huggingface_hub (and hf_xet, which is installed) always takes the
plain HTTP path. LFS files (by suffix: .parquet, .mp4, ... or >= 10 MiB) are listed with
`lfs: {oid: sha256, size, pointerSize}`, and their resolve answers a 302 to the CDN port with
`X-Linked-Etag`, `X-Linked-Size` and `X-Repo-Commit` (set `lfs_redirect=False` to serve them
in place). Every commit also carries the `.gitattributes` a Hub repo has (`gitattributes=False`
to leave it out).

What huggingface_hub 2.4 calls, measured against this stand-in (tests/test_hub_standin.py):

* `HfFileSystem.resolve_path(p)` -> one `GET /api/datasets/{repo}/revision/{rev}` (or without
  `/revision/...` when no @rev), cached per instance in `_repo_and_revision_exists_cache`. It does
  NOT turn a branch into a commit: `resolve_path(...).revision` is the revision as written
  ("main", "v3.0"). The commit is `HfApi().dataset_info(repo, revision=rev).sha` (one request of
  the same shape). `fs.info(root, expand_info=True)["last_commit"]` also gives it but lists the
  whole commit history. A commit-pinned path `hf://datasets/o/n@<sha>/...` is served from that
  commit forever, even after the branch moves; `refs/pr/N` works written plain or as
  `refs%2Fpr%2FN`.
* `hf://datasets/OWNER/*` is not a path HfFileSystem accepts (HfUriError, a ValueError: "Repo
  id must use alphanumeric chars"); an owner's datasets come from
  `HfApi().list_datasets(author=OWNER)` -> `GET /api/datasets?author=OWNER` (entries carry `sha`).
* `fs.exists` / `isfile` / `isdir` swallow every OSError, and HfHubHTTPError IS an OSError: a
  429/503 on the (unretried) repo lookup makes `exists` answer False. Do not decide "missing"
  from `exists`; call `info` and tell FileNotFoundError from HfHubHTTPError.
* `fs.ls(dir)` -> one non-recursive `GET .../tree/{rev}/{dir}` (expand=False), cached in
  `fs.dircache`. Entries: {name, size, type, blob_id (git oid), lfs (None or {size, sha256,
  pointer_size}), xet_hash, last_commit (None unless expand_info=True), security}. For LFS files
  `size` is the real size and `lfs["sha256"]` the content hash; `blob_id` is the oid of the
  pointer. `last_commit` is a LastCommitInfo(oid, title, date) only with `expand_info=True`
  (page size 50 on the real Hub).
* `fs.find(root)` / `fs.glob` -> one recursive `GET .../tree/{rev}/{path}?recursive=True`,
  paginated through `Link: <...&cursor=...>; rel="next"` (1000 entries a page, 50 with expand);
  with more than 2 pages of entries in sub-folders it splits into parallel per-folder listings
  (max_workers=16).
* `fs.info(file)` -> served from the dircache of the parent, filled by one `ls(parent)`; with
  `refresh=True` or `expand_info=True` it POSTs `paths-info`. `fs.exists`/`isfile`/`isdir` are
  `info` calls.
* `fs.open(file)` -> `info` (size) + nothing else until a read; each buffer miss is
  `GET .../resolve/{rev}/{path}` with `Range: bytes=a-b` (then the CDN for LFS files, Range kept,
  Authorization dropped across origins by httpx). The DEFAULT cache is fsspec's "readahead" with
  a 5 MiB block: `fs.cat_file(p, start, end)` and `f.read(n)` fetch [start, end + 5 MiB) clipped
  to the file size. To read exactly a range pass `cache_type="none"` (or "bytes") and/or a small
  `block_size` to `open`/`cat_file`. `f.read()` from offset 0 with no length streams the whole
  file without Range (HfFileSystemStreamFile). `fs.url(p)` gives the resolve URL at the
  revision as written - build commit-pinned URLs from the resolved sha yourself.
* `snapshot_download` -> repo info (for the sha), one recursive tree listing at the sha, then per
  file a HEAD on `resolve/{sha}/{path}` (not followed to the CDN: X-Repo-Commit, X-Linked-Etag,
  X-Linked-Size are read off the 302) and a full GET.

Retries built into huggingface_hub 2.4 (`utils/_http.py: http_backoff`): status 408, 429, 500,
502, 503, 504 and timeouts / network errors / dropped connections are retried up to 5 times,
sleeping 1, 2, 4, 8, 8 s (or `Retry-After` + 1 s / the `RateLimit` header's reset + 1 s on 429),
then the last error is raised (HfHubHTTPError for a status). This covers tree pages
(`_paginate_pages`), range reads (`HfFileSystemFile._fetch_range`) and streamed reads. It does NOT
cover `dataset_info`/`repo_info` (so `resolve_path`) nor `get_paths_info`, which use the plain
session: a 429 or 503 there raises at once (HfHubHTTPError) - and `_repo_and_revision_exist`
only caches RepositoryNotFound / RevisionNotFound, so the next call asks again. The HEAD in
`hf_hub_download` is tried once, then - when the file is not cached and the error was transient -
once more with the backoff above (`retry_on_errors=True`).
Timeouts: range reads use `constants.HF_HUB_DOWNLOAD_TIMEOUT` (10 s), repo info from
`resolve_path` `HF_HUB_ETAG_TIMEOUT` (10 s); tree listings, paths-info and `dataset_info` called
directly have NO timeout (the shared httpx2 client is built with timeout=None).

Caching an importer must handle: `HfFileSystem(...)` instances are cached per (thread, endpoint,
token, options) by its metaclass, and a new instance in another thread copies the main thread's
dircache. A listing or a "repo/revision exists" answer, once cached, is never refreshed: after a
new commit on a branch call `fs.invalidate_cache()` (all) or `fs.invalidate_cache(path)`, pass
`refresh=True`, create it with `skip_instance_cache=True`, or `HfFileSystem.clear_instance_cache()`.
Reading through a commit-pinned path avoids the question. `configure()` below clears the instance
cache on entry and exit because each stand-in has a new port.

The stand-in is test code: it holds a private copy of every served file (content-addressed by
sha256 in a temporary folder) so a later change to the source folder does not change an old
commit.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Union
from urllib.parse import parse_qs, quote, unquote, urlsplit

# Suffixes the Hub's default .gitattributes stores through LFS (a subset that covers datasets).
LFS_SUFFIXES = (".parquet", ".mp4", ".arrow", ".npz", ".npy", ".bin", ".safetensors", ".zip", ".tar",
                ".gz", ".zst", ".mkv", ".webm", ".avi", ".png", ".jpg", ".jpeg", ".h5", ".pt", ".pkl")
LFS_MIN_SIZE = 10 * 1024 * 1024
GITATTRIBUTES = "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES)
_EPOCH = datetime(2025, 1, 1, tzinfo=timezone.utc)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class RequestRecord:
    """One request the stand-in answered.

    Args:
        method: HTTP method.
        path: URL path, percent-decoded, without the query.
        revision: revision named in the URL (decoded), None when the URL has none.
        file: repo-relative file for content requests (resolve and CDN), else None.
        range: the Range header as sent, or None.
        status: HTTP status answered (0 when the connection was dropped on purpose).
        bytes_sent: body bytes written to the socket.
        kind: "list", "info", "tree", "paths-info", "refs", "commits", "resolve", "cdn" or "other".
        repo: repo id (OWNER/NAME) or None.
        query: raw query string.
        authorized: whether the request carried an Authorization header (the CDN should never get one).
    """

    method: str
    path: str
    revision: Optional[str]
    file: Optional[str]
    range: Optional[str]
    status: int
    bytes_sent: int
    kind: str = "other"
    repo: Optional[str] = None
    query: str = ""
    authorized: bool = False


@dataclass(frozen=True)
class _Blob:
    oid: str          # git blob sha1 of what git stores: the content, or the LFS pointer
    size: int         # real content size
    sha256: str
    lfs: bool
    pointer_size: int
    store: Path       # private copy of the content


@dataclass(frozen=True)
class _Commit:
    sha: str
    parent: Optional[str]
    title: str
    date: datetime
    files: Mapping[str, _Blob]


@dataclass
class _Repo:
    repo_id: str
    private: bool
    gated: Union[bool, str]
    tokens: set = field(default_factory=set)
    commits: dict = field(default_factory=dict)
    branches: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)
    pulls: dict = field(default_factory=dict)
    created: datetime = _EPOCH


@dataclass
class _Fault:
    glob: str
    status: Union[int, str, None]
    remaining: int
    headers: dict
    delay: float
    method: Optional[str]


class _HubError(Exception):
    def __init__(self, status: int, code: Optional[str], message: str, extra: Optional[dict] = None):
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra or {}


def _git_oid(data_size: int, chunks: Iterable[bytes]) -> str:
    h = hashlib.sha1(b"blob %d\0" % data_size)
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.000Z")


class HubStandIn:
    """A Hugging Face Hub on 127.0.0.1 serving local folders as dataset repos, counting requests.

    Args:
        lfs_redirect: answer resolve requests for LFS files with a 302 to the CDN port (as the Hub
            does) instead of serving the bytes in place.
        tree_page_size: entries per tree page (the Hub uses 1000).
        tree_page_size_expand: entries per tree page with expand=True (the Hub uses 50).
        gitattributes: add the Hub's `.gitattributes` to every commit.
    """

    def __init__(self, *, lfs_redirect: bool = True, tree_page_size: int = 1000, tree_page_size_expand: int = 50,
                 gitattributes: bool = True):
        self.lfs_redirect = lfs_redirect
        self.tree_page_size = tree_page_size
        self.tree_page_size_expand = tree_page_size_expand
        self.gitattributes = gitattributes
        #: Hostile behaviours, off unless set (tests of the client's defences):
        #:   "tree_next": "foreign" (a tree page's `Link: rel="next"` points to the CDN's origin), "endless" (every
        #:       page links a next one, empty past the end), "repeat" (every page links a next one, same entries),
        #:       "fresh" (every page links a next one, past the end with entries never listed before);
        #:   "ignore_range": answer 200 with the whole file to a ranged GET;
        #:   "slow_bytes": seconds between single bytes of every file body.
        #: A fault's header or message holding "{authorization}" echoes the request's Authorization header.
        self.hostile: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._repos: dict[str, _Repo] = {}
        self._records: list[RequestRecord] = []
        self._faults: list[_Fault] = []
        self._known_tokens: set[str] = set()
        self._store: Optional[Path] = None
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []
        self._clock = 0
        self.endpoint = ""
        self.cdn_endpoint = ""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "HubStandIn":
        """Start the Hub and CDN servers on free loopback ports."""
        self._store = Path(tempfile.mkdtemp(prefix="hub-standin-"))
        for role in ("hub", "cdn"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
            server.daemon_threads = True
            server.standin = self  # type: ignore[attr-defined]
            server.role = role  # type: ignore[attr-defined]
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                      name=f"hub-standin-{role}", daemon=True)
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        self.endpoint = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.cdn_endpoint = f"http://127.0.0.1:{self._servers[1].server_address[1]}"
        return self

    def stop(self) -> None:
        """Stop both servers and drop the private file copies."""
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()
        if self._store is not None:
            shutil.rmtree(self._store, ignore_errors=True)
            self._store = None

    def __enter__(self) -> "HubStandIn":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @contextlib.contextmanager
    def configure(self, token: Optional[str] = None, *, download_timeout: Optional[float] = None,
                  etag_timeout: Optional[float] = None) -> Iterator["HubStandIn"]:
        """Point huggingface_hub at this stand-in for the duration of the block, then restore it.

        Sets HF_ENDPOINT and the module constants huggingface_hub computed from it at import time
        (ENDPOINT, HUGGINGFACE_CO_URL_TEMPLATE, HF_URL_HOSTS, the trusted redirect origins, the
        module-level `HfApi` and `hffs`), turns offline mode off, hides any real token (HF_TOKEN,
        the login cache, OIDC) and uses `token` instead when given, and clears HfFileSystem's
        instance cache and the shared HTTP client.

        Args:
            token: value for HF_TOKEN inside the block (None: no token at all).
            download_timeout: override `constants.HF_HUB_DOWNLOAD_TIMEOUT` (range reads), seconds.
            etag_timeout: override `constants.HF_HUB_ETAG_TIMEOUT` (repo info in resolve_path), seconds.
        """
        from huggingface_hub import HfFileSystem, constants, hf_api, hf_file_system
        from huggingface_hub.utils import _http

        env_names = ("HF_ENDPOINT", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                     "HF_OIDC_RESOURCE", "HF_TOKEN_PATH", "HF_HUB_DISABLE_TELEMETRY", "NO_PROXY", "no_proxy")
        saved_env = {name: os.environ.get(name) for name in env_names}
        const_names = ("ENDPOINT", "HUGGINGFACE_CO_URL_TEMPLATE", "HF_URL_HOSTS", "HF_HUB_OFFLINE", "HF_TOKEN_PATH",
                       "HF_STORED_TOKENS_PATH", "HF_HUB_DISABLE_TELEMETRY", "HF_HUB_DOWNLOAD_TIMEOUT",
                       "HF_HUB_ETAG_TIMEOUT")
        saved_consts = {name: getattr(constants, name) for name in const_names if hasattr(constants, name)}
        saved_origins = _http._HUB_ORIGINS
        saved_api_endpoint = hf_api.api.endpoint
        saved_hffs = (hf_file_system.hffs.endpoint, hf_file_system.hffs._api.endpoint)
        token_dir = Path(tempfile.mkdtemp(prefix="hub-standin-token-"))
        try:
            os.environ["HF_ENDPOINT"] = self.endpoint
            for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
                os.environ.pop(name, None)
            if token is None:
                os.environ.pop("HF_TOKEN", None)
            else:
                os.environ["HF_TOKEN"] = token
            os.environ["HF_TOKEN_PATH"] = str(token_dir / "token")
            os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
            for name in ("NO_PROXY", "no_proxy"):
                os.environ[name] = ",".join(filter(None, [saved_env[name], "127.0.0.1", "localhost"]))
            constants.ENDPOINT = self.endpoint
            constants.HUGGINGFACE_CO_URL_TEMPLATE = self.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
            constants.HF_URL_HOSTS = frozenset(saved_consts["HF_URL_HOSTS"] | {"127.0.0.1"})
            constants.HF_HUB_OFFLINE = False
            constants.HF_TOKEN_PATH = str(token_dir / "token")
            constants.HF_STORED_TOKENS_PATH = str(token_dir / "stored_tokens")
            constants.HF_HUB_DISABLE_TELEMETRY = True
            if download_timeout is not None:
                constants.HF_HUB_DOWNLOAD_TIMEOUT = download_timeout
            if etag_timeout is not None:
                constants.HF_HUB_ETAG_TIMEOUT = etag_timeout
            _http._HUB_ORIGINS = frozenset(saved_origins | {_http._url_origin(self.endpoint)})
            hf_api.api.endpoint = self.endpoint
            hf_file_system.hffs.endpoint = hf_file_system.hffs._api.endpoint = self.endpoint
            HfFileSystem.clear_instance_cache()
            _http.close_session()
            yield self
        finally:
            for name, value in saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            for name, value in saved_consts.items():
                setattr(constants, name, value)
            _http._HUB_ORIGINS = saved_origins
            hf_api.api.endpoint = saved_api_endpoint
            hf_file_system.hffs.endpoint, hf_file_system.hffs._api.endpoint = saved_hffs
            HfFileSystem.clear_instance_cache()
            _http.close_session()
            shutil.rmtree(token_dir, ignore_errors=True)

    # -- repos and commits -------------------------------------------------------------------

    def add_dataset(self, repo_id: str, folder: Union[str, Path], revisions: Optional[Mapping[str, Any]] = None, *,
                    private: bool = False, gated: Union[bool, str] = False, token: Optional[str] = None,
                    exclude: Iterable[str] = (), message: str = "Upload dataset") -> str:
        """Create dataset repo `repo_id` (OWNER/NAME) whose first commit holds `folder`'s files.

        Args:
            repo_id: OWNER/NAME.
            folder: local folder to serve; its files are copied, later changes to it do not matter.
            revisions: refs to create, name -> None (point at the first commit), a 40-hex sha of
                this repo, or a folder (a commit of its own on top of the first). Names like
                "v3.0" (a "v" and a digit) become tags, "refs/pr/N" pull-request refs, the rest
                branches. Default {"main": None}.
            private: the repo answers RepoNotFound unless a granted token is sent.
            gated: True/"auto"/"manual": listing is open, file content needs a granted token.
            token: a token granted access (for private or gated repos).
            exclude: glob patterns of repo-relative paths to leave out (e.g. "expected_items/*").
            message: title of the first commit.

        Returns:
            The first commit's sha (40 hex, deterministic from the files).
        """
        with self._lock:
            if repo_id.count("/") != 1:
                raise ValueError(f"repo id must be OWNER/NAME, got {repo_id!r}")
            repo = _Repo(repo_id=repo_id, private=private, gated=("auto" if gated is True else gated))
            if token:
                repo.tokens.add(token)
                self._known_tokens.add(token)
            self._repos[repo_id] = repo
            first = self._make_commit(repo, folder, parent=None, message=message, exclude=exclude)
            for name, target in (revisions or {"main": None}).items():
                if target is None:
                    sha = first
                elif isinstance(target, str) and len(target) == 40 and target in repo.commits:
                    sha = target
                else:
                    sha = self._make_commit(repo, target, parent=first, message=f"Update {name}", exclude=exclude)
                self._set_ref(repo, name, sha)
            return first

    def commit(self, repo_id: str, folder: Union[str, Path], branch: str = "main", *,
               message: Optional[str] = None, exclude: Iterable[str] = ()) -> str:
        """Make a new commit on `branch` (created if missing) holding `folder`'s files.

        Earlier commits stay readable by their sha (and through tags pointing at them).

        Returns:
            The new commit's sha.
        """
        with self._lock:
            repo = self._repos[repo_id]
            parent = repo.branches.get(branch)
            sha = self._make_commit(repo, folder, parent=parent, message=message or f"Update {branch}",
                                    exclude=exclude)
            repo.branches[branch] = sha
            return sha

    def add_tag(self, repo_id: str, tag: str, sha: str) -> None:
        """Point tag `tag` of `repo_id` at commit `sha`."""
        with self._lock:
            repo = self._repos[repo_id]
            if sha not in repo.commits:
                raise KeyError(f"{repo_id} has no commit {sha}")
            repo.tags[tag] = sha

    def require_token(self, repo_id: str, token: str) -> None:
        """Make `repo_id` private, readable only with `Authorization: Bearer <token>` (one of the granted)."""
        with self._lock:
            repo = self._repos[repo_id]
            repo.private = True
            repo.tokens.add(token)
            self._known_tokens.add(token)

    def add_token(self, token: str) -> None:
        """Make `token` a valid token (authenticated) that is granted no repo by itself."""
        with self._lock:
            self._known_tokens.add(token)

    def head(self, repo_id: str, revision: str = "main") -> str:
        """The commit sha `revision` of `repo_id` resolves to now."""
        with self._lock:
            return self._resolve_revision(self._repos[repo_id], revision).sha

    def resolve_url(self, repo_id: str, path: str, revision: str) -> str:
        """The Hub URL huggingface_hub builds for a file (`hf_hub_url` with this endpoint)."""
        return f"{self.endpoint}/datasets/{repo_id}/resolve/{quote(revision, safe='')}/{quote(path)}"

    def _set_ref(self, repo: _Repo, name: str, sha: str) -> None:
        if name.startswith("refs/pr/"):
            repo.pulls[name] = sha
        elif len(name) > 1 and name[0] == "v" and name[1].isdigit():
            repo.tags[name] = sha
        else:
            repo.branches[name] = sha

    def _make_commit(self, repo: _Repo, folder: Union[str, Path], parent: Optional[str], message: str,
                     exclude: Iterable[str]) -> str:
        folder = Path(folder)
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is not a folder to serve")
        patterns = list(exclude)
        files: dict[str, _Blob] = {}
        for path in sorted(folder.rglob("*")):
            if not path.is_file():
                continue
            rel = path.relative_to(folder).as_posix()
            if any(fnmatch.fnmatch(rel, pattern) for pattern in patterns):
                continue
            files[rel] = self._store_blob(rel, path.read_bytes() if path.stat().st_size < _CHUNK else path)
        if self.gitattributes and ".gitattributes" not in files:
            files[".gitattributes"] = self._store_blob(".gitattributes", GITATTRIBUTES.encode())
        tree = hashlib.sha1("".join(f"{p}\0{b.oid}\n" for p, b in sorted(files.items())).encode()).hexdigest()
        sha = hashlib.sha1(f"{repo.repo_id}\ntree {tree}\nparent {parent}\n{message}".encode()).hexdigest()
        if sha not in repo.commits:
            self._clock += 1
            repo.commits[sha] = _Commit(sha=sha, parent=parent, title=message,
                                        date=_EPOCH + timedelta(minutes=self._clock), files=files)
        return sha

    def _store_blob(self, rel: str, content: Union[bytes, Path]) -> _Blob:
        assert self._store is not None, "start the stand-in before adding datasets"
        sha256, sha1 = hashlib.sha256(), None
        if isinstance(content, bytes):
            size = len(content)
            sha256.update(content)
            sha1 = _git_oid(size, [content])
        else:
            size = content.stat().st_size
            with open(content, "rb") as f:
                for chunk in iter(lambda: f.read(_CHUNK), b""):
                    sha256.update(chunk)
        digest = sha256.hexdigest()
        store = self._store / digest
        if not store.exists():
            if isinstance(content, bytes):
                store.write_bytes(content)
            else:
                shutil.copyfile(content, store)
        lfs = rel.lower().endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{digest}\nsize {size}\n".encode()
        if lfs:
            oid = _git_oid(len(pointer), [pointer])
        elif sha1 is not None:
            oid = sha1
        else:
            with open(store, "rb") as f:
                oid = _git_oid(size, iter(lambda: f.read(_CHUNK), b""))
        return _Blob(oid=oid, size=size, sha256=digest, lfs=lfs, pointer_size=len(pointer), store=store)

    # -- counters and faults -----------------------------------------------------------------

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request answered since the start (or the last `reset_counts`), in order.

        Waits (up to 10 s) for requests being answered to be recorded: a client can hold a full
        response before the server thread that wrote it has recorded it.
        """
        with self._lock:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=10)
            return list(self._records)

    def bytes_by_file(self, repo_id: Optional[str] = None) -> dict[str, int]:
        """Body bytes sent per repo-relative file (resolve and CDN responses), optionally for one repo."""
        out: dict[str, int] = {}
        for record in self.requests:
            if record.file is not None and (repo_id is None or record.repo == repo_id):
                out[record.file] = out.get(record.file, 0) + record.bytes_sent
        return out

    def count(self, kind: Optional[str] = None, *, method: Optional[str] = None,
              file: Optional[str] = None) -> int:
        """Number of recorded requests of `kind` (and `method`, `file` when given)."""
        return sum(1 for r in self.requests if (kind is None or r.kind == kind)
                   and (method is None or r.method == method) and (file is None or r.file == file))

    def reset_counts(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._records.clear()

    def fail_next(self, path_glob: str, status: Union[int, str, None] = 503, times: int = 1,
                  headers: Optional[Mapping[str, str]] = None, *, delay: float = 0.0,
                  method: Optional[str] = None) -> None:
        """Fail the next `times` requests whose decoded URL path matches `path_glob` (fnmatch).

        Args:
            path_glob: e.g. "/api/datasets/*/tree/*" or "/datasets/o/n/resolve/*/videos/*";
                CDN requests match as "/blobs/<sha256>".
            status: HTTP status to answer (429, 500, 503, ...), "drop" to close the connection
                without an answer, or None to answer normally after `delay` (a slow response).
            times: how many matching requests fail.
            headers: extra response headers, e.g. {"Retry-After": "0"}.
            delay: seconds to wait before answering (use with a short client timeout to
                provoke timeouts).
            method: only requests with this HTTP method match.
        """
        with self._lock:
            self._faults.append(_Fault(glob=path_glob, status=status, remaining=times, headers=dict(headers or {}),
                                       delay=delay, method=method))

    def _take_fault(self, method: str, path: str) -> Optional[_Fault]:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and (fault.method is None or fault.method == method) \
                        and fnmatch.fnmatchcase(path, fault.glob):
                    fault.remaining -= 1
                    return fault
            return None

    def _begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)
            self._in_flight -= 1
            self._idle.notify_all()

    # -- request logic (called by the handler) ---------------------------------------------

    def _repo_for(self, repo_id: str, token: Optional[str]) -> _Repo:
        with self._lock:
            repo = self._repos.get(repo_id)
            if token is not None and token not in self._known_tokens:
                raise _HubError(401, None, "Invalid credentials in Authorization header")
            if repo is None or (repo.private and token not in repo.tokens):
                status = 401 if token is None else 404
                raise _HubError(status, "RepoNotFound", "Repository not found")
            return repo

    def _check_gate(self, repo: _Repo, token: Optional[str]) -> None:
        if repo.gated and token not in repo.tokens:
            raise _HubError(401 if token is None else 403, "GatedRepo",
                            f"Access to dataset {repo.repo_id} is restricted. You must have access to it and be "
                            f"authenticated to access it. Please log in.")

    def _resolve_revision(self, repo: _Repo, revision: Optional[str]) -> _Commit:
        rev = revision or "main"
        with self._lock:
            sha = repo.branches.get(rev) or repo.tags.get(rev) or repo.pulls.get(rev)
            if sha is None and len(rev) == 40 and rev in repo.commits:
                sha = rev
            if sha is None:
                raise _HubError(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return repo.commits[sha]

    def _last_commit(self, repo: _Repo, commit: _Commit, path: str) -> _Commit:
        """The newest commit on `commit`'s chain that changed `path` (a file or a folder prefix)."""
        def state(c: _Commit) -> tuple:
            if path in c.files:
                return (c.files[path].oid,)
            return tuple(sorted((p, b.oid) for p, b in c.files.items() if p.startswith(path + "/")))
        current, here = commit, state(commit)
        while current.parent is not None:
            parent = repo.commits[current.parent]
            if state(parent) != here:
                break
            current = parent
        return current

    def _entries(self, repo: _Repo, commit: _Commit, path: str, recursive: bool, expand: bool) -> list[dict]:
        """Tree entries below `path` ('' for the root), directories first at each level."""
        prefix = path + "/" if path else ""
        if path and path in commit.files:
            raise _HubError(404, "EntryNotFound", f"{path} is a file, not a directory")
        below = sorted(p for p in commit.files if p.startswith(prefix))
        if path and not below:
            raise _HubError(404, "EntryNotFound", f"{path} does not exist on \"{commit.sha}\"")
        dirs: set[str] = set()
        files: list[str] = []
        for p in below:
            rest = p[len(prefix):]
            parts = rest.split("/")
            if recursive:
                for i in range(1, len(parts)):
                    dirs.add(prefix + "/".join(parts[:i]))
                files.append(p)
            elif len(parts) > 1:
                dirs.add(prefix + parts[0])
            else:
                files.append(p)
        out = [self._entry(repo, commit, d, expand) for d in sorted(dirs)]
        out += [self._entry(repo, commit, f, expand) for f in files]
        return out

    def _entry(self, repo: _Repo, commit: _Commit, path: str, expand: bool) -> dict:
        blob = commit.files.get(path)
        if blob is None:
            children = "".join(f"{p}\0{b.oid}\n" for p, b in sorted(commit.files.items())
                               if p.startswith(path + "/"))
            entry: dict[str, Any] = {"type": "directory", "oid": hashlib.sha1(children.encode()).hexdigest(),
                                     "size": 0, "path": path}
        else:
            entry = {"type": "file", "oid": blob.oid, "size": blob.size, "path": path}
            if blob.lfs:
                entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
        if expand:
            last = self._last_commit(repo, commit, path)
            entry["lastCommit"] = {"id": last.sha, "title": last.title, "date": _iso(last.date)}
            if blob is not None:
                entry["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False, "virusNames": None},
                                               "pickleImportScan": None}
        return entry

    def _info(self, repo: _Repo, commit: _Commit, blobs: bool) -> dict:
        siblings = []
        for path, blob in sorted(commit.files.items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling["size"] = blob.size
                sibling["blobId"] = blob.oid
                if blob.lfs:
                    sibling["lfs"] = {"size": blob.size, "sha256": blob.sha256, "pointerSize": blob.pointer_size}
            siblings.append(sibling)
        owner = repo.repo_id.split("/")[0]
        return {"_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24], "id": repo.repo_id, "author": owner,
                "sha": commit.sha, "lastModified": _iso(commit.date), "createdAt": _iso(repo.created),
                "private": repo.private, "gated": repo.gated, "disabled": False, "downloads": 0, "likes": 0,
                "tags": [], "siblings": siblings,
                "usedStorage": sum(b.size for b in {b.sha256: b for c in repo.commits.values()
                                                     for b in c.files.values()}.values())}


def _split_revision(segments: list[str]) -> tuple[str, list[str]]:
    """(revision, remaining raw segments): one encoded segment, or refs/pr/N, refs/convert/X unencoded."""
    if len(segments) >= 3 and segments[0] == "refs" and segments[1] in ("pr", "convert"):
        return "/".join(segments[:3]), segments[3:]
    return unquote(segments[0]), segments[1:]


def _parse_range(header: Optional[str], size: int) -> Optional[tuple[int, int]]:
    """Inclusive (first, last) byte of a single `bytes=` range; None for no/ignored range."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first_s, _, last_s = header[6:].strip().partition("-")
    try:
        if first_s == "":
            n = int(last_s)
            if n <= 0:
                raise _HubError(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{size}"})
            return max(0, size - n), size - 1
        first = int(first_s)
        last = int(last_s) if last_s else size - 1
    except ValueError:
        return None
    if first >= size or last < first:
        raise _HubError(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{size}"})
    return first, min(last, size - 1)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "HubStandIn/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
        pass

    @property
    def hub(self) -> HubStandIn:
        return self.server.standin  # type: ignore[attr-defined]

    def do_GET(self) -> None:  # noqa: N802
        self._serve("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def _serve(self, method: str) -> None:
        self.hub._begin()
        self._recorded = False
        self._ctx = None
        try:
            self._answer(method)
        finally:
            if not self._recorded:  # an unexpected failure: still count the request
                self._done(500, 0)

    def _answer(self, method: str) -> None:
        split = urlsplit(self.path)
        decoded = unquote(split.path)
        body = b""
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            body = self.rfile.read(length)
        self._ctx = {"method": method, "path": decoded, "query": split.query, "kind": "other",
                                     "repo": None, "revision": None, "file": None}
        self._classify(split.path)
        fault = self.hub._take_fault(method, decoded)
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.status == "drop":
                self._done(0, 0)
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault.status is not None:
                auth = self.headers.get("Authorization") or ""
                headers = {k: v.replace("{authorization}", f"Authorization: {auth}") for k, v in fault.headers.items()}
                message = headers.get("X-Error-Message", f"injected {fault.status}")
                self._json(int(fault.status), {"error": message}, headers)
                return
        try:
            if self.server.role == "cdn":  # type: ignore[attr-defined]
                self._cdn(method, split.path, split.query)
            else:
                self._route(method, split.path, split.query, body)
        except _HubError as err:
            headers = dict(err.extra)
            if err.code:
                headers["X-Error-Code"] = err.code
            headers["X-Error-Message"] = err.message
            self._json(err.status, {"error": err.message}, headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _classify(self, raw_path: str) -> None:
        """Fill kind/repo/revision/file of the context from the URL alone (the routes refine it)."""
        segs = raw_path.strip("/").split("/")
        if segs[:2] == ["api", "datasets"] and len(segs) >= 4:
            self._ctx["repo"] = f"{unquote(segs[2])}/{unquote(segs[3])}"
            self._ctx["kind"] = segs[4] if len(segs) > 4 and segs[4] != "revision" else "info"
            if len(segs) > 5:
                self._ctx["revision"], rest = _split_revision(segs[5:])
        elif segs[:1] == ["datasets"] and len(segs) >= 6 and segs[3] == "resolve":
            self._ctx.update(kind="resolve", repo=f"{unquote(segs[1])}/{unquote(segs[2])}")
            self._ctx["revision"], rest = _split_revision(segs[4:])
            self._ctx["file"] = unquote("/".join(rest))
        elif segs[:1] == ["blobs"]:
            self._ctx["kind"] = "cdn"
            query = parse_qs(urlsplit(self.path).query)
            self._ctx["file"] = query.get("name", [None])[0]
            self._ctx["repo"] = query.get("repo", [None])[0]

    def _token(self) -> Optional[str]:
        auth = self.headers.get("Authorization")
        if not auth:
            return None
        scheme, _, value = auth.partition(" ")
        return value.strip() if scheme.lower() == "bearer" else auth

    def _route(self, method: str, raw_path: str, query: str, body: bytes) -> None:
        hub, token = self.hub, self._token()
        segs = [s for s in raw_path.split("/") if s != ""]
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        if segs[:2] == ["api", "datasets"] and len(segs) == 2 and method == "GET":
            self._ctx["kind"] = "list"
            return self._json(200, self._list(params, token))
        if segs[:2] == ["api", "models"] or segs[:2] == ["api", "spaces"] or segs[:1] in (["models"], ["spaces"]):
            raise _HubError(401 if token is None else 404, "RepoNotFound", "Repository not found")
        if segs[:2] == ["api", "datasets"] and len(segs) >= 4:
            repo_id = f"{unquote(segs[2])}/{unquote(segs[3])}"
            self._ctx["repo"] = repo_id
            repo = hub._repo_for(repo_id, token)
            rest = segs[4:]
            if not rest or rest[0] == "revision":
                self._ctx["kind"] = "info"
                revision = _split_revision(rest[1:])[0] if len(rest) > 1 else None
                self._ctx["revision"] = revision
                commit = hub._resolve_revision(repo, revision)
                return self._json(200, hub._info(repo, commit, params.get("blobs", "").lower() in ("1", "true")))
            if rest[0] == "tree" and len(rest) >= 2:
                self._ctx["kind"] = "tree"
                revision, path_segs = _split_revision(rest[1:])
                self._ctx["revision"] = revision
                return self._tree(repo, revision, unquote("/".join(path_segs)).strip("/"), params, raw_path)
            if rest[0] == "paths-info" and len(rest) >= 2 and method == "POST":
                self._ctx["kind"] = "paths-info"
                revision = _split_revision(rest[1:])[0]
                self._ctx["revision"] = revision
                return self._paths_info(repo, revision, body)
            if rest[0] == "refs" and len(rest) == 1:
                self._ctx["kind"] = "refs"
                return self._json(200, self._refs(repo, params))
            if rest[0] == "commits" and len(rest) >= 2:
                self._ctx["kind"] = "commits"
                revision = _split_revision(rest[1:])[0]
                self._ctx["revision"] = revision
                return self._json(200, self._commits(repo, hub._resolve_revision(repo, revision)))
        if segs[:1] == ["datasets"] and len(segs) >= 6 and segs[3] == "resolve" and method in ("GET", "HEAD"):
            repo_id = f"{unquote(segs[1])}/{unquote(segs[2])}"
            self._ctx.update(kind="resolve", repo=repo_id)
            revision, path_segs = _split_revision(segs[4:])
            path = unquote("/".join(path_segs))
            self._ctx.update(revision=revision, file=path)
            repo = hub._repo_for(repo_id, token)
            commit = hub._resolve_revision(repo, revision)
            hub._check_gate(repo, token)
            return self._resolve(method, repo, commit, path)
        raise _HubError(404, None, f"Sorry, we can't find the page you are looking for: {raw_path}")

    # -- endpoint bodies ------------------------------------------------------------------

    def _list(self, params: dict, token: Optional[str]) -> list[dict]:
        hub, out = self.hub, []
        with hub._lock:
            repos = list(hub._repos.values())
        for repo in sorted(repos, key=lambda r: r.repo_id):
            if repo.private and token not in repo.tokens:
                continue
            if params.get("author") and repo.repo_id.split("/")[0] != params["author"]:
                continue
            if params.get("search") and params["search"] not in repo.repo_id:
                continue
            commit = hub._resolve_revision(repo, "main") if "main" in repo.branches else None
            out.append({"_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24], "id": repo.repo_id,
                        "author": repo.repo_id.split("/")[0], "private": repo.private, "gated": repo.gated,
                        "downloads": 0, "likes": 0, "tags": [],
                        **({"sha": commit.sha, "lastModified": _iso(commit.date)} if commit else {})})
        return out

    def _tree(self, repo: _Repo, revision: str, path: str, params: dict, raw_path: str) -> None:
        hub = self.hub
        commit = hub._resolve_revision(repo, revision)
        recursive = params.get("recursive", "").lower() in ("1", "true")
        expand = params.get("expand", "").lower() in ("1", "true")
        entries = hub._entries(repo, commit, path, recursive, expand)
        page = hub.tree_page_size_expand if expand else hub.tree_page_size
        start = int(params.get("cursor", "0") or 0)
        chunk = entries[start:start + page]
        headers = {}
        mode = hub.hostile.get("tree_next")
        if mode == "repeat":
            chunk = entries[:page]
        if mode == "fresh" and not chunk:
            prefix = path + "/" if path else ""
            chunk = [{"type": "file", "oid": f"{i:040x}", "size": 1, "path": f"{prefix}phantom-{i:09d}.bin"}
                     for i in range(start, start + page)]
        if start + page < len(entries) or mode in ("endless", "repeat", "foreign", "fresh"):
            origin = hub.cdn_endpoint if mode == "foreign" else hub.endpoint
            nxt = (f"{origin}{raw_path}?recursive={str(recursive).lower()}&expand={str(expand).lower()}"
                   f"&cursor={start + page}")
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._json(200, chunk, headers)

    def _paths_info(self, repo: _Repo, revision: str, body: bytes) -> None:
        hub = self.hub
        commit = hub._resolve_revision(repo, revision)
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            data = json.loads(body or b"{}")
            paths, expand = list(data.get("paths", [])), bool(data.get("expand", False))
        else:
            form = parse_qs(body.decode(), keep_blank_values=True)
            paths = form.get("paths", [])
            expand = form.get("expand", ["false"])[-1].lower() in ("1", "true")
        out = []
        for path in paths:
            path = path.strip("/")
            if path in commit.files or any(p.startswith(path + "/") for p in commit.files):
                out.append(hub._entry(repo, commit, path, expand))
        self._json(200, out)

    def _refs(self, repo: _Repo, params: dict) -> dict:
        with self.hub._lock:
            out = {"branches": [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": s}
                                for n, s in sorted(repo.branches.items())],
                   "tags": [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": s}
                            for n, s in sorted(repo.tags.items())],
                   "converts": []}
            if params.get("include_prs"):
                out["pullRequests"] = [{"name": n, "ref": n, "targetCommit": s} for n, s in sorted(repo.pulls.items())]
        return out

    def _commits(self, repo: _Repo, commit: _Commit) -> list[dict]:
        out, current = [], commit
        while True:
            out.append({"id": current.sha, "title": current.title, "message": "", "authors": [{"user": "stand-in"}],
                        "date": _iso(current.date)})
            if current.parent is None:
                return out
            current = repo.commits[current.parent]

    def _resolve(self, method: str, repo: _Repo, commit: _Commit, path: str) -> None:
        hub = self.hub
        blob = commit.files.get(path)
        base = {"X-Repo-Commit": commit.sha}
        if blob is None:
            raise _HubError(404, "EntryNotFound", "Entry not found", base)
        if blob.lfs and hub.lfs_redirect:
            location = (f"{hub.cdn_endpoint}/blobs/{blob.sha256}?repo={quote(repo.repo_id, safe='')}"
                        f"&name={quote(path, safe='')}")
            headers = {**base, "Location": location, "ETag": f'"{blob.oid}"', "X-Linked-Etag": f'"{blob.sha256}"',
                       "X-Linked-Size": str(blob.size), "Content-Length": "0"}
            return self._send(302, headers, b"")
        etag = f'"{blob.sha256}"' if blob.lfs else f'"{blob.oid}"'
        headers = {**base, "ETag": etag}
        if blob.lfs:
            headers.update({"X-Linked-Etag": etag, "X-Linked-Size": str(blob.size)})
        self._content(method, blob, headers)

    def _cdn(self, method: str, raw_path: str, query: str) -> None:
        hub = self.hub
        segs = [s for s in raw_path.split("/") if s]
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        self._ctx.update(kind="cdn", repo=params.get("repo"), file=params.get("name"))
        if len(segs) != 2 or segs[0] != "blobs" or method not in ("GET", "HEAD") or hub._store is None:
            raise _HubError(404, None, "NoSuchKey")
        digest = segs[1]
        store = hub._store / digest
        if len(digest) != 64 or not store.is_file():
            raise _HubError(404, None, "NoSuchKey")
        size = store.stat().st_size
        blob = _Blob(oid="", size=size, sha256=digest, lfs=True, pointer_size=0, store=store)
        self._content(method, blob, {"ETag": f'"{digest}"'})

    def _content(self, method: str, blob: _Blob, headers: dict) -> None:
        span = None if self.hub.hostile.get("ignore_range") else _parse_range(self.headers.get("Range"), blob.size)
        slow = float(self.hub.hostile.get("slow_bytes") or 0)
        headers = {**headers, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if span is None:
            first, last, status = 0, blob.size - 1, 200
        else:
            first, last = span
            status = 206
            headers["Content-Range"] = f"bytes {first}-{last}/{blob.size}"
        length = max(0, last - first + 1)
        headers["Content-Length"] = str(length)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        sent = 0
        if method == "HEAD" or length == 0:
            self._done(status, 0)
            return
        try:
            with open(blob.store, "rb") as f:
                f.seek(first)
                remaining = length
                while remaining:
                    chunk = f.read(1 if slow else min(_CHUNK, remaining))
                    if slow:
                        time.sleep(slow)
                        self.wfile.flush()
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    remaining -= len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self._done(status, sent)

    def _json(self, status: int, payload: Any, headers: Optional[Mapping[str, str]] = None) -> None:
        body = b"" if self.command == "HEAD" else json.dumps(payload).encode()
        self._send(status, {"Content-Type": "application/json; charset=utf-8", **(headers or {}),
                            "Content-Length": str(len(body))}, body)

    def _send(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        sent = 0
        try:
            if body:
                self.wfile.write(body)
                sent = len(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        self._done(status, sent)

    def _done(self, status: int, sent: int) -> None:
        if self._recorded:
            return
        self._recorded = True
        ctx = getattr(self, "_ctx", None) or {"method": self.command, "path": self.path, "query": "",
                                              "kind": "other", "repo": None, "revision": None, "file": None}
        self.hub._record(RequestRecord(method=ctx["method"], path=ctx["path"], revision=ctx["revision"],
                                       file=ctx["file"], range=self.headers.get("Range"), status=status,
                                       bytes_sent=sent, kind=ctx["kind"], repo=ctx["repo"], query=ctx["query"],
                                       authorized=self.headers.get("Authorization") is not None))
