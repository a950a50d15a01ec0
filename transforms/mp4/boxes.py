"""Find and read an MP4's `moov` box with a few range reads (mapping §5, "Reads").

The file is read through anything with `size` and `read_range(start, length)`; `open_ranged` wraps an
fsspec filesystem so that each read is one real range request (`fs.cat_file(path, start, end)`, which
gcsfs and s3fs turn into one ranged GET). We read the head of the file, walk the top-level box
headers (jumping over `mdat` and everything else without reading it) and read `moov` whole. We
never scan bytes for the string "moov": only box boundaries are trusted.

Every top-level box header is walked, after moov too, as the reference does (a faststart file whose
`mdat` is cut short is an error). Cost: moov at the start = 1 request (2 when moov is larger than
the head); moov after `mdat` = 3 requests (head, the 16-byte header at the jump target, the rest of
moov); bytes read = the head plus moov plus at most 32 bytes, plus 16 bytes for each further box
header outside what was read (none for the layouts ffmpeg writes).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, Optional, Protocol

from transforms import storage
from transforms.errors import LeRobotImportError

#: How much of the file the first request reads: enough for ftyp, moov of a faststart file of a
#: few thousand samples, and the `mdat` header of an ordinary one.
HEAD_SIZE = 64 * 1024
#: A box header is 8 bytes, 16 with a 64-bit `largesize`.
_HEADER_READ = 16
#: Bytes read past moov's end when moov needs a read of its own: room for `free` + `mdat` headers.
_TAIL_READ = 32


@dataclasses.dataclass
class ReadStats:
    """What a reader has cost: range requests issued and bytes they returned."""

    requests: int = 0
    bytes_read: int = 0


class RangeSource(Protocol):
    """A file that can be read by byte ranges."""

    size: int

    def read_range(self, start: int, length: int) -> bytes: ...


@dataclasses.dataclass
class BytesRangeSource:
    """A file held in memory (tests, and files already fetched whole); counts reads like a remote one."""

    data: bytes
    stats: ReadStats = dataclasses.field(default_factory=ReadStats)

    @property
    def size(self) -> int:
        return len(self.data)

    def read_range(self, start: int, length: int) -> bytes:
        out = self.data[start:start + length]
        self.stats.requests += 1
        self.stats.bytes_read += len(out)
        return out


@dataclasses.dataclass
class FsspecRangeSource:
    """A file on an fsspec filesystem; every `read_range` is one `cat_file(path, start, end)` request."""

    fs: Any
    path: str
    size: int
    uri: str
    stats: ReadStats = dataclasses.field(default_factory=ReadStats)

    def read_range(self, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        try:
            out = storage.with_retries(lambda: self.fs.cat_file(self.path, start=start, end=start + length))
        except FileNotFoundError as ex:
            raise LeRobotImportError("file_missing", f"video file does not exist: {ex}", file=self.uri) from None
        except Exception as ex:  # noqa: BLE001 - any storage failure is an io failure of this file
            raise LeRobotImportError("io", f"reading bytes {start}..{start + length} failed: "
                                           f"{type(ex).__name__}: {ex}", file=self.uri) from None
        self.stats.requests += 1
        self.stats.bytes_read += len(out)
        return bytes(out)


def open_ranged(fs: Any, path: str, *, uri: Optional[str] = None, size: Optional[int] = None) -> FsspecRangeSource:
    """Open `path` on `fs` for range reads. `size` skips the metadata request when the caller knows it."""
    uri = uri or path
    if size is None:
        try:
            size = storage.with_retries(lambda: fs.size(path))
        except FileNotFoundError:
            raise LeRobotImportError("file_missing", "video file does not exist", file=uri) from None
        except Exception as ex:  # noqa: BLE001
            raise LeRobotImportError("io", f"cannot stat the file: {type(ex).__name__}: {ex}", file=uri) from None
        if size is None:
            raise LeRobotImportError("io", "the filesystem reports no size for the file", file=uri)
    return FsspecRangeSource(fs=fs, path=path, size=int(size), uri=uri)


@dataclasses.dataclass(frozen=True)
class BoxHeader:
    """A box's place in the file: `start` of its header, `header_size` (8 or 16) and total `size`."""

    type: bytes
    start: int
    header_size: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


def parse_box_header(buf: bytes, pos: int, parent_end: int, *, file: str, where: str = "top-level",
                     base: int = 0) -> BoxHeader:
    """Read the box header at `pos` of `buf`, whose parent ends at `parent_end` (a box may not pass it).

    `base` is the file offset of `buf[0]`, for messages and the returned `start`. Size 1 means a
    64-bit `largesize` follows; size 0 means "to the end of the parent". Raises mp4_structure on any
    header that cannot be true; never reads past `len(buf)`.
    """
    at = base + pos
    if parent_end - pos < 8 or len(buf) - pos < 8:
        raise LeRobotImportError("mp4_structure", f"truncated MP4 {where} box header at byte {at}", file=file)
    size, type_ = struct.unpack_from(">I4s", buf, pos)
    header = 8
    if size == 1:
        if parent_end - pos < 16 or len(buf) - pos < 16:
            raise LeRobotImportError("mp4_structure", f"truncated 64-bit MP4 {where} box header at byte {at}",
                                     file=file)
        (size,) = struct.unpack_from(">Q", buf, pos + 8)
        header = 16
    elif size == 0:
        size = parent_end - pos
    if size < header:
        raise LeRobotImportError("mp4_structure", f"invalid MP4 {where} box size {size} at byte {at} "
                                                  f"(smaller than its {header}-byte header)", file=file)
    if size > parent_end - pos:
        parent = "the file" if where == "top-level" else "its parent"
        raise LeRobotImportError("mp4_structure", f"invalid MP4 {where} box size {size} at byte {at}: box "
                                                  f"{_fourcc(type_)} would end at byte {at + size}, past the end of "
                                                  f"{parent} at byte {base + parent_end}", file=file)
    return BoxHeader(type=type_, start=at, header_size=header, size=size)


def _fourcc(t: bytes) -> str:
    return "`" + t.decode("latin-1").encode("unicode_escape").decode("ascii") + "`"


@dataclasses.dataclass(frozen=True)
class Moov:
    """The `moov` box (header included), where it was, and what finding it cost."""

    data: bytes
    offset: int
    file_size: int
    top_level: tuple[BoxHeader, ...]

    @property
    def size(self) -> int:
        return len(self.data)


def read_moov(src: RangeSource, *, file: str, head_size: int = HEAD_SIZE) -> Moov:
    """Walk every top-level box header of `src` and return the (first) `moov` box whole.

    Like the reference, the whole top level must be sound, after moov too (a faststart file whose
    `mdat` was cut short fails), and an `ftyp` box must exist somewhere. Reads the head once; a header
    outside what was read costs one 16-byte read; moov's bytes outside the head cost one more read.
    """
    size = int(src.size)
    buf = src.read_range(0, min(head_size, size)) if size > 0 else b""
    buf_start = 0  # file offset of buf[0]
    pos = 0
    boxes: list[BoxHeader] = []
    moov: Optional[bytes] = None
    moov_at = -1
    while pos < size:
        want = min(_HEADER_READ, size - pos)
        if not (buf_start <= pos and pos + want <= buf_start + len(buf)):
            buf = src.read_range(pos, want)
            buf_start = pos
        rel = pos - buf_start
        view = memoryview(buf)
        if size - pos < 8 or (size - pos < 16 and struct.unpack_from(">I", view, rel)[0] == 1):
            raise LeRobotImportError("mp4_structure", f"truncated MP4 top-level box header at byte {pos}", file=file)
        h = parse_box_header(view, rel, size - buf_start, file=file, base=buf_start)
        boxes.append(h)
        if h.type == b"moov" and moov is None:
            have = max(0, min(buf_start + len(buf), h.end) - pos)
            data = bytes(view[rel:rel + have])
            if have < h.size:
                # Read the rest of moov plus the next few box headers (a faststart file goes on with
                # `free` and `mdat`), so walking on needs no request of its own.
                tail = min(_TAIL_READ, size - h.end)
                rest = src.read_range(pos + have, h.size - have + tail)
                data += rest[:h.size - have]
                buf, buf_start = rest, pos + have
            if len(data) != h.size:
                raise LeRobotImportError("mp4_structure", f"truncated moov: read {len(data)} of its {h.size} bytes",
                                         file=file)
            moov, moov_at = data, pos
        pos = h.end
    if not any(b.type == b"ftyp" for b in boxes):
        raise LeRobotImportError("mp4_structure", "MP4 file does not contain an ftyp box"
                                 + ("" if size else " (the file is empty)"), file=file)
    if moov is None:
        raise LeRobotImportError("mp4_structure", "MP4 file does not contain a moov box (top-level boxes: "
                                                  f"{', '.join(_fourcc(b.type) for b in boxes)})", file=file)
    return Moov(data=moov, offset=moov_at, file_size=size, top_level=tuple(boxes))
