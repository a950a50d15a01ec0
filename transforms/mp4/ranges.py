"""Byte ranges of one file: the one range-reader protocol, in memory and on any fsspec filesystem.

The importer reads an MP4's head and moov through it; the episode reader reads each seek's samples
through it. One `read_ranges` call is one batch: each range is one request to storage (a ranged GET
on an object store), issued concurrently where the filesystem can. Every reader counts what reached
storage in its `stats`, so callers and tests can check what a read cost.

Failures are `LeRobotImportError`s: `file_missing` for a file that is not there, `io` for storage
failures and for a file shorter than the ranges asked (it changed, or was truncated, under us).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, Protocol, Sequence

from fsspec.implementations.local import LocalFileSystem

from transforms.base import run_limits, storage
from transforms.base.errors import LeRobotImportError

__all__ = ["ReadStats", "RangeReader", "BytesRangeReader", "FsspecRangeReader", "LocalRangeReader", "open_fsspec",
           "open_uri", "read_range"]


#: What a reader has cost (range requests and bytes): storage's one read counter.
ReadStats = storage.ReadCounter


class RangeReader(Protocol):
    """One file, read by byte ranges.

    `uri` names the file in messages; `size` is its length in bytes; `read_ranges(starts, ends)` returns
    the bytes of each `[start, end)`, every range inside the file, as one batch of requests."""

    uri: str
    stats: ReadStats

    @property
    def size(self) -> int: ...

    def read_ranges(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]: ...


def read_range(reader: RangeReader, start: int, length: int) -> bytes:
    """`length` bytes at `start`: one request."""
    return reader.read_ranges([start], [start + length])[0]


def _check_ranges(uri: str, size: Optional[int], starts: Sequence[int], ends: Sequence[int]) -> None:
    for s, e in zip(starts, ends):
        if s < 0 or e < s or (size is not None and e > size):
            raise LeRobotImportError("io", f"bytes {s}..{e} are not inside the file ({size} bytes)", file=uri)


def _check_lengths(uri: str, chunks: Sequence[bytes], starts: Sequence[int], ends: Sequence[int]) -> None:
    for data, s, e in zip(chunks, starts, ends):
        if len(data) != e - s:
            raise LeRobotImportError("io", f"the file is shorter than expected: bytes {s}..{e} gave {len(data)} "
                                           "bytes (was it truncated or replaced while being read?)", file=uri)


@dataclasses.dataclass
class BytesRangeReader:
    """A file held in memory (tests, and files already fetched whole); counts reads like a remote one."""

    data: bytes
    uri: str = "memory.mp4"
    stats: ReadStats = dataclasses.field(default_factory=ReadStats)

    @property
    def size(self) -> int:
        return len(self.data)

    def read_ranges(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        _check_ranges(self.uri, self.size, starts, ends)
        out = [bytes(self.data[s:e]) for s, e in zip(starts, ends)]
        self.stats.add(out)
        return out


@dataclasses.dataclass
class FsspecRangeReader:
    """A file on an fsspec filesystem: one range is one `cat_file(path, start, end)` (gcsfs and s3fs make
    it one ranged GET), several are one `cat_ranges` batch (concurrent on remote filesystems). The size
    is asked of the filesystem only when needed, once."""

    fs: Any
    path: str
    uri: str
    known_size: Optional[int] = None
    what: str = "video file"
    stats: ReadStats = dataclasses.field(default_factory=ReadStats)

    @property
    def size(self) -> int:
        if self.known_size is None:
            try:
                size = storage.with_retries(lambda: self.fs.size(self.path))
            except FileNotFoundError:
                raise LeRobotImportError("file_missing", f"{self.what} {self.uri} does not exist",
                                         file=self.uri) from None
            except Exception as ex:  # noqa: BLE001 - any storage failure is an io failure of this file
                raise LeRobotImportError("io", f"cannot stat the {self.what}: {type(ex).__name__}: {ex}",
                                         file=self.uri) from None
            if size is None:
                raise LeRobotImportError("io", f"the filesystem reports no size for the {self.what}", file=self.uri)
            self.known_size = int(size)
        return self.known_size

    def read_ranges(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        starts, ends = [int(s) for s in starts], [int(e) for e in ends]
        if not starts:
            return []
        _check_ranges(self.uri, self.known_size, starts, ends)
        pace = run_limits.ReadPace(f"bytes {starts[0]}..{ends[-1]} of {self.what} {self.uri}",
                                   source=run_limits.source_of(self.uri))
        try:
            if len(starts) == 1:
                out = [storage.with_retries(lambda: self.fs.cat_file(self.path, start=starts[0], end=ends[0]))]
            else:
                out = storage.with_retries(lambda: self.fs.cat_ranges([self.path] * len(starts), starts, ends,
                                                                      on_error="return"))
        except FileNotFoundError:
            raise LeRobotImportError("file_missing", f"{self.what} {self.uri} does not exist", file=self.uri) from None
        except Exception as ex:  # noqa: BLE001 - any storage failure is an io failure of this file
            raise LeRobotImportError("io", f"reading bytes {starts[0]}..{ends[-1]} failed: {type(ex).__name__}: {ex}",
                                     file=self.uri) from None
        pace.add(sum(len(d) for d in out if isinstance(d, (bytes, bytearray))))
        for data, s, e in zip(out, starts, ends):
            if isinstance(data, FileNotFoundError):
                raise LeRobotImportError("file_missing", f"{self.what} {self.uri} does not exist", file=self.uri)
            if isinstance(data, BaseException):
                raise LeRobotImportError("io", f"reading bytes {s}..{e} failed: {type(data).__name__}: {data}",
                                         file=self.uri)
        out = [bytes(d) for d in out]
        _check_lengths(self.uri, out, starts, ends)
        self.stats.add(out)
        return out


class LocalRangeReader:
    """A local video file read by byte ranges with `os.pread` on one descriptor, opened at first read.

    Args:
        path: the file's local path.
        uri: names the file in messages.
        stats: the counters its reads are added to.
        what: what the file is, for messages.
    """

    def __init__(self, path: str, uri: str, stats: ReadStats, what: str = "video file") -> None:
        self.path, self.uri, self.stats, self.what = path, uri, stats, what
        self._fd: Optional[int] = None
        self._size = 0

    @property
    def size(self) -> int:
        self._open()
        return self._size

    def _open(self) -> int:
        if self._fd is None:
            try:
                fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                raise LeRobotImportError("file_missing", f"{self.what} {self.uri} does not exist",
                                         file=self.uri) from None
            except OSError as ex:
                raise LeRobotImportError("io", f"cannot open it: {type(ex).__name__}: {ex}", file=self.uri) from None
            self._size = os.fstat(fd).st_size
            self._fd = fd
        return self._fd

    def read_ranges(self, starts, ends) -> list[bytes]:
        starts, ends = [int(s) for s in starts], [int(e) for e in ends]
        fd = self._open()
        # not checked against the size found at open: the file may change after it, and a short read says so
        _check_ranges(self.uri, None, starts, ends)
        try:
            out = [os.pread(fd, e - s, s) for s, e in zip(starts, ends)]
        except OSError as ex:
            raise LeRobotImportError("io", f"reading bytes {starts[0]}..{ends[-1]} failed: {type(ex).__name__}: {ex}",
                                     file=self.uri) from None
        _check_lengths(self.uri, out, starts, ends)
        self.stats.add(out)
        return out

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()


def open_fsspec(fs: Any, path: str, *, uri: Optional[str] = None, size: Optional[int] = None,
                what: str = "video file", stats: Optional[ReadStats] = None) -> FsspecRangeReader:
    """`path` on filesystem `fs` for range reads.

    Args:
        fs, path: the filesystem and the path on it.
        uri: names the file in messages (default: `path`).
        size: the file's size when the caller knows it (saves a metadata request).
        what: what the file is, for messages.
        stats: counters to share with other readers (default: the reader's own).
    """
    return FsspecRangeReader(fs=fs, path=path, uri=uri or path, known_size=None if size is None else int(size),
                             what=what, stats=stats if stats is not None else ReadStats())


def open_uri(uri: str, *, size: Optional[int] = None, what: str = "video file",
             stats: Optional[ReadStats] = None, pread: bool = False) -> "FsspecRangeReader | LocalRangeReader":
    """The file at `uri` (a local path or any fsspec URL) for range reads through fsspec (`open_fsspec`); with
    `pread`, a local file by `os.pread` on one descriptor instead (`LocalRangeReader`, its size from the file
    itself, the descriptor kept until `close()`: for a reader that keeps its files open)."""
    try:
        fs, path = storage.filesystem(uri)
    except LeRobotImportError:
        raise
    except Exception as ex:  # noqa: BLE001 - an unknown protocol, a missing driver
        raise LeRobotImportError("io", f"cannot open {uri}: {type(ex).__name__}: {ex}", file=uri) from None
    if pread and isinstance(fs, LocalFileSystem):
        return LocalRangeReader(path, uri, stats if stats is not None else ReadStats(), what)
    return open_fsspec(fs, path, uri=uri, size=size, what=what, stats=stats)
