"""A lease on an output root, so that two runs never import into one output at the same time.

The lease is a small JSON object, `OUT/.lease.json`: the run that holds it (run id, host, pid, job),
when it started and when the lease expires. It is created only if absent, atomically on every store:

    local     O_CREAT|O_EXCL, under an exclusive flock on `OUT/.lease.json.lock` (so no one ever reads
              a half-written lease; the kernel drops the flock of a process that dies)
    gs://     an upload with the precondition ifGenerationMatch=0
    s3://     a conditional put, If-None-Match: *
    memory:// an in-process lock

Every later change is a compare-and-swap on the version read: renewing or taking over replaces the
object only if it is still the one read (ifGenerationMatch=<generation> on GCS, If-Match=<ETag> on
S3, content compared under the flock locally), and releasing deletes it on the same condition. So of
two runs that find the same expired lease, exactly one takes it over; a run whose lease was taken
over finds out at its next renewal (`LeaseLost`), and a release never removes another run's lease.

The holder renews the lease while it runs (`LeaseKeeper`, every third of the TTL) and releases it at
the end; a run that crashed leaves a lease that expires, and the next run takes it over and says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from typing import Callable, Iterator, Optional

import fsspec
import fsspec.asyn

from transforms.base import storage
from transforms.output import paths
from transforms.base.errors import LeRobotImportError, quote

_LOG = logging.getLogger(__name__)

LEASE_NAME = paths.LEASE
#: A lease lives this long unless renewed; its holder renews it every third of that.
DEFAULT_TTL_S = 300.0
#: How often a waiting run looks at the lease again (at most; never past the lease's expiry).
DEFAULT_POLL_S = 5.0
#: A lease file is a few hundred bytes; one larger than this is not read.
MAX_LEASE_BYTES = 64 * 1024
#: No lease this importer writes expires further ahead than this (a renewed lease lives one TTL): one
#: expiring later (a clock gone wrong, an edited file) would lock the output for ever.
MAX_LEASE_AHEAD_S = 7 * 24 * 3600.0
#: The largest process id a Linux kernel gives (pid_max).
MAX_PID = 1 << 22
_MAX_FIELD_CHARS = 1024


# ------------------------------------------------------------------------------------------------
# The lease record and its errors
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """The content of a lease: who holds it and until when (times in seconds since the epoch)."""

    run_id: str
    host: str
    pid: int
    job: str
    started_at: float
    renewed_at: float
    expires_at: float

    def to_bytes(self) -> bytes:
        doc = dataclasses.asdict(self) | {"expires": _iso(self.expires_at), "started": _iso(self.started_at)}
        return (json.dumps(doc, sort_keys=True) + "\n").encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> "LeaseRecord":
        """Parse a lease; a lease that is not one (garbage, or written by a crashed writer) reads as an
        unknown holder whose lease has long expired, so it is taken over."""
        try:
            doc = json.loads(raw)
            return cls(run_id=str(doc["run_id"]), host=str(doc["host"]), pid=int(doc["pid"]), job=str(doc["job"]),
                       started_at=float(doc["started_at"]), renewed_at=float(doc["renewed_at"]),
                       expires_at=float(doc["expires_at"]))
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, OverflowError, RecursionError):
            return cls(run_id="unknown (unreadable lease)", host="?", pid=0, job="", started_at=0.0,
                       renewed_at=0.0, expires_at=0.0)

    def absurdity(self, now: float) -> Optional[str]:
        """Why this record cannot be a lease this importer wrote (values no run writes), or None."""
        for name in ("started_at", "renewed_at", "expires_at"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                return f"records {name} = {quote(value)}, not a time"
        if self.expires_at > now + MAX_LEASE_AHEAD_S:
            return (f"expires {_duration(self.expires_at - now)} from now (at {_iso(self.expires_at)}), further "
                    f"than any lease this importer takes ({_duration(MAX_LEASE_AHEAD_S)})")
        if self.started_at > now + MAX_LEASE_AHEAD_S:
            return f"started at {_iso(self.started_at)}, in the future"
        if not 0 <= self.pid <= MAX_PID:
            return f"names the process id {quote(self.pid)}, which no process has"
        for name in ("run_id", "host", "job"):
            if len(getattr(self, name)) > _MAX_FIELD_CHARS:
                return f"has a {name} of {len(getattr(self, name)):,} characters"
        return None

    def expired(self, now: float) -> bool:
        """Past its expiry, or held by a process of this host that no longer exists (a killed run need
        not be waited for until its lease runs out)."""
        return now >= self.expires_at or self._holder_is_gone()

    def _holder_is_gone(self) -> bool:
        if self.host != socket.gethostname() or self.pid <= 0 or self.pid == os.getpid():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:  # exists, but is another user's
            return False
        return False

    def describe(self, now: Optional[float] = None) -> str:
        """`run R (host H, pid P, job J) since T, expiring at E (in 4 min 10 s)`."""
        now = time.time() if now is None else now
        who = f"host {self.host}, pid {self.pid}" + (f", job {self.job}" if self.job else "")
        left = self.expires_at - now
        when = f"in {_duration(left)}" if left > 0 else f"expired {_duration(-left)} ago"
        return (f"run {self.run_id} ({who}) since {_iso(self.started_at)}, expiring at "
                f"{_iso(self.expires_at)} ({when})")


class LeaseHeld(Exception):
    """Another run holds the output's lease (and it has not expired)."""

    def __init__(self, output: str, holder: LeaseRecord, now: float, waited: float = 0.0) -> None:
        self.output = output
        self.holder = holder
        waited_note = f" (waited {_duration(waited)})" if waited > 0 else ""
        super().__init__(
            f"the output {output} is leased by {holder.describe(now)}{waited_note}: another run is importing into "
            "it. Wait for it with --wait-for-lease SECONDS, or, if that run died, run again once its lease has "
            "expired: an expired lease is taken over.")


class LeaseLost(Exception):
    """The lease this run held was taken over (it expired before a renewal) or removed."""


class LeaseInvalid(LeRobotImportError):
    """The output's lease file is not a lease this importer wrote: absurd values, too large. It is never
    taken over (someone made it: a run of another tool, an edit) and never waited for; the message names
    the file to delete."""

    def __init__(self, output: str, problem: str) -> None:
        path = storage.join(output, LEASE_NAME)
        super().__init__("lease", f"the lease file {path} {problem}: it is not a lease this importer wrote, so "
                         f"the output is not imported. If no import is running on {output}, delete {path} and run "
                         "again", file=LEASE_NAME)
        self.output = output


@dataclasses.dataclass(frozen=True)
class Lease:
    """A lease this run holds: the record written and the store's version of it."""

    output: str
    record: LeaseRecord
    token: str  # GCS generation, S3 ETag, or the sha256 of the content (local, memory)
    took_over: Optional[LeaseRecord] = None  # the expired lease this one replaced

    def takeover_message(self) -> Optional[str]:
        if self.took_over is None:
            return None
        return (f"took over the expired lease on {self.output} of {self.took_over.describe(self.record.started_at)}; "
                "that run is presumed dead")


# ------------------------------------------------------------------------------------------------
# Stores: create-if-absent, read with version, compare-and-swap replace and delete
# ------------------------------------------------------------------------------------------------

class _Conflict(Exception):
    """The object is not the version the caller read (changed or removed meanwhile)."""


class _LocalStore:
    """A lease file on a local (or POSIX network) filesystem; every change under an exclusive flock."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock_path = path + ".lock"

    @contextlib.contextmanager
    def _locked(self, *, create: bool = True) -> Iterator[None]:
        if create:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        while True:
            try:
                fd = os.open(self.lock_path, (os.O_CREAT if create else 0) | os.O_RDWR | os.O_NOFOLLOW, 0o644)
            except FileNotFoundError:  # no lease is held here: nothing to wait for
                yield
                return
            fcntl.flock(fd, fcntl.LOCK_EX)
            # The release removes the lock file (an output keeps no file of a run that ended): a flock taken
            # on a file removed meanwhile guards nothing, so the lock is taken again on the current one.
            try:
                current = os.stat(self.lock_path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            mine = os.fstat(fd)
            if current is not None and (current.st_ino, current.st_dev) == (mine.st_ino, mine.st_dev):
                break
            os.close(fd)
        try:
            yield
        finally:
            os.close(fd)  # closing drops the flock

    def _read_unlocked(self) -> Optional[tuple[bytes, str]]:
        # Bounded, never through a link, never blocking on a FIFO (the output's own state).
        data = storage.read_state_file("file://" + self.path, what="lease file", file=LEASE_NAME,
                                       max_bytes=MAX_LEASE_BYTES)
        return None if data is None else (data, _sha256(data))

    def read(self) -> Optional[tuple[bytes, str]]:
        with self._locked(create=False):
            return self._read_unlocked()

    def create(self, data: bytes) -> str:
        with self._locked():
            # Written whole under a temporary name, then linked to the lease's name: the link fails with
            # FileExistsError when held, and a reader that takes no lock (there is no lock file before the
            # first lease, nor after a release) never sees a lease half written.
            tmp = f"{self.path}{storage.TMP_MARK}{uuid.uuid4().hex}"
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
            try:
                try:
                    if os.write(fd, data) != len(data):
                        raise OSError(errno.ENOSPC, "short write")
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.link(tmp, self.path, follow_symlinks=False)  # never through a link at the lease's name
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)  # a failed write (a full disk) leaves nothing behind
        return _sha256(data)

    def replace(self, data: bytes, token: str) -> str:
        with self._locked():
            current = self._read_unlocked()
            if current is None or current[1] != token:
                raise _Conflict()
            tmp = f"{self.path}{storage.TMP_MARK}{uuid.uuid4().hex}"
            try:
                with open(tmp, "xb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)  # the name never disappears, so an O_EXCL create never wins here
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        return _sha256(data)

    def delete(self, token: str) -> None:
        with self._locked():
            current = self._read_unlocked()
            if current is None:
                return
            if current[1] != token:
                raise _Conflict()
            os.unlink(self.path)
            # No lease, no lock file: a run waiting on this one's flock finds the file gone and locks anew.
            with contextlib.suppress(OSError):
                os.unlink(self.lock_path)


_MEMORY_LOCK = threading.Lock()


class _MemoryStore:
    """A lease in fsspec's in-process memory filesystem, changed under one process-wide lock."""

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str) -> None:
        self.fs = fs
        self.path = path

    def _read_unlocked(self) -> Optional[tuple[bytes, str]]:
        try:
            _check_size(self.fs.size(self.path))
            data = self.fs.cat_file(self.path)
        except FileNotFoundError:
            return None
        return data, _sha256(data)

    def read(self) -> Optional[tuple[bytes, str]]:
        with _MEMORY_LOCK:
            return self._read_unlocked()

    def create(self, data: bytes) -> str:
        with _MEMORY_LOCK:
            if self.fs.exists(self.path):
                raise FileExistsError(self.path)
            self.fs.pipe_file(self.path, data)
        return _sha256(data)

    def replace(self, data: bytes, token: str) -> str:
        with _MEMORY_LOCK:
            current = self._read_unlocked()
            if current is None or current[1] != token:
                raise _Conflict()
            self.fs.pipe_file(self.path, data)
        return _sha256(data)

    def delete(self, token: str) -> None:
        with _MEMORY_LOCK:
            current = self._read_unlocked()
            if current is None:
                return
            if current[1] != token:
                raise _Conflict()
            self.fs.rm_file(self.path)


class _BucketStore:
    """A lease object in an object store's bucket: `path` is "bucket/key"."""

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str) -> None:
        self.fs = fs
        self.path = path
        self.bucket, self.key = path.split("/", 1)


class _GcsStore(_BucketStore):
    """A lease object on GCS; every write and delete carries an ifGenerationMatch precondition."""

    def read(self) -> Optional[tuple[bytes, str]]:
        for _ in range(storage.ATTEMPTS):
            try:
                meta = self.fs.call("GET", "b/{}/o/{}", self.bucket, self.key, json_out=True)
                generation = str(meta["generation"])
                _check_size(meta.get("size"))  # the size of exactly the generation then downloaded
                # The content of exactly that generation: never a newer content with an older version.
                _, data = self.fs.call("GET", "b/{}/o/{}", self.bucket, self.key, alt="media",
                                       ifGenerationMatch=generation)
            except FileNotFoundError:
                return None
            except FileExistsError:  # 412: rewritten between the two requests; read again
                continue
            return data, generation
        raise _Conflict()

    def _upload(self, data: bytes, if_generation: str) -> str:
        from urllib.parse import quote
        url = f"{self.fs._location}/upload/storage/v1/b/{quote(self.bucket)}/o"
        meta = self.fs.call("POST", url, uploadType="media", name=self.key, ifGenerationMatch=if_generation,
                            data=data, headers={"Content-Type": "application/octet-stream"}, json_out=True)
        self.fs.invalidate_cache(self.path)
        return str(meta["generation"])

    def create(self, data: bytes) -> str:
        return self._upload(data, "0")  # gcsfs raises FileExistsError on 412: the object exists

    def replace(self, data: bytes, token: str) -> str:
        try:
            return self._upload(data, token)
        except (FileExistsError, FileNotFoundError):
            raise _Conflict() from None

    def delete(self, token: str) -> None:
        try:
            self.fs.call("DELETE", "b/{}/o/{}", self.bucket, self.key, ifGenerationMatch=token)
        except FileNotFoundError:
            return
        except FileExistsError:
            raise _Conflict() from None
        finally:
            self.fs.invalidate_cache(self.path)


class _S3Store(_BucketStore):
    """A lease object on S3; conditional puts (If-None-Match: *, If-Match: ETag) and conditional deletes."""

    def read(self) -> Optional[tuple[bytes, str]]:
        for _ in range(storage.ATTEMPTS):
            try:
                head = self.fs.call_s3("head_object", Bucket=self.bucket, Key=self.key)
                etag = head["ETag"]
                _check_size(head.get("ContentLength"))  # the size of exactly the version then downloaded
                data = fsspec.asyn.sync(self.fs.loop, _s3_get, self.fs, self.bucket, self.key, etag)
            except FileNotFoundError:
                return None
            except OSError as ex:
                if _precondition_failed(ex):
                    continue  # rewritten between the two requests; read again
                raise
            return data, etag
        raise _Conflict()

    def create(self, data: bytes) -> str:
        out = self.fs.call_s3("put_object", Bucket=self.bucket, Key=self.key, Body=data, IfNoneMatch="*")
        self.fs.invalidate_cache(self.path)
        return out["ETag"]  # s3fs raises FileExistsError when the If-None-Match precondition fails

    def replace(self, data: bytes, token: str) -> str:
        try:
            out = self.fs.call_s3("put_object", Bucket=self.bucket, Key=self.key, Body=data, IfMatch=token)
        except OSError as ex:
            if isinstance(ex, FileNotFoundError) or _precondition_failed(ex):
                raise _Conflict() from None
            raise
        finally:
            self.fs.invalidate_cache(self.path)
        return out["ETag"]

    def delete(self, token: str) -> None:
        try:
            self.fs.call_s3("delete_object", Bucket=self.bucket, Key=self.key, IfMatch=token)
        except FileNotFoundError:
            return
        except OSError as ex:
            if _precondition_failed(ex):
                raise _Conflict() from None
            raise
        finally:
            self.fs.invalidate_cache(self.path)


async def _s3_get(fs, bucket: str, key: str, etag: str) -> bytes:
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key, IfMatch=etag)
    body = response["Body"]
    try:
        data = await body.read(MAX_LEASE_BYTES + 1)
    finally:
        body.close()
    _check_size(len(data))
    return data


def _check_size(size) -> None:
    """A lease object larger than MAX_LEASE_BYTES is not downloaded: rule `limit` (`LeaseInvalid` to the
    caller), as a local lease file that large is not read. Object stores tell the size before the body."""
    if size is not None and int(size) > MAX_LEASE_BYTES:
        raise LeRobotImportError("limit", f"the lease file is {int(size):,} bytes; at most {MAX_LEASE_BYTES:,} "
                                 "bytes of a lease are read", file=LEASE_NAME)


def _precondition_failed(ex: BaseException) -> bool:
    text = f"{ex} {getattr(ex, '__cause__', '')}"
    return isinstance(ex, FileExistsError) or "PreconditionFailed" in text or "412" in text \
        or "At least one of the pre-conditions" in text


def _store_for(output: str):
    fs, base = storage.filesystem(output)
    path = f"{base.rstrip('/')}/{LEASE_NAME}"
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    if protocols & {"file", "local"}:
        return _LocalStore(path)
    if "memory" in protocols:
        return _MemoryStore(fs, path)
    if protocols & {"gs", "gcs"}:
        return _GcsStore(fs, path)
    if protocols & {"s3", "s3a"}:
        return _S3Store(fs, path)
    raise ValueError(f"no lease support for {output}: leases work on local paths, gs://, s3:// and memory://")


def create_once(uri: str, data: bytes) -> bool:
    """Create the object at `uri` only when none is there (one conditional create, as a lease is taken);
    True when this call created it, False when it existed. Workers that race for one piece of work (the
    commit of an episodes file whose last parts land at once) all call it: exactly one wins.

    Raises:
        ValueError: the storage has no conditional create (see `supported`).
    """
    fs, path = storage.filesystem(uri)
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    try:
        if protocols & {"file", "local"}:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            return True
        if "memory" in protocols:
            store = _MemoryStore(fs, path)
        elif protocols & {"gs", "gcs"}:
            store = _GcsStore(fs, path)
        elif protocols & {"s3", "s3a"}:
            store = _S3Store(fs, path)
        else:
            raise ValueError(f"no conditional create on {uri}")
        store.create(data)
        return True
    except OSError as ex:
        if _precondition_failed(ex):
            return False
        raise


def supported(output: str) -> bool:
    """Whether the output's storage can hold a lease (local paths, gs://, s3://, memory://)."""
    try:
        _store_for(storage.normalize_root(output))
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------------------------------
# Acquire, renew, release
# ------------------------------------------------------------------------------------------------

def acquire(output: str, *, run_id: str, ttl_seconds: float = DEFAULT_TTL_S, wait_seconds: float = 0.0,
            job: str = "", poll_seconds: float = DEFAULT_POLL_S, clock: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep) -> Lease:
    """Take the lease on an output root.

    Args:
        output: the output root (a dataset's output in bulk mode).
        run_id: this run's id (what renew and release check).
        ttl_seconds: how long the lease lives unless renewed.
        wait_seconds: how long to wait for a held lease to be released or to expire (0: fail at once).
        job: the job name (a Dataflow job, a scheduler task), shown to anyone who finds the lease held.
        poll_seconds: how often to look again while waiting.
    Returns:
        The lease; `took_over` names the expired lease it replaced, if any.
    Raises:
        LeaseHeld: another run holds a lease that has not expired (after waiting `wait_seconds`).
    """
    output = storage.normalize_root(output)
    store = _store_for(output)
    started = clock()
    deadline = started + wait_seconds
    races = 0
    while True:
        now = clock()
        mine = LeaseRecord(run_id, socket.gethostname(), os.getpid(), job, now, now, now + ttl_seconds)
        try:
            return Lease(output, mine, storage.with_retries(lambda: store.create(mine.to_bytes())))
        except FileExistsError:
            pass
        except OSError as ex:
            named = storage.write_error(ex, storage.join(output, LEASE_NAME))
            if named is None:
                raise
            raise named from None
        current = _read(output, store)
        if current is None:  # released between our create and our read: try again
            races = _back_off(races, sleep)
            continue
        held = _parse(output, current[0], now)
        if held.run_id == run_id:  # ours already (an earlier attempt of this run): extend it
            try:
                return _replace(output, store, current[1], dataclasses.replace(mine, started_at=held.started_at), None)
            except _Conflict:
                races = _back_off(races, sleep)
                continue
        if held.expired(now):
            try:
                lease = _replace(output, store, current[1], mine, held)
            except _Conflict:  # another run took it over, or its holder renewed it, first: look again
                races = _back_off(races, sleep)
                continue
            _LOG.warning("%s", lease.takeover_message())
            return lease
        if now >= deadline:
            raise LeaseHeld(output, held, now, waited=now - started if wait_seconds > 0 else 0.0)
        sleep(max(0.01, min(poll_seconds, deadline - now, held.expires_at - now + 0.01)))


def _read(output: str, store) -> Optional[tuple[bytes, str]]:
    """The lease's bytes and version; one too large to be a lease is `LeaseInvalid`."""
    try:
        return storage.with_retries(store.read)
    except LeRobotImportError as ex:
        if ex.rule == "limit":
            raise LeaseInvalid(output, f"is larger than {MAX_LEASE_BYTES:,} bytes") from None
        raise


def _parse(output: str, raw: bytes, now: float) -> LeaseRecord:
    """The lease record in `raw`: unreadable (a crashed writer) reads as an expired unknown holder; values
    no run of this importer writes are `LeaseInvalid`, naming the file to delete."""
    record = LeaseRecord.from_bytes(raw)
    problem = record.absurdity(now)
    if problem is not None:
        raise LeaseInvalid(output, problem)
    return record


def _back_off(races: int, sleep: Callable[[float], None]) -> int:
    """A short, growing pause after losing a race, so racing runs do not spin."""
    sleep(min(0.01 * 2 ** races, 1.0))
    return races + 1


def _replace(output: str, store, token: str, record: LeaseRecord, took_over: Optional[LeaseRecord]) -> Lease:
    """Swap the lease at version `token` for `record`. A swap whose answer was lost and whose retry then
    found the object changed is recognised by its content: the change was ours."""
    data = record.to_bytes()
    try:
        return Lease(output, record, storage.with_retries(lambda: store.replace(data, token)), took_over)
    except _Conflict:
        current = storage.with_retries(store.read)
        if current is not None and current[0] == data:
            return Lease(output, record, current[1], took_over)
        raise


def renew(lease: Lease, *, ttl_seconds: Optional[float] = None, clock: Callable[[], float] = time.time) -> Lease:
    """Extend a lease this run still holds.

    Raises:
        LeaseLost: the lease is gone or another run holds it now (ours expired and was taken over).
    """
    store = _store_for(lease.output)
    try:
        current = _read(lease.output, store)
        held = None if current is None else _parse(lease.output, current[0], clock())
    except LeRobotImportError as ex:
        raise LeaseLost(f"the lease on {lease.output} of run {lease.record.run_id} was replaced: {ex}") from None
    if current is None:
        raise LeaseLost(f"the lease on {lease.output} of run {lease.record.run_id} was removed")
    if held.run_id != lease.record.run_id:
        raise LeaseLost(f"the lease on {lease.output} of run {lease.record.run_id} expired and was taken over by "
                        f"{held.describe(clock())}")
    now = clock()
    ttl = ttl_seconds if ttl_seconds is not None else lease.record.expires_at - lease.record.renewed_at
    record = dataclasses.replace(held, renewed_at=now, expires_at=now + ttl)
    try:
        return _replace(lease.output, store, current[1], record, lease.took_over)
    except _Conflict:
        raise LeaseLost(f"the lease on {lease.output} of run {lease.record.run_id} changed while being renewed; "
                        "another run took it over") from None


def release(lease: Lease) -> bool:
    """Remove the lease if this run still holds it; False when it is gone or another run's."""
    store = _store_for(lease.output)
    try:
        current = storage.with_retries(store.read)
    except LeRobotImportError:  # replaced by something that is no lease: not ours to remove
        return False
    if current is None or LeaseRecord.from_bytes(current[0]).run_id != lease.record.run_id:
        return False
    try:
        storage.with_retries(lambda: store.delete(current[1]))
    except _Conflict:
        return False
    return True


def read_lease(output: str) -> Optional[LeaseRecord]:
    """Who holds the output's lease now (expired or not), or None. Writes nothing."""
    output = storage.normalize_root(output)
    store = _store_for(output)
    try:
        current = store._read_unlocked() if isinstance(store, _LocalStore) else store.read()
    except LeRobotImportError as ex:
        if ex.rule == "limit":
            raise LeaseInvalid(output, f"is larger than {MAX_LEASE_BYTES:,} bytes") from None
        raise
    return _parse(output, current[0], time.time()) if current is not None else None


class LeaseKeeper:
    """Keeps a lease for the length of a `with` block: renews it in a background thread every third of its
    TTL and releases it at the end. A renewal that finds the lease lost stops renewing and keeps the
    reason in `lost`; `check()` raises it, so the run can stop before it commits anything more.

        with LeaseKeeper(acquire(out, run_id=run_id)) as keeper:
            ... import ...
            keeper.check()
    """

    def __init__(self, lease: Lease, *, interval_seconds: Optional[float] = None) -> None:
        self.lease = lease
        ttl = lease.record.expires_at - lease.record.renewed_at
        self.interval = interval_seconds if interval_seconds is not None else max(ttl / 3, 0.05)
        self.lost: Optional[LeaseLost] = None
        self.renewals = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="lease-renewer", daemon=True)

    def __enter__(self) -> "LeaseKeeper":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        with self._lock:
            if self.lost is None:
                try:
                    release(self.lease)
                except OSError as ex:  # the lease then expires on its own
                    _LOG.warning("could not release the lease on %s: %s", self.lease.output, ex)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                try:
                    self.lease = renew(self.lease)
                    self.renewals += 1
                except LeaseLost as ex:
                    self.lost = ex
                    _LOG.error("%s", ex)
                    return
                except OSError as ex:  # storage trouble: try again at the next tick, before the lease expires
                    _LOG.warning("could not renew the lease on %s: %s", self.lease.output, ex)

    def check(self) -> None:
        """Raise `LeaseLost` if the lease was lost."""
        if self.lost is not None:
            raise self.lost


@contextlib.contextmanager
def holding(output: str, **acquire_args) -> Iterator[LeaseKeeper]:
    """Acquire the lease on `output` (`acquire`'s arguments), keep it renewed, release it at the end."""
    with LeaseKeeper(acquire(output, **acquire_args)) as keeper:
        yield keeper


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _iso(ts: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):  # a time no calendar holds (NaN, 1e300, year -29719)
        return f"an impossible time ({quote(ts)})"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds) or abs(seconds) > 1e12:
        return f"{quote(seconds)} s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {s} s"
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m} min"
