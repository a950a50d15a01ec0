"""Storage through fsspec: URIs, counted reads, atomic writes.

Every read of a dataset file goes through here so the pipeline can count bytes and requests, and
every write of an output file is atomic (temporary name, then a move), so a reader never takes a
partial file for a finished one.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import io
import os
import posixpath
import random
import re
import stat
import time
import uuid
from typing import IO, Callable, Optional, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from transforms.base import hub, run_limits
from transforms.base.errors import LeRobotImportError, quote, shorten

T = TypeVar("T")

TMP_MARK = ".tmp-"

#: Transient storage failures are retried this many times in all, with exponential backoff.
ATTEMPTS = 5
BACKOFF_S = 0.05
_PERMANENT = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)


#: Write failures no retry mends: the disk is full (or the quota used), the filesystem is read-only.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def is_transient(ex: BaseException) -> bool:
    """Connection resets, timeouts and server errors are worth a retry; a missing file is not."""
    # A refusal stays a refusal; the Hub's errors are retried where they are made.
    if isinstance(ex, _PERMANENT) or access_denied(ex) or hub.is_hub_error(ex):
        return False
    if isinstance(ex, OSError) and ex.errno in _NO_SPACE + _NOT_WRITABLE:
        return False
    return isinstance(ex, (OSError, ConnectionError, TimeoutError)) or type(ex).__name__ in (
        "HttpError", "ServiceUnavailable", "ClientError", "ServerDisconnectedError", "ClientOSError")


def with_retries(fn: Callable[[], T], *, attempts: int = ATTEMPTS, waiting_on: str = "") -> T:
    """Call `fn`, retrying transient failures (bounded, exponential backoff with jitter). Each attempt first
    checks the deadline of the run phase it serves (`run_limits.check`; `waiting_on` names the request)."""
    for attempt in range(attempts):
        run_limits.check(waiting_on)
        try:
            return fn()
        except BaseException as ex:  # noqa: BLE001 - re-raised unless transient
            if attempt == attempts - 1 or not is_transient(ex):
                raise
            time.sleep(BACKOFF_S * (2 ** attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path inside it) for a local path or a URL (`gs://`, `s3://`, `memory://`, ...).

    The URI is never read as a chain of filesystems (fsspec's `a::b` syntax): a dataset's names may
    hold `::` (a camera key, a templated file name), and a chain would read a file other than the one
    named. A scheme no installed filesystem handles is the `url` rule, not a library error."""
    if "://" not in uri:
        return _local(), LocalFileSystem._strip_protocol(os.path.abspath(uri))
    protocol = uri.split("://", 1)[0]
    if protocol in ("file", "local"):
        return _local(), LocalFileSystem._strip_protocol(uri)
    if protocol == "hf":  # read by exact ranges, retried, at the commit the URL names (see transforms.base.hub)
        fs = hub.filesystem()
        return fs, fs._strip_protocol(uri)
    if "::" in protocol:
        raise LeRobotImportError("url", f"{quote(uri)} chains filesystems with `::`, which the importer does not "
                                 "read: give the plain URL of the folder or file")
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise LeRobotImportError("url", f"{quote(uri)} starts with `{shorten(protocol, 40)}://`, a URL scheme no "
                                 "filesystem is known for: give a local path or a URL such as gs://BUCKET/PATH, "
                                 "s3://BUCKET/PATH or memory://PATH") from None
    except ImportError as ex:
        raise LeRobotImportError("url", f"reading {protocol}:// URLs needs a package that is not installed: "
                                 f"{ex}") from None
    path = cls._strip_protocol(uri)
    if protocol == "memory" and not path.startswith("/"):
        path = "/" + path  # what the memory filesystem makes of its own URLs
    return fsspec.filesystem(protocol, **cls._get_kwargs_from_urls(uri)), path


@functools.lru_cache(maxsize=1)
def _local() -> fsspec.AbstractFileSystem:
    return fsspec.filesystem("file")


def hub_commit(uri: str) -> Optional[str]:
    """The commit a Hub URL is pinned at (`hf://datasets/OWNER/NAME@<sha>/...`), else None."""
    return hub.commit_of(uri)


def hub_repo(uri: str) -> Optional[str]:
    """`hf://datasets/OWNER/NAME` for a Hub dataset URL at any revision, else None."""
    return hub.repo_uri(uri)


def same_dataset(a: str, b: str) -> bool:
    """Whether dataset roots `a` and `b` are one dataset: equal, or one Hub repository at two commits (a
    file unchanged between them is the same bytes under either URI)."""
    return a == b or (hub.repo_uri(a) is not None and hub.repo_uri(a) == hub.repo_uri(b))


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def normalize_root(uri: str) -> str:
    """A dataset/output root as a URI without trailing slash (`file:///abs/path` for local paths)."""
    fs, path = filesystem(uri)
    return to_uri(fs, path.rstrip("/") or "/")


def to_uri(fs: fsspec.AbstractFileSystem, path: str) -> str:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return "file://" + path
    return fs.unstrip_protocol(path)


def resolved(uri: str) -> str:
    """A root as one comparable string: local paths with symlinks resolved, URLs normalised."""
    fs, path = filesystem(uri)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return "file://" + os.path.realpath(path)
    return to_uri(fs, path.rstrip("/") or "/")


def within(inner: str, outer: str) -> bool:
    """Whether URI `inner` is `outer` or lies under it (both as `resolved` gives them)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def join(root_uri: str, relative: str) -> str:
    return root_uri.rstrip("/") + "/" + relative


def dataset_file(root_uri: str, relative: str) -> str:
    """The URI of a file of the dataset, refused if it would be read from outside the root or is not a
    regular file.

    `relative` is already free of `..`, schemes and absolute paths (the info.json model checks
    templates); on a local root a symlink could still point elsewhere, so the resolved path must stay
    inside the resolved root, or, for a Hugging Face cache snapshot, inside its repository's `blobs/`
    (where every file of a snapshot is a symlink to). Object stores have no symlinks and no special
    files. A local file that exists is also checked here to be a regular file (a FIFO would block the
    reader, a device would never end) and not a git-LFS pointer, whichever reader opens it next."""
    uri = join(root_uri, relative)
    fs, path = filesystem(uri)
    if is_local(fs):
        _, root_path = filesystem(root_uri)
        real_root = os.path.realpath(root_path)
        real = os.path.realpath(path)
        blobs = hf_cache_blobs(real_root)
        if not within_path(real, real_root) and not (blobs and within_path(real, blobs)):
            raise LeRobotImportError("path_outside_root", f"{relative} resolves to {real}, outside the dataset "
                                     f"root {real_root}; files outside the root are never read", file=relative)
        what = _what(relative)
        st = _local_stat(path)
        if st is not None:
            _raise_if_special(st, what=what, file=relative)
            if st.st_size < LFS_POINTER_MAX_BYTES:
                with open(path, "rb") as f:
                    raise_if_lfs_pointer(f.read(len(LFS_POINTER_PREFIX)), what=what, file=relative)
    return uri


def within_path(path: str, folder: str) -> bool:
    """Whether local `path` is `folder` or lies under it (both resolved)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@functools.lru_cache(maxsize=256)
def hf_cache_blobs(real_root: str) -> Optional[str]:
    """`<repo>/blobs` when `real_root` is (or lies inside) `<repo>/snapshots/<revision>` of a Hugging Face
    hub cache, whose files are symlinks into `<repo>/blobs/`; None otherwise."""
    parts = real_root.rstrip("/").split("/")
    for i in range(len(parts) - 1, 1, -1):
        if parts[i - 1] == "snapshots":
            blobs = "/".join(parts[:i - 1] + ["blobs"])
            return blobs if os.path.isdir(blobs) else None
    return None


def _what(relative: str) -> str:
    """What a dataset file is, for messages, from where it lies."""
    if relative.endswith(".mp4"):
        return "video file"
    if relative.startswith("meta/episodes/"):
        return "episodes file"
    if relative == "meta/info.json":
        return "info file"
    if relative.endswith(".parquet"):
        return "data file"
    return "file"


def _local_stat(path: str) -> Optional[os.stat_result]:
    """os.stat of a local path (following symlinks), None when it does not exist (the read says so)."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as ex:
        raise LeRobotImportError("io", f"cannot stat {path}: {ex.strerror or ex}") from None


_SPECIAL_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                  (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                  (stat.S_ISSOCK, "a socket"))


def _raise_if_special(st: os.stat_result, *, what: str, file: str) -> None:
    """Only regular files are read: a FIFO blocks its reader until a writer comes, a device such as
    /dev/zero never ends, a folder has no bytes."""
    if stat.S_ISREG(st.st_mode):
        return
    kind = next((name for test, name in _SPECIAL_KINDS if test(st.st_mode)), "not a regular file")
    raise LeRobotImportError("not_a_file", f"{what} {file} is {kind}, not a regular file; only regular files are "
                             "read: replace it with the file's content", file=file)


def check_regular_file(uri: str, *, what: str, file: str) -> None:
    """Fail with rule `not_a_file` when local `uri` exists but is not a regular file (no-op elsewhere)."""
    fs, path = filesystem(uri)
    if is_local(fs):
        st = _local_stat(path)
        if st is not None:
            _raise_if_special(st, what=what, file=file)


#: Every git-LFS pointer file starts with these bytes (the whole pointer is ~130 bytes of text).
LFS_POINTER_PREFIX = b"version https://git-lfs"
#: git-LFS pointers are smaller than this (git-lfs itself never reads a larger file as a pointer), so
#: only files this small need their first bytes looked at.
LFS_POINTER_MAX_BYTES = 1024
#: `read_bytes` reads whole files (info.json, episodes files, lists): none of them is near this size
#: (LeRobot rolls its metadata files over at about 100 MB), and a larger one must not fill the memory.
READ_BYTES_LIMIT = 256 * 1024 * 1024


def is_lfs_pointer(head: bytes) -> bool:
    """Whether a file's first bytes are a git-LFS pointer instead of the file's content."""
    return head[: len(LFS_POINTER_PREFIX)] == LFS_POINTER_PREFIX


def raise_if_lfs_pointer(head: bytes, *, what: str, file: str) -> None:
    """Fail with rule `lfs_pointer` when `head` (a file's first bytes) is a git-LFS pointer.

    A dataset cloned without git-LFS holds pointers where its Parquet and MP4 files should be; the
    real cause is then not a corrupt file but content that was never fetched."""
    if is_lfs_pointer(head):
        raise LeRobotImportError("lfs_pointer", f"{what} {file} is a git-LFS pointer, not the file: fetch its "
                                 "content (`git lfs pull` in the dataset's clone) and import again", file=file)


@dataclasses.dataclass
class ReadCounter:
    """Bytes and requests that reached storage: the one counter every reader (data files, MP4 range
    reads, the reader's seeks) reports through."""

    requests: int = 0
    bytes_read: int = 0

    def add(self, chunks) -> None:
        """Count one request per chunk returned, and their bytes."""
        self.requests += len(chunks)
        self.bytes_read += sum(len(c) for c in chunks)


class CountingFile(io.RawIOBase):
    """A read-only file that counts what is read from the underlying fsspec file."""

    def __init__(self, raw, size: int, counter: ReadCounter, *, what: str = "file", file: str = "") -> None:
        self._raw = raw
        self._size = size
        self._counter = counter
        self._what, self._file = what, file

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def size(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        position = self._raw.tell()

        def attempt() -> bytes:
            if self._raw.tell() != position:
                self._raw.seek(position)
            return self._raw.read(n)

        try:
            data = run_limits.paced(lambda: with_retries(attempt, waiting_on=f"a read of {self._what} {self._file}"),
                                    f"{self._what} {self._file}")
        except OSError as ex:
            if access_denied(ex):
                raise denied_error(ex, what=self._what, file=self._file) from None
            raise
        self._counter.requests += 1
        self._counter.bytes_read += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_counted(uri: str, counter: ReadCounter, *, what: str, file: str) -> CountingFile:
    """Open a dataset file for random reads; a missing file is the `file_missing` rule, a FIFO or a
    device `not_a_file`, a git-LFS pointer `lfs_pointer`."""
    fs, path = filesystem(uri)
    check_regular_file(uri, what=what, file=file)
    waiting = f"opening {what} {file}"
    try:
        size = with_retries(lambda: fs.size(path), waiting_on=waiting)
        raw = with_retries(lambda: fs.open(path, "rb", block_size=0) if _supports_unbuffered(fs)
                           else fs.open(path, "rb"), waiting_on=waiting)
    except FileNotFoundError:
        raise LeRobotImportError("file_missing", f"{what} {file} does not exist (expected at {uri})",
                                 file=file) from None
    except OSError as ex:
        if access_denied(ex):
            raise denied_error(ex, what=what, file=file) from None
        raise LeRobotImportError("io", f"cannot open {what} {file}: {ex}", file=file) from None
    if size is not None and size < LFS_POINTER_MAX_BYTES:
        try:
            head = with_retries(lambda: raw.read(len(LFS_POINTER_PREFIX)))
            raw.seek(0)
            raise_if_lfs_pointer(head, what=what, file=file)
        except BaseException:
            raw.close()
            raise
    return CountingFile(raw, size, counter, what=what, file=file)


def access_denied(ex: BaseException) -> bool:
    """Whether storage refused a read for want of permission (a local PermissionError, s3fs's, an HTTP
    401/403 from gcsfs or another HTTP store), rather than the bytes being bad."""
    if isinstance(ex, PermissionError):
        return True
    if type(ex) is OSError and str(ex).startswith("Forbidden: "):  # how gcsfs reports a 403
        return True
    code = getattr(ex, "code", None) or getattr(ex, "status", None)
    return code in (401, 403)


def denied_error(ex: BaseException, *, what: str, file: str) -> LeRobotImportError:
    """The `io` error of a read storage refused: says so, instead of blaming the file's content."""
    return LeRobotImportError("io", f"cannot read {what} {file}: storage refused access ({ex}); check that the "
                              "credentials this run uses may read it, then run the import again", file=file)


def _supports_unbuffered(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol not in ("file", "local", "memory")


def file_size(uri: str, *, what: str, file: str) -> int:
    fs, path = filesystem(uri)
    check_regular_file(uri, what=what, file=file)
    try:
        return int(with_retries(lambda: fs.size(path), waiting_on=f"the size of {what} {file}"))
    except FileNotFoundError:
        raise LeRobotImportError("file_missing", f"{what} {file} does not exist (expected at {uri})",
                                 file=file) from None
    except OSError as ex:
        raise LeRobotImportError("io", f"cannot stat {what} {file}: {ex}", file=file) from None


def read_bytes(uri: str, *, what: str, file: str, max_bytes: int = READ_BYTES_LIMIT) -> bytes:
    """A whole (small) file: its size is asked first, so a file over `max_bytes` is the `limit` rule before
    a byte is read; a FIFO or device is `not_a_file`, a git-LFS pointer `lfs_pointer`."""
    fs, path = filesystem(uri)
    if is_local(fs):
        data = _read_local(path, what=what, file=file, max_bytes=max_bytes)
        if len(data) < LFS_POINTER_MAX_BYTES:
            raise_if_lfs_pointer(data, what=what, file=file)
        return data
    size = file_size(uri, what=what, file=file)
    if size > max_bytes:
        raise LeRobotImportError("limit", f"{what} {file} is {size:,} bytes; at most {max_bytes:,} bytes of a "
                                 f"{what} are read: is it the right file?", file=file)
    fs, path = filesystem(uri)
    try:
        data = run_limits.paced(lambda: with_retries(lambda: fs.cat_file(path), waiting_on=f"a read of {what} {file}"),
                                f"{what} {file}", run_limits.source_of(uri))
    except FileNotFoundError:
        raise LeRobotImportError("file_missing", f"{what} {file} does not exist (expected at {uri})",
                                 file=file) from None
    except OSError as ex:
        if access_denied(ex):
            raise denied_error(ex, what=what, file=file) from None
        raise LeRobotImportError("io", f"cannot read {what} {file}: {ex}", file=file) from None
    if len(data) > max_bytes:  # it grew since it was asked for its size
        raise LeRobotImportError("limit", f"{what} {file} grew past {max_bytes:,} bytes while it was read; at "
                                 f"most {max_bytes:,} bytes of a {what} are read", file=file)
    if len(data) < LFS_POINTER_MAX_BYTES:
        raise_if_lfs_pointer(data, what=what, file=file)
    return data


def _open_local(path: str, *, what: str, file: str, follow_links: bool = True) -> tuple[int, os.stat_result]:
    """A local file opened for reading, as a regular file only: (descriptor, its stat), the descriptor blocking.

    The file is opened without blocking (a FIFO swapped in after a check would otherwise block the open
    until a writer comes) and its kind is asked of the open descriptor, so what is read is what was checked."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise LeRobotImportError("file_missing", f"{what} {file} does not exist (expected at {path})",
                                 file=file) from None
    except OSError as ex:
        if ex.errno == errno.ELOOP and not follow_links:
            raise LeRobotImportError("output_confinement", f"{what} {file} is a symlink; the import reads and "
                                     "writes its own files only where they are: replace the link with the file",
                                     file=file) from None
        if isinstance(ex, PermissionError):
            raise denied_error(ex, what=what, file=file) from None
        raise LeRobotImportError("io", f"cannot open {what} {file}: {ex.strerror or ex}", file=file) from None
    try:
        st = os.fstat(fd)
        _raise_if_special(st, what=what, file=file)
        os.set_blocking(fd, True)
    except OSError as ex:
        os.close(fd)
        raise LeRobotImportError("io", f"cannot read {what} {file}: {ex.strerror or ex}", file=file) from None
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _read_local(path: str, *, what: str, file: str, max_bytes: int, follow_links: bool = True) -> bytes:
    """A local file read whole, as a regular file only (`_open_local`) and at most `max_bytes`: its size is
    asked of the open descriptor, and no more than `max_bytes` + 1 bytes are ever read (a file that grows,
    /dev/zero)."""
    fd, st = _open_local(path, what=what, file=file, follow_links=follow_links)
    try:
        if st.st_size > max_bytes:
            raise LeRobotImportError("limit", f"{what} {file} is {st.st_size:,} bytes; at most {max_bytes:,} bytes "
                                     f"of a {what} are read: is it the right file?", file=file)
        chunks, total = [], 0
        pace = run_limits.ReadPace(f"{what} {file}")  # a mount that trickles its bytes
        while total <= max_bytes:
            run_limits.check(f"a read of {what} {file}")
            chunk = os.read(fd, min(max_bytes + 1 - total, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            pace.add(len(chunk))
    except OSError as ex:
        raise LeRobotImportError("io", f"cannot read {what} {file}: {ex.strerror or ex}", file=file) from None
    finally:
        os.close(fd)
    if total > max_bytes:
        raise LeRobotImportError("limit", f"{what} {file} grew past {max_bytes:,} bytes while it was read; at "
                                 f"most {max_bytes:,} bytes of a {what} are read", file=file)
    return b"".join(chunks)


def read_state_file(uri: str, *, what: str, file: str, max_bytes: int) -> Optional[bytes]:
    """A small file of an output's own state (manifest, errors.jsonl, lease): None when it does not exist.

    Read as `read_bytes` reads (bounded, regular files only) and, locally, never through a symlink: the
    output's own files are where the import wrote them, and a link would make it read (or, later, write)
    somewhere else."""
    fs, path = filesystem(uri)
    try:
        if is_local(fs):
            return _read_local(path, what=what, file=file, max_bytes=max_bytes, follow_links=False)
        return read_bytes(uri, what=what, file=file, max_bytes=max_bytes)
    except LeRobotImportError as ex:
        if ex.rule == "file_missing":
            return None
        raise


def open_state_file(uri: str, *, what: str, file: str) -> Optional[IO[bytes]]:
    """A file of an output's own state opened to be read in pieces (errors.jsonl may be hundreds of megabytes:
    its reader keeps what it needs of each piece), checked as `read_state_file` checks it but of any size:
    a regular file only, locally never through a symlink; None when it does not exist.

    Raises:
        LeRobotImportError: `not_a_file`, `output_confinement` (a link) or `io` (storage refused it, or failed).
    """
    fs, path = filesystem(uri)
    if is_local(fs):
        try:
            fd, _ = _open_local(path, what=what, file=file, follow_links=False)
        except LeRobotImportError as ex:
            if ex.rule == "file_missing":
                return None
            raise
        return os.fdopen(fd, "rb")
    try:
        return with_retries(lambda: fs.open(path, "rb"), waiting_on=f"an open of {what} {file}")
    except FileNotFoundError:
        return None
    except OSError as ex:
        if access_denied(ex):
            raise denied_error(ex, what=what, file=file) from None
        raise LeRobotImportError("io", f"cannot open {what} {file}: {ex}", file=file) from None


def tmp_name(final_uri: str) -> str:
    """A hidden sibling of the final file, unique per attempt."""
    head, tail = posixpath.split(final_uri)
    return f"{head}/.{tail}{TMP_MARK}{uuid.uuid4().hex}"


def write_error(ex: BaseException, uri: str) -> Optional[LeRobotImportError]:
    """A failed write as the rule it breaks, when it is one: `disk_full` (no space, quota used) or
    `output_not_writable` (read-only filesystem, no permission); None for anything else."""
    if not isinstance(ex, OSError):
        return None
    if ex.errno in _NO_SPACE:
        return LeRobotImportError("disk_full", f"writing {uri} failed: the storage has no space left "
                                  f"({ex.strerror or ex}); free some space (or raise the quota) and run the import "
                                  "again: what was written before stays valid, the rest is imported then")
    if ex.errno in _NOT_WRITABLE or isinstance(ex, PermissionError):
        return LeRobotImportError("output_not_writable", f"writing {uri} failed: {ex.strerror or ex}; give --output "
                                  "a folder this run may write (not a read-only filesystem), or fix its permissions")
    return None


def write_tmp(final_uri: str, write: Callable[[object], None]) -> str:
    """Write a file under a temporary name next to `final_uri`; returns that name. A full disk or a
    read-only output is its rule (`disk_full`, `output_not_writable`), and the temporary is removed."""
    fs, _ = filesystem(final_uri)

    def attempt() -> str:
        tmp = tmp_name(final_uri)
        _, path = filesystem(tmp)
        try:
            fs.makedirs(posixpath.dirname(path), exist_ok=True)
            with fs.open(path, "wb") as f:
                write(f)
        except BaseException:
            try:
                remove(tmp)
            except OSError:  # the write's own failure says what happened
                pass
            raise
        return tmp

    try:
        return with_retries(attempt)
    except OSError as ex:
        named = write_error(ex, final_uri)
        if named is None:
            raise
        raise named from None


def commit(tmp_uri: str, final_uri: str) -> None:
    """Move a finished temporary file into place (replacing an older one)."""
    fs, tmp_path = filesystem(tmp_uri)
    _, final_path = filesystem(final_uri)

    def attempt() -> None:
        if not fs.exists(tmp_path) and fs.exists(final_path):
            return  # an earlier attempt moved it before failing to report so
        if is_local(fs) or not (_has_magic(tmp_path) or _has_magic(final_path)):
            fs.mv(tmp_path, final_path)
            return
        # fsspec's `mv` expands `*`, `?` and `[` as a pattern on object stores: a name holding them is
        # copied and removed as the one file it names
        fs.cp_file(tmp_path, final_path)
        _remove_literal(fs, tmp_path)

    try:
        with_retries(attempt)
    except OSError as ex:
        named = write_error(ex, final_uri)
        if named is None:
            raise
        raise named from None


def write_atomic(final_uri: str, data: bytes) -> None:
    commit(write_tmp(final_uri, lambda f: f.write(data)), final_uri)


def remove(uri: str) -> None:
    """Remove the one file `uri` names, its name taken literally (`*`, `?` and `[` are legal in names)."""
    fs, path = filesystem(uri)

    def attempt() -> None:
        try:
            if is_local(fs) or not _has_magic(path):
                fs.rm(path)
            else:
                _remove_literal(fs, path)
        except FileNotFoundError:
            pass

    with_retries(attempt)


_MAGIC = re.compile(r"[*?\[]")


def _has_magic(path: str) -> bool:
    return _MAGIC.search(path) is not None


def _remove_literal(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Delete one object by its exact name on a filesystem whose `rm` would expand it as a pattern:
    `rm_file` names one file (memory, s3fs and gcsfs delete that very object)."""
    fs.rm_file(path)
    fs.invalidate_cache(path)


def glob(pattern_uri: str) -> list[str]:
    """Expand a pattern the *user* wrote (`--datasets gs://b/*`). Never call it with a name taken from a
    dataset or an output: `*`, `?` and `[` are legal in file names, so such a pattern could match (and a
    caller then remove) other files. Use `list_dir` and compare names literally instead."""
    fs, pattern = filesystem(pattern_uri)
    return sorted(to_uri(fs, p) for p in with_retries(lambda: fs.glob(pattern)))


def list_dir(dir_uri: str, *, dirs: bool = False) -> list[str]:
    """The names (not paths) of the files (or, with `dirs`, the folders) directly in `dir_uri`, sorted;
    empty when the folder does not exist. Names are returned as they are, wildcards included, for
    the caller to match literally."""
    fs, path = filesystem(dir_uri)
    path = path.rstrip("/")
    try:
        entries = with_retries(lambda: fs.ls(path, detail=True))
    except (FileNotFoundError, NotADirectoryError):
        return []
    names = []
    for entry in entries:
        if entry.get("islink"):  # a local listing reports a symlink as such: ask what it points to
            try:
                entry = dict(entry, type=fs.info(entry["name"]).get("type"))
            except OSError:  # a dangling link: listed as a file, so reading it names the problem
                entry = dict(entry, type="other")
        # Anything that is not a folder counts as a file here (FIFOs and devices included), so that
        # reading it fails with a message naming it instead of it being skipped without a word.
        if (entry.get("type") == "directory") != dirs:
            continue
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        if name and entry["name"].rstrip("/") != path:
            names.append(name)
    return sorted(set(names))


def list_files(dir_uri: str, *, suffix: str = "") -> list[str]:
    """Every file under `dir_uri` (recursively), sorted, as URIs; empty when the folder does not exist."""
    fs, path = filesystem(dir_uri)
    try:
        found = fs.find(path)
    except FileNotFoundError:
        return []
    return sorted(to_uri(fs, p) for p in found if p.endswith(suffix))


def relative_to(root_uri: str, uri: str) -> str:
    prefix = root_uri.rstrip("/") + "/"
    assert uri.startswith(prefix), (root_uri, uri)
    return uri[len(prefix):]


def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    return with_retries(lambda: fs.exists(path))


def optional_read(uri: str, *, what: str = "file", file: Optional[str] = None,
                  max_bytes: int = READ_BYTES_LIMIT) -> Optional[bytes]:
    """The whole file at `uri`, or None when it does not exist; read as `read_bytes` reads (a local FIFO or
    device is `not_a_file`, a file over `max_bytes` the `limit` rule)."""
    try:
        return read_bytes(uri, what=what, file=file or uri, max_bytes=max_bytes)
    except LeRobotImportError as ex:
        if ex.rule == "file_missing":
            return None
        raise


def is_dir(uri: str) -> bool:
    fs, path = filesystem(uri)
    return fs.isdir(path)
