"""MP4 boxes: the one box-header parser, the walk of the boxes inside a buffer, and finding `moov`.

Only box boundaries are trusted: we never scan bytes for the string "moov". Every header is checked
against its parent (a box may not pass its parent's end), and every walk counts the boxes it meets
against `Limits`, so any bytes give a `LeRobotImportError` and nothing else.

`read_moov` walks every top-level box header of a file, after moov too, as the reference does (a
faststart file whose `mdat` is cut short is an error), jumping over `mdat` and everything else
without reading it, and reads moov whole. Cost: moov inside the head (64 KiB) = 1 request; moov after
`mdat` = 2 requests when moov fits the 4 KiB read at the jump, else 3 (the rest of moov); bytes read
= the head plus moov plus at most 4 KiB per jump. The number of requests, of top-level boxes and
moov's size are bounded (`Limits`), so millions of tiny boxes cost one request and an error.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Optional

from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.mp4.limits import DEFAULT_LIMITS, Limits, limit_error
from transforms.mp4.ranges import RangeReader, read_range

__all__ = ["HEAD_SIZE", "BoxHeader", "Box", "BoxWalk", "Moov", "fourcc", "full_box", "parse_box_header",
           "read_moov"]

#: How much of the file the first request reads: enough for ftyp, the moov of a faststart file of a
#: few thousand samples, and the `mdat` header of an ordinary one.
HEAD_SIZE = 64 * 1024
#: Bytes read at a box header outside what was read: a moov at the end of a short clip comes whole
#: with its header, without reading far into a large box.
JUMP_READ = 4 * 1024
#: Bytes read past moov's end when moov needs a read of its own: room for `free` + `mdat` headers.
_TAIL_READ = 32


def fourcc(t: bytes) -> str:
    """A box type for messages: printable, in backquotes (`moov`, `\\x00\\x01..`)."""
    return "`" + bytes(t).decode("latin-1").encode("unicode_escape").decode("ascii") + "`"


@dataclasses.dataclass(frozen=True)
class BoxHeader:
    """A box's place: `start` of its header, `header_size` (8 or 16) and total `size`."""

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
                                                  f"{fourcc(type_)} would end at byte {at + size}, past the end of "
                                                  f"{parent} at byte {base + parent_end}", file=file)
    return BoxHeader(type=bytes(type_), start=at, header_size=header, size=size)


# ------------------------------------------------------------------------------------------------
# Boxes inside a buffer (moov, a sample entry)
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Box:
    """A box inside a buffer: its header, and where its payload starts and ends in the buffer."""

    header: BoxHeader

    @property
    def type(self) -> bytes:
        return self.header.type

    @property
    def name(self) -> str:
        return self.header.type.decode("latin-1")

    @property
    def start(self) -> int:
        return self.header.start

    @property
    def payload(self) -> int:
        return self.header.start + self.header.header_size

    @property
    def end(self) -> int:
        return self.header.end


class BoxWalk:
    """The boxes of one buffer, walked on demand: each container's children are parsed once, and all
    children met count against `limits.max_children` (per box) and `limits.max_boxes` (in total)."""

    def __init__(self, buf: bytes, *, file: str, limits: Limits = DEFAULT_LIMITS, where: str = "moov") -> None:
        self.buf = buf
        self.file = file
        self.limits = limits
        self.where = where
        self.boxes = 0
        self._children: dict[tuple[int, int], tuple[Box, ...]] = {}

    def root(self) -> Box:
        """The box that starts the buffer and must fill it exactly."""
        h = parse_box_header(self.buf, 0, len(self.buf), file=self.file)
        if h.size != len(self.buf):
            raise LeRobotImportError("mp4_structure", f"{fourcc(h.type)} box says {h.size} bytes but "
                                                      f"{len(self.buf)} were given", file=self.file)
        return Box(h)

    def children(self, box: Box, start: Optional[int] = None) -> tuple[Box, ...]:
        """The boxes inside `box` from `start` (default: its payload) to its end; each must end inside it."""
        pos = box.payload if start is None else start
        key = (box.start, pos)
        found = self._children.get(key)
        if found is not None:
            return found
        where = f"{fourcc(box.type)} child ({self.where}-relative)"
        out: list[Box] = []
        while pos < box.end:
            if len(out) == self.limits.max_children:
                raise limit_error(self.file, f"the {fourcc(box.type)} box at {self.where} byte {box.start} has "
                                             f"more than {self.limits.max_children:,} child boxes", "max_children",
                                  self.limits)
            if self.boxes == self.limits.max_boxes:
                raise limit_error(self.file, f"{self.where} holds more than {self.limits.max_boxes:,} boxes",
                                  "max_boxes", self.limits)
            h = parse_box_header(self.buf, pos, box.end, file=self.file, where=where)
            out.append(Box(h))
            self.boxes += 1
            pos = h.end
        found = tuple(out)
        self._children[key] = found
        return found

    def child(self, box: Optional[Box], type_: bytes) -> Optional[Box]:
        """The first child of `box` of type `type_`; None when there is none (or `box` is None)."""
        if box is None:
            return None
        return next((c for c in self.children(box) if c.type == type_), None)

    def path(self, box: Optional[Box], *types: bytes) -> Optional[Box]:
        """`child(child(box, a), b)...`: None as soon as one is missing."""
        for t in types:
            box = self.child(box, t)
        return box


def full_box(buf: bytes, box: Box, fixed: int, file: str, *, versions: tuple[int, ...] = (0, 1),
             where: str = "moov") -> tuple[int, int]:
    """(version, position after version/flags) of a FullBox whose payload holds at least `fixed` bytes
    after its version and flags; raises mp4_structure otherwise."""
    if box.end - box.payload < 4:
        raise LeRobotImportError("mp4_structure", f"{fourcc(box.type)} box at {where} byte {box.start} is too "
                                                  "small for its version and flags", file=file)
    version = buf[box.payload]
    if version not in versions:
        raise LeRobotImportError("mp4_structure", f"{fourcc(box.type)} box has unsupported version {version}",
                                 file=file)
    pos = box.payload + 4
    if box.end - pos < fixed:
        raise LeRobotImportError("mp4_structure", f"{fourcc(box.type)} box at {where} byte {box.start} holds "
                                                  f"{box.end - pos} bytes after its version and flags, fewer than "
                                                  f"the {fixed} its fields need", file=file)
    return version, pos


# ------------------------------------------------------------------------------------------------
# Finding moov in a file
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Moov:
    """The `moov` box (header included), where it was, and the file's top-level boxes."""

    data: bytes
    offset: int
    file_size: int
    top_level: tuple[BoxHeader, ...]

    @property
    def size(self) -> int:
        return len(self.data)


class _Window:
    """The part of the file read last, and the requests spent reading it (bounded)."""

    def __init__(self, src: RangeReader, file: str, limits: Limits) -> None:
        self.src, self.file, self.limits = src, file, limits
        self.buf: bytes = b""
        self.start = 0
        self.requests = 0

    def read(self, pos: int, length: int) -> bytes:
        if self.requests == self.limits.max_requests:
            raise limit_error(self.file, f"finding moov needs more than {self.limits.max_requests} range requests "
                                         f"(next: a box header at byte {pos:,})", "max_requests", self.limits)
        self.requests += 1
        return read_range(self.src, pos, length)

    def holds(self, pos: int, length: int) -> bool:
        return self.start <= pos and pos + length <= self.start + len(self.buf)

    def move(self, pos: int, length: int) -> None:
        self.buf, self.start = self.read(pos, length), pos


def read_moov(src: RangeReader, *, file: str, head_size: int = HEAD_SIZE, limits: Limits = DEFAULT_LIMITS) -> Moov:
    """Walk every top-level box header of `src` and return the (first) `moov` box whole.

    Like the reference, the whole top level must be sound, after moov too, and an `ftyp` box must exist
    somewhere. A git-LFS pointer is recognised from the first bytes; a top-level `moof` (a fragmented
    file) ends the walk. Raises mp4_structure, mp4_limits, lfs_pointer (and file_missing/io from `src`).
    """
    size = int(src.size)
    win = _Window(src, file, limits)
    if size > 0:
        win.move(0, min(head_size, size))
        storage.raise_if_lfs_pointer(win.buf[:len(storage.LFS_POINTER_PREFIX)], what="video file", file=file)
    pos = 0
    boxes: list[BoxHeader] = []
    moov: Optional[Moov] = None
    while pos < size:
        if len(boxes) == limits.max_top_level_boxes:
            raise limit_error(file, f"the file has more than {limits.max_top_level_boxes:,} top-level boxes "
                                    f"(the next at byte {pos:,})", "max_top_level_boxes", limits)
        h = _top_level_header(win, pos, size, file)
        boxes.append(h)
        if h.type == b"moof":
            raise LeRobotImportError("mp4_structure", "fragmented MP4 is not supported (a top-level `moof` box at "
                                                      f"byte {h.start}: samples are in movie fragments)", file=file)
        if h.type == b"moov" and moov is None:
            moov = Moov(_moov_bytes(win, h, size, file, limits), h.start, size, ())
        pos = h.end
    if not any(b.type == b"ftyp" for b in boxes):
        raise LeRobotImportError("mp4_structure", "MP4 file does not contain an ftyp box"
                                 + ("" if size else " (the file is empty)"), file=file)
    if moov is None:
        raise LeRobotImportError("mp4_structure", "MP4 file does not contain a moov box (top-level boxes: "
                                                  f"{', '.join(fourcc(b.type) for b in boxes)})", file=file)
    return dataclasses.replace(moov, top_level=tuple(boxes))


def _top_level_header(win: _Window, pos: int, size: int, file: str) -> BoxHeader:
    """The top-level box header at `pos`, reading `JUMP_READ` bytes there when it was not read yet."""
    want = min(16, size - pos)
    if not win.holds(pos, want):
        win.move(pos, max(want, min(JUMP_READ, size - pos)))
    rel = pos - win.start
    view = memoryview(win.buf)
    if size - pos < 8 or (size - pos < 16 and struct.unpack_from(">I", view, rel)[0] == 1):
        raise LeRobotImportError("mp4_structure", f"truncated MP4 top-level box header at byte {pos}", file=file)
    return parse_box_header(view, rel, size - win.start, file=file, base=win.start)


def _moov_bytes(win: _Window, h: BoxHeader, size: int, file: str, limits: Limits) -> bytes:
    """The whole moov box at `h`: what the window holds, plus one read for the rest (and the next few
    box headers: a faststart file goes on with `free` and `mdat`, so walking on needs no request)."""
    if h.size > limits.max_moov_bytes:
        raise limit_error(file, f"the moov box at byte {h.start:,} declares {h.size:,} bytes", "max_moov_bytes",
                          limits)
    have = max(0, min(win.start + len(win.buf), h.end) - h.start)
    rel = h.start - win.start
    data = bytes(memoryview(win.buf)[rel:rel + have])
    if have < h.size:
        tail = min(_TAIL_READ, size - h.end)
        rest = win.read(h.start + have, h.size - have + tail)
        data += rest[:h.size - have]
        win.buf, win.start = rest, h.start + have
    if len(data) != h.size:
        raise LeRobotImportError("mp4_structure", f"truncated moov: read {len(data)} of its {h.size} bytes", file=file)
    return data
