"""What the moov fuzzer runs on one input, shared with the replay of its findings (tests/test_fuzz_regressions.py).

The first byte of an input picks the target and the limits:
* bit 0 clear -> `parse_media_index(rest)` on a bare moov box, standing for a file of its own size (the
  parser bounds what a constant-size `stsz` may declare by the file's size);
* bit 0 set -> `read_moov(BytesRangeReader(rest[1:]), head_size=...)` on a whole file (the second byte
  picks a small or the default head size, so the multi-read paths run too), then `parse_media_index`;
* bit 1 set -> with `SMALL_LIMITS`, so that small inputs reach every bound of `Limits` (samples of all
  tracks together, children per box, boxes in moov, top-level boxes, range requests, moov size).
"""

from __future__ import annotations

from typing import Optional

from transforms.mp4.boxes import read_moov
from transforms.mp4.limits import DEFAULT_LIMITS, Limits
from transforms.mp4.ranges import BytesRangeReader
from transforms.mp4.tables import MediaIndex, parse_media_index

#: Bounds small enough for inputs of a few KB to cross each of them.
SMALL_LIMITS = Limits(max_samples=512, max_moov_bytes=16 << 10, max_children=24, max_boxes=96,
                      max_top_level_boxes=12, max_requests=3)


def limits_of(mode: int) -> Limits:
    return SMALL_LIMITS if mode & 2 else DEFAULT_LIMITS


def run(data: bytes) -> Optional[MediaIndex]:
    """Parse one fuzz input as its first byte says; None for an empty input."""
    if not data:
        return None
    mode, body = data[0], data[1:]
    limits = limits_of(mode)
    if mode % 2 == 0:
        return parse_media_index(body, file="fuzz.mp4", file_size=len(body), limits=limits)
    head = 64 * 1024 if not body or body[0] % 4 == 0 else 16 + body[0] * 4
    moov = read_moov(BytesRangeReader(body[1:], "fuzz.mp4"), file="fuzz.mp4", head_size=head, limits=limits)
    return parse_media_index(moov.data, file="fuzz.mp4", file_size=moov.file_size, limits=limits)
