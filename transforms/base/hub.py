"""Datasets on the Hugging Face Hub, read in place: `hf://datasets/OWNER/NAME[@REVISION]`.

A LeRobot dataset on the Hub holds hundreds of GB of MP4s, of which an import reads only each file's
head and `moov`, plus the Parquet row groups its episodes need. Reading them where they are, by range,
costs a fraction of downloading the repository first. This module is the ground floor for that:

* `pin` turns a root with a moving revision (a branch, a tag, nothing = `main`) into a root at the
  commit it points to now, `hf://datasets/OWNER/NAME@<40-hex sha>`, with ONE request. Everything a run
  reads, and every URI it writes into its output, is at that commit, so a run is consistent even if
  the branch moves while it runs, and a clip's URI reads the same bytes months later.
* `filesystem` gives the fsspec filesystem `storage` reads `hf://` URIs with: huggingface_hub's
  HfFileSystem, made to read exactly the ranges asked for (no 5 MiB read-ahead, no whole-file
  streaming that cannot seek), to retry what is worth a retry, and to skip the per-thread "does this
  revision exist" request for commits this process pinned.
* `retrying` retries rate limits, server errors and timeouts with backoff, counts each retry
  (`retry_count`, and every listener added with `add_retry_listener`, which is how the Beam layer
  turns them into a counter) and logs one line per retry naming the repo and the status, never the
  token (it travels in a header that nothing here prints; `redact` is applied to every message made
  from a library's exception all the same).
* A missing repo, a gated repo without access and an unknown revision are `LeRobotImportError`s
  (rules `hub_access`, `hub_revision`) naming the repo and the next step. A Hub that cannot be reached
  at all (offline mode, a host name that does not resolve) is `hub_unreachable` at the first request:
  no retry can help it.

The token comes from where huggingface_hub looks (HF_TOKEN, the `hf auth login` cache). huggingface_hub
is an optional dependency (the `[hub]` extra); without it an `hf://` URL is a clear error naming it.
Pure: no Beam.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import hashlib
import logging
import random
import re
import socket
import threading
import time
from typing import Any, Callable, Optional, TypeVar

from transforms.base import run_limits
from transforms.base.errors import LeRobotImportError, quote
from transforms.base.errors import redact as errors_redact

T = TypeVar("T")

_LOG = logging.getLogger(__name__)

PREFIX = "hf://"
DATASETS_PREFIX = "hf://datasets/"
#: What to install for `hf://` URLs.
INSTALL_HINT = "pip install 'lerobot-beam-import[hub]' (or pip install huggingface_hub)"
#: HTTP statuses worth a retry: request timeout, rate limit, server errors (what huggingface_hub retries too).
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: Exception class names (httpx's, whatever module huggingface_hub bundles it as, or requests' in older
#: huggingface_hub releases) of a request that never got an answer: a timeout, a reset or refused
#: connection, a connection dropped mid-answer.
_TRANSIENT_NAMES = frozenset({"TimeoutException", "NetworkError", "RemoteProtocolError", "ConnectError",
                              "ReadTimeout", "ConnectTimeout", "ReadError", "WriteError", "PoolTimeout",
                              "Timeout", "ConnectionError", "ChunkedEncodingError"})
#: A request is tried this many times in all before its last error is raised.
ATTEMPTS = 6
#: The first wait; it doubles per retry (with jitter) up to MAX_WAIT_S.
BACKOFF_S = 0.5
#: No wait is longer than this, even when the Hub's Retry-After asks for more.
MAX_WAIT_S = 30.0
#: A commit as the Hub names it.
_SHA = re.compile(r"^[0-9a-f]{40}$")
#: An owner or repository name on the Hub.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# ---- URLs ----------------------------------------------------------------------------------------


def is_hub(uri: str) -> bool:
    """Whether `uri` is an `hf://` URL."""
    return isinstance(uri, str) and uri.startswith(PREFIX)


@dataclasses.dataclass(frozen=True)
class HubPath:
    """A path in a Hub dataset repository, as `hf://datasets/OWNER/NAME[@REVISION][/PATH]` writes it.

    Args:
        owner: the user or organisation.
        name: the dataset's name.
        revision: a branch, tag or commit (percent-encoded in the URL when it holds `/`), or None
            for the default branch.
        path: the path inside the repository ("" for the root).
    """

    owner: str
    name: str
    revision: Optional[str]
    path: str = ""

    @property
    def repo_id(self) -> str:
        return f"{self.owner}/{self.name}"

    @property
    def commit(self) -> Optional[str]:
        """The revision when it is a commit sha (a pinned path), else None."""
        return self.revision if self.revision and _SHA.match(self.revision) else None

    @property
    def repo_uri(self) -> str:
        """`hf://datasets/OWNER/NAME`: the repository, at no revision."""
        return f"{DATASETS_PREFIX}{self.repo_id}"

    @property
    def uri(self) -> str:
        rev = "" if self.revision is None else "@" + _quote_revision(self.revision)
        return f"{self.repo_uri}{rev}" + (f"/{self.path}" if self.path else "")

    @property
    def web_url(self) -> str:
        """The dataset's page, for messages."""
        return f"https://huggingface.co/datasets/{self.repo_id}"


def _quote_revision(revision: str) -> str:
    from urllib.parse import quote as url_quote
    return url_quote(revision, safe="")


def parse(uri: str) -> HubPath:
    """`hf://datasets/OWNER/NAME[@REVISION][/PATH]` -> HubPath.

    Only dataset repositories are dataset roots; a model or Space URL, a missing owner or name, or a
    name with characters the Hub does not allow is the `url` rule.

    Args:
        uri: the URL.
    Raises:
        LeRobotImportError: rule `url`, naming the URL and the form expected.
    """
    from urllib.parse import unquote

    form = "hf://datasets/OWNER/NAME[@REVISION] (REVISION a branch, tag or commit; percent-encode a `/` in it)"
    if not is_hub(uri) or not uri.startswith(DATASETS_PREFIX):
        raise LeRobotImportError("url", f"{quote(uri)} is not a Hub dataset URL: give {form}")
    rest = uri[len(DATASETS_PREFIX):]
    owner, _, rest = rest.partition("/")
    head, _, path = rest.partition("/")
    name, at, revision = head.partition("@")
    if not _NAME.match(owner or "") or not _NAME.match(name or "") or (at and not revision):
        raise LeRobotImportError("url", f"{quote(uri)} does not name a Hub dataset: give {form}")
    return HubPath(owner, name, unquote(revision) if at else None, path.strip("/"))


def commit_of(uri: str) -> Optional[str]:
    """The commit a pinned Hub URL reads at (`hf://datasets/o/n@<sha>/...`), None for any other URI."""
    if not is_hub(uri) or not uri.startswith(DATASETS_PREFIX):
        return None
    try:
        return parse(uri).commit
    except LeRobotImportError:
        return None


def repo_uri(uri: str) -> Optional[str]:
    """`hf://datasets/OWNER/NAME` for any Hub dataset URL (whatever its revision and path), else None."""
    if not is_hub(uri):
        return None
    try:
        return parse(uri).repo_uri
    except LeRobotImportError:
        return None


def dataset_name(uri: str) -> str:
    """What a Hub dataset's output folder is called in a bulk run: NAME, or the last folder of the path when
    the dataset lies in a folder of the repository (never the `@revision`)."""
    ref = parse(uri)
    return ref.path.rsplit("/", 1)[-1] if ref.path else ref.name


# ---- retries -----------------------------------------------------------------------------------


class _RetryCount:
    """Retries made in this process; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0
        self.listeners: list[Callable[[], None]] = []

    def add(self) -> None:
        with self._lock:
            self.value += 1
            listeners = list(self.listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:  # noqa: BLE001 - counting must never fail a read
                pass


_RETRIES = _RetryCount()


def retry_count() -> int:
    """How many Hub requests this process retried so far."""
    return _RETRIES.value


class _LibraryRetries(logging.Handler):
    """Counts the retries huggingface_hub makes itself (tree listing pages go through its own backoff):
    it announces each one with a log line, which is the only sign of it outside the library."""

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith(("Retrying in", "Rate limited.")):
            _RETRIES.add()


_LIBRARY_HANDLER = _LibraryRetries(logging.WARNING)


def _count_library_retries() -> None:
    logger = logging.getLogger("huggingface_hub.utils._http")
    if _LIBRARY_HANDLER not in logger.handlers:
        logger.addHandler(_LIBRARY_HANDLER)


def add_retry_listener(listener: Callable[[], None]) -> None:
    """Call `listener()` on every retry (once per listener object; the Beam layer adds a counter here).

    Args:
        listener: a function without arguments; its exceptions are ignored.
    """
    with _RETRIES._lock:
        if listener not in _RETRIES.listeners:
            _RETRIES.listeners.append(listener)


def _status(ex: BaseException) -> Optional[int]:
    response = getattr(ex, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


#: How a resolver says a host name does not resolve, as the HTTP client's message quotes it (Linux, macOS,
#: Windows), when the socket.gaierror itself is not in the exception's chain.
_NO_SUCH_HOST = re.compile(r"Name or service not known|nodename nor servname|Temporary failure in name resolution|"
                           r"getaddrinfo failed|No address associated with hostname|\[Errno -[235]\]")


def unreachable(ex: BaseException) -> Optional[str]:
    """Why the Hub cannot be reached at all (offline mode, the endpoint's host name does not resolve), with
    the next step; None for any other error. No retry helps these, so none is made."""
    seen, todo = set(), [ex]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if type(e).__name__ == "OfflineModeIsEnabled":
            return ("huggingface_hub is in offline mode (HF_HUB_OFFLINE is set), so hf:// datasets cannot be "
                    "read: unset HF_HUB_OFFLINE, or import a local copy of the dataset")
        if isinstance(e, socket.gaierror) or _NO_SUCH_HOST.search(str(e)):
            return (f"the Hub's host name does not resolve ({_endpoint()}): this machine has no network or no "
                    "DNS; check the connection (or HF_ENDPOINT) and import again")
        todo += [e.__cause__, e.__context__]
    return None


def _endpoint() -> str:
    try:
        from huggingface_hub import constants
        return constants.ENDPOINT
    except ImportError:  # pragma: no cover - hub errors need huggingface_hub
        return "https://huggingface.co"


def is_transient(ex: BaseException) -> bool:
    """A rate limit, a server error, a timeout or a dropped connection: worth another try."""
    if unreachable(ex):
        return False
    if _status(ex) in RETRY_STATUSES:
        return True
    return any(c.__name__ in _TRANSIENT_NAMES for c in type(ex).__mro__)


def is_hub_error(ex: BaseException) -> bool:
    """An error raised by huggingface_hub or its HTTP client: `retrying` has already retried it if it
    was worth it, so storage's own retries leave it alone."""
    return getattr(ex, "hub_retried", False) or any(
        (c.__module__ or "").split(".")[0] in ("huggingface_hub", "httpx", "httpx2") for c in type(ex).__mro__)


def _wait_s(ex: BaseException, attempt: int) -> float:
    response = getattr(ex, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        retry_after = float(headers.get("Retry-After")) if headers.get("Retry-After") is not None else None
    except (TypeError, ValueError):
        retry_after = None
    if retry_after is not None and retry_after >= 0:
        return min(MAX_WAIT_S, retry_after)
    return min(MAX_WAIT_S, BACKOFF_S * (2 ** attempt) * (0.5 + random.random()))


def retrying(fn: Callable[[], T], *, what: str, repo: str, attempts: Optional[int] = None) -> T:
    """Call `fn` (one Hub request), retrying rate limits, server errors and timeouts with backoff.

    Each retry is counted and logged (repo, what, status; never a header, so never the token). The
    last error is raised as it is, marked `hub_retried` so storage does not retry it again.

    Args:
        fn: the request.
        what: what it asks, for the log ("the revision lookup", "bytes 0..65535 of videos/a.mp4").
        repo: OWNER/NAME.
        attempts: tries in all (default ATTEMPTS).
    """
    attempts = attempts or ATTEMPTS
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as ex:  # noqa: BLE001 - re-raised unless transient
            if attempt == attempts - 1 or not is_transient(ex) or getattr(ex, "hub_retried", False):
                try:
                    ex.hub_retried = True  # type: ignore[attr-defined]
                except AttributeError:
                    pass
                raise
            wait = _wait_s(ex, attempt)
            _RETRIES.add()
            _LOG.warning("the Hub answered %s for %s of %s; retry %d of %d in %.1f s", _status(ex)
                         or type(ex).__name__, what, repo, attempt + 1, attempts - 1, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


# ---- the token ---------------------------------------------------------------------------------


def redact(text: str) -> str:
    """`text` without the Hub token or anything shaped like a credential (`errors.redact`, the one
    redaction every message, record and log line of the importer goes through)."""
    return errors_redact(text)


# ---- pinning -------------------------------------------------------------------------------------

#: (repo id, commit) pairs this process resolved: known to exist, so not asked again per thread.
_PINNED: set[tuple[str, str]] = set()
_PINNED_LOCK = threading.Lock()


def _hub():
    """huggingface_hub, or the `url` rule naming the extra to install."""
    try:
        import huggingface_hub
    except ImportError:
        raise LeRobotImportError("url", f"reading hf:// URLs needs huggingface_hub, which is not installed: "
                                 f"{INSTALL_HINT}") from None
    _count_library_retries()
    _guard_listings()
    return huggingface_hub


# ---- listings --------------------------------------------------------------------------------------
#
# huggingface_hub follows a listing's `Link: rel="next"` wherever it points, with the request's headers
# (the token among them), for as long as pages come. A listing the importer asks for follows next pages
# only on the endpoint's own origin, for at most the run's page and entry bounds within
# LIST_DEADLINE_S, and stops at an empty page; a page that repeats an earlier one, or a next link to a
# page already read, ends it at once (a listing never names an entry twice: one that loops would
# otherwise run to its bounds). huggingface_hub's pager is replaced by this one (every listing of the
# library goes through it: trees, datasets, commits).

# The page and entry bounds are the run's (`run_limits.RunLimits`: --hub_list_max_pages, --hub_list_max_items).
#: A listing ends within this many seconds.
LIST_DEADLINE_S = 900.0


def _origin(url: str) -> tuple[str, str, Optional[int]]:
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def guarded_pages(path: str, params: Any, headers: dict, timeout: Optional[float] = None, *,
                  get: Optional[Callable[..., Any]] = None) -> Any:
    """huggingface_hub's `_paginate_pages` (yields (page, finished)), bounded and kept on one origin.

    Args:
        path: the first page's URL (on the endpoint).
        params: its query parameters.
        headers: the request headers (the token among them): sent to `path`'s origin only.
        timeout: per request.
        get: the request function (huggingface_hub's `http_backoff("GET", ...)` by default).
    Raises:
        LeRobotImportError: rule `io` when a next page points to another origin, or a bound is passed.
    """
    from huggingface_hub.utils import http_backoff

    get = get or (lambda url, **kw: http_backoff("GET", url, **kw))
    limits = run_limits.current()
    max_pages, max_items = limits.hub_list_max_pages, limits.hub_list_max_items
    key = (limits.run_id, path, repr(sorted(dict(params or {}).items())), max_pages, max_items)
    refused = _REFUSED_LISTINGS.get(key) if limits.run_id else None
    if refused is not None:  # refused once in this run: not paged through again by the next caller
        raise LeRobotImportError(refused.rule, refused.message)
    try:
        yield from _bounded_pages(path, params, headers, timeout, get, max_pages, max_items)
    except _ListingRefused as ex:
        with _GUARD_LOCK:
            while len(_REFUSED_LISTINGS) >= 256:
                _REFUSED_LISTINGS.pop(next(iter(_REFUSED_LISTINGS)))
            _REFUSED_LISTINGS[key] = ex
        raise


#: Listings a run refused by a bound, as loops or for a foreign next page ((run, path, params, bounds) -> the
#: error): a listing that never ends costs its bounds once per run, not once per caller (the check, then
#: the planning, list the same folder).
_REFUSED_LISTINGS: dict[tuple, LeRobotImportError] = {}


class _ListingRefused(LeRobotImportError):
    """A listing refused for what it is (bounds passed, a loop, a foreign next page), not for the moment."""


def _bounded_pages(path: str, params: Any, headers: dict, timeout: Optional[float], get: Callable[..., Any],
                   max_pages: int, max_items: int) -> Any:
    from huggingface_hub.utils import hf_raise_for_status

    home = _origin(path)
    run_limits.check(f"the Hub's listing {path}")
    deadline = time.monotonic() + LIST_DEADLINE_S
    response = get(path, params=params, headers=headers, timeout=timeout)
    pages = items = 0
    seen_pages: dict[bytes, int] = {}  # a digest of each page's content -> its number
    visited = {path}
    while True:
        hf_raise_for_status(response)
        page = response.json()
        pages += 1
        items += len(page) if isinstance(page, list) else 1
        following = response.links.get("next", {}).get("url")
        if following is not None and not page:
            _LOG.warning("the Hub's listing %s answered an empty page that links another: stopped there", path)
            following = None
        if following is not None:
            digest = hashlib.sha256(response.content).digest()
            again = seen_pages.setdefault(digest, pages)
            if again != pages or following in visited:
                what = (f"its page {pages:,} repeats page {again:,}" if again != pages
                        else f"page {pages:,} links back to a page already read")
                raise _ListingRefused("io", f"the Hub's listing {path} loops: {what}, and a listing never names "
                                         "an entry twice; it was stopped there: try again later")
            visited.add(following)
        if following is not None and _origin(following) != home:
            scheme, host, port = _origin(following)
            raise _ListingRefused("io", f"the Hub's listing {path} links its next page to another host "
                                     f"({scheme}://{host}:{port}); the listing is not followed there (the request "
                                     "carries the token): check HF_ENDPOINT, and try again later")
        if following is not None and (pages >= max_pages or items >= max_items):
            raise _ListingRefused("limit", f"the Hub's listing {path} goes on past {pages:,} pages and {items:,} "
                                     f"entries (at most {max_pages:,} pages and {max_items:,} entries are "
                                     "read): a repository that large is not a dataset root (--hub_list_max_pages, "
                                     "--hub_list_max_items raise the bounds)")
        if following is not None and time.monotonic() > deadline:
            raise LeRobotImportError("io", f"the Hub's listing {path} took more than {LIST_DEADLINE_S:.0f} s "
                                     f"({pages:,} pages): try again later")
        yield page, following is None
        if following is None:
            return
        run_limits.check(f"page {pages + 1:,} of the Hub's listing {path}")
        response = get(following, headers=headers, timeout=timeout)


def _guarded_paginate(path: str, params: Any, headers: dict, timeout: Optional[float] = None) -> Any:
    for page, _ in guarded_pages(path, params, headers, timeout=timeout):
        yield from page


_GUARD_LOCK = threading.Lock()


def _guard_listings() -> None:
    """Put `guarded_pages` in place of huggingface_hub's pager (once per process)."""
    from huggingface_hub import hf_api
    from huggingface_hub.utils import _pagination

    with _GUARD_LOCK:
        if getattr(_pagination, "_lerobot_guarded", False):
            return
        _pagination._paginate_pages = guarded_pages
        _pagination.paginate = _guarded_paginate
        hf_api._paginate_pages = guarded_pages
        hf_api.paginate = _guarded_paginate
        _pagination._lerobot_guarded = True


def _api() -> Any:
    """An HfApi at the configured endpoint (HF_ENDPOINT), with the token from where huggingface_hub looks."""
    _hub()
    from huggingface_hub import HfApi, constants
    return HfApi(endpoint=constants.ENDPOINT)


def pin(uri: str) -> str:
    """The Hub dataset root `uri` at the commit its revision names now: `hf://datasets/OWNER/NAME@<sha>`.

    One request (the revision lookup); the commit is then what every read of the run names.

    Args:
        uri: `hf://datasets/OWNER/NAME[@REVISION]`.
    Returns:
        The pinned root (any path in `uri` kept).
    Raises:
        LeRobotImportError: `url` (not a Hub dataset URL, huggingface_hub missing), `hub_access` (no such
            dataset, private or gated without access), `hub_revision` (no such revision), `io` (the Hub
            kept failing).
    """
    ref = parse(uri)
    api = _api()
    try:
        info = retrying(lambda: api.dataset_info(ref.repo_id, revision=ref.revision), what="the revision lookup",
                        repo=ref.repo_id)
    except Exception as ex:  # noqa: BLE001 - translated into a rule, or re-raised
        raise hub_error(ex, ref) from None
    sha = getattr(info, "sha", None)
    if not isinstance(sha, str) or not _SHA.match(sha):
        raise LeRobotImportError("io", f"the Hub answered no commit for the dataset {ref.repo_id} at "
                                 f"{ref.revision or 'its default branch'}: try again later")
    with _PINNED_LOCK:
        _PINNED.add((ref.repo_id, sha))
    return dataclasses.replace(ref, revision=sha).uri


def hub_error(ex: BaseException, ref: HubPath, *, file: Optional[str] = None) -> LeRobotImportError:
    """A huggingface_hub error about dataset `ref` as the rule it breaks, naming the repo and the next step.

    Args:
        ex: what huggingface_hub (or its HTTP client) raised.
        ref: the dataset (and revision) asked for.
        file: the file being read, when a read failed.
    """
    _hub()
    from huggingface_hub import errors

    def error(rule: str, message: str) -> LeRobotImportError:
        return LeRobotImportError(rule, message, file=file)

    repo, page = ref.repo_id, ref.web_url
    at = f" at revision {quote(ref.revision)}" if ref.revision else ""
    status = _status(ex)
    why = unreachable(ex)
    if why:
        return error("hub_unreachable", f"cannot reach the Hub for the dataset {repo}{at}: {why}")
    if isinstance(ex, errors.GatedRepoError):
        return error("hub_access", f"the Hub dataset {repo} is gated and the token in use has not been granted "
                     f"access: accept its conditions at {page} with your account, then give that account's token "
                     "(HF_TOKEN or `hf auth login`) and import again")
    if isinstance(ex, errors.RevisionNotFoundError):
        return error("hub_revision", f"the Hub dataset {repo} has no revision {quote(ref.revision)}: give a branch, "
                     f"tag or commit it has (see {page}/tree/main and its branches and tags), or leave out "
                     "@REVISION for the default branch")
    if isinstance(ex, errors.RepositoryNotFoundError) or status == 404:
        return error("hub_access", f"the Hub dataset {repo} does not exist, or it is private and the token in use "
                     f"cannot read it: check the name at {page}; for a private dataset set HF_TOKEN (or run "
                     "`hf auth login`) with a token that can read it")
    if status in (401, 403):
        return error("hub_access", f"the Hub refused access to the dataset {repo}{at} ({status}): the token in use "
                     "is invalid or cannot read it; set HF_TOKEN (or run `hf auth login`) with a token that can "
                     "read it")
    if is_transient(ex):
        return error("io", f"the Hub kept failing for the dataset {repo}{at} after {ATTEMPTS} attempts "
                     f"({redact(_short(ex))}): try again later")
    return error("io", f"cannot read the Hub dataset {repo}{at}: {redact(_short(ex))}")


def _short(ex: BaseException) -> str:
    text = str(ex).strip().splitlines()
    return f"{type(ex).__name__}: {text[0] if text else ''}"


def list_datasets(pattern_uri: str) -> list[str]:
    """The Hub datasets `hf://datasets/OWNER/PATTERN` names (PATTERN a glob on the dataset name; OWNER
    literal), as unpinned roots sorted by name: one listing of the owner's datasets.

    Args:
        pattern_uri: e.g. `hf://datasets/lerobot/so101_*` or `hf://datasets/lerobot/*`.
    Raises:
        LeRobotImportError: `url` for a malformed pattern (a wildcard in the owner, a path after the
            name, a revision), `hub_access`/`io` when the listing fails.
    """
    rest = pattern_uri[len(DATASETS_PREFIX):] if pattern_uri.startswith(DATASETS_PREFIX) else ""
    owner, _, pattern = rest.partition("/")
    if not _NAME.match(owner or "") or not pattern or "/" in pattern.strip("/") or "@" in pattern:
        raise LeRobotImportError("url", f"{quote(pattern_uri)}: a Hub pattern is hf://datasets/OWNER/PATTERN, "
                                 "the wildcard in the dataset name only (no revision, no path)")
    pattern = pattern.strip("/")
    api = _api()
    try:
        found = retrying(lambda: [d.id for d in api.list_datasets(author=owner)], what="the datasets listing",
                         repo=owner)
    except Exception as ex:  # noqa: BLE001 - translated into a rule
        raise hub_error(ex, HubPath(owner, pattern, None)) from None
    names = sorted({i.split("/", 1)[1] for i in found if i.count("/") == 1 and i.split("/", 1)[0] == owner})
    return [f"{DATASETS_PREFIX}{owner}/{n}" for n in names if fnmatch.fnmatchcase(n, pattern)]


# ---- the filesystem ------------------------------------------------------------------------------


def filesystem() -> Any:
    """The filesystem `storage` reads `hf://` URLs with (one instance per thread and endpoint, as
    HfFileSystem caches them, so listings are reused).

    Raises:
        LeRobotImportError: rule `url` when huggingface_hub is not installed.
    """
    _hub()
    from huggingface_hub import constants
    return _filesystem_class()(endpoint=constants.ENDPOINT)


@functools.lru_cache(maxsize=1)
def _filesystem_class() -> type:
    from fsspec.spec import AbstractBufferedFile
    from huggingface_hub import constants
    from huggingface_hub.file_download import hf_hub_url
    from huggingface_hub.hf_file_system import HfFileSystem, HfFileSystemFile
    from huggingface_hub.utils import get_session, hf_raise_for_status

    class HubFile(HfFileSystemFile):
        """A file read by exact ranges: each read is one ranged GET at the path's revision, retried."""

        def _fetch_range(self, start: int, end: int) -> bytes:
            resolved = self.resolved_path
            url = hf_hub_url(resolved.repo_id, resolved.path_in_repo, repo_type=resolved.repo_type,
                             revision=resolved.revision, endpoint=self.fs.endpoint)
            headers = {"range": f"bytes={start}-{end - 1}", **self.fs._api._build_hf_headers()}

            def once() -> bytes:
                with get_session().stream("GET", url, headers=headers,
                                          timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
                    if response.status_code >= 400:
                        response.read()  # an error's body is a short JSON message
                        hf_raise_for_status(response)
                    return _range_body(response, start, end, resolved)

            try:
                return retrying(once, what=f"bytes {start}..{end} of {resolved.path_in_repo}",
                                repo=resolved.repo_id)
            except Exception as ex:  # noqa: BLE001 - a refusal is the dataset's rule; the rest stays as it is
                raise _read_error(ex, resolved) from None

        def read(self, length: int = -1) -> bytes:
            # A whole read is one ranged GET too: HfFileSystemFile would stream it through a second
            # file object with its own retries, uncounted here.
            return AbstractBufferedFile.read(self, length)

    class HubFileSystem(HfFileSystem):
        """HfFileSystem reading exact ranges, retrying transient failures, trusting pinned commits."""

        def _repo_and_revision_exist(self, repo_type: str, repo_id: str, revision: Optional[str]):
            if repo_type == "dataset" and revision and (repo_id, revision) in _PINNED:
                return True, None
            return retrying(lambda: HfFileSystem._repo_and_revision_exist(self, repo_type, repo_id, revision),
                            what="the revision lookup", repo=repo_id)

        def _open(self, path: str, mode: str = "rb", block_size: Optional[int] = None,
                  revision: Optional[str] = None, **kwargs):
            if "r" not in mode:
                return HfFileSystem._open(self, path, mode=mode, block_size=block_size, revision=revision, **kwargs)
            # No read-ahead: the callers ask for exactly the bytes they need (a moov, a row group).
            kwargs["cache_type"] = "none"
            return HubFile(self, path, mode=mode, revision=revision, block_size=block_size or 2 ** 20, **kwargs)

        # Listings need no wrapper: huggingface_hub pages them through its own backoff (counted by the
        # log handler above), and wrapping them again would multiply the attempts.

    HubFileSystem.__qualname__ = HubFileSystem.__name__ = "HubFileSystem"
    HubFile.__qualname__ = HubFile.__name__ = "HubFile"
    globals()["HubFileSystem"], globals()["HubFile"] = HubFileSystem, HubFile  # pickled by reference
    return HubFileSystem


#: One ranged read of the Hub gets at most this long, however slowly the bytes come.
READ_DEADLINE_S = 300.0


def _range_body(response: Any, start: int, end: int, resolved: Any) -> bytes:
    """The body of a ranged GET, as asked: exactly `end - start` bytes, streamed, within READ_DEADLINE_S.

    A server that ignores `Range` answers 200 with the whole file (an MP4 of gigabytes for a 4 KB moov
    read): that answer is refused from its status line, before its body is read; so is one that
    announces, or sends, another length."""
    want = end - start
    status = response.status_code
    length = response.headers.get("content-length")
    where = f"{resolved.path_in_repo} of the Hub dataset {resolved.repo_id}"
    if status != 206 and not (status == 200 and start == 0 and length is not None and length == str(want)):
        raise LeRobotImportError("io", f"the Hub answered {status} to a read of bytes {start}..{end} of {where}, "
                                 "not the range asked for (it ignored the Range header); the answer was not "
                                 "read: try again later, or check HF_ENDPOINT")
    if length is not None and length != str(want):
        raise LeRobotImportError("io", f"the Hub announced {quote(length)} bytes for a read of {want} bytes "
                                 f"({start}..{end}) of {where}; the answer was not read: try again later")
    deadline = time.monotonic() + READ_DEADLINE_S
    pace = run_limits.ReadPace(f"bytes {start}..{end} of {where}",
                               source=f"hf://datasets/{resolved.repo_id}@{resolved.revision}")
    chunks, got = [], 0
    for chunk in response.iter_bytes():
        pace.add(len(chunk))  # a byte every few seconds: under the floor rate long before READ_DEADLINE_S
        got += len(chunk)
        if got > want:
            raise LeRobotImportError("io", f"the Hub sent more than the {want} bytes asked for ({start}..{end}) of "
                                     f"{where}: try again later")
        chunks.append(chunk)
        run_limits.check(f"bytes {start}..{end} of {where}")
        if time.monotonic() > deadline:  # a byte every few seconds never trips the per-request timeout
            raise LeRobotImportError("io", f"reading bytes {start}..{end} of {where} took more than "
                                     f"{READ_DEADLINE_S:g} s (the Hub sent {got} bytes by then): try again later")
    if got != want:
        raise LeRobotImportError("io", f"the Hub sent {got} of the {want} bytes asked for ({start}..{end}) of "
                                 f"{where}: try again later")
    return b"".join(chunks)


def _read_error(ex: BaseException, resolved: Any) -> BaseException:
    """What a failed read raises: a missing file stays FileNotFoundError (storage names the file); a refusal
    (gated without access, private, invalid token) is `hub_access` naming the repo; anything else as it is."""
    from huggingface_hub import errors

    if isinstance(ex, errors.EntryNotFoundError):
        return FileNotFoundError(f"{resolved.path_in_repo} is not in the Hub dataset {resolved.repo_id}")
    if isinstance(ex, (errors.RepositoryNotFoundError, errors.RevisionNotFoundError)) or _status(ex) in (401, 403):
        owner, _, name = resolved.repo_id.partition("/")
        return hub_error(ex, HubPath(owner, name, resolved.revision), file=resolved.path_in_repo)
    return ex
