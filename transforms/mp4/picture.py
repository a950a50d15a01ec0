"""What pictures a video track holds (planes and bit depth), from its sample entry's codec configuration.

The MediaIndex keeps each track's whole `stsd` box (`sample_entry`); its configuration box says how the
pictures are coded without decoding one:

* `hvcC` (H.265): `chroma_format_idc` (0 = monochrome, one plane) and `bitDepthLumaMinus8` (LeRobot's depth
  encoder writes Main 12 `gray12le`: monochrome, 12 bits);
* `av1C` (AV1): `mono_chrome`, `high_bitdepth` and `twelve_bit`;
* `avcC` (H.264): the High-profile extension after the parameter sets (`chroma_format`,
  `bit_depth_luma_minus8`); earlier profiles are 4:2:0 8-bit.

A depth map and a colour camera are told apart by this (a one-plane picture of more than 8 bits is a depth
encoding), so an info.json that declares one and a file that holds the other is found when the file's
index is read.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from transforms.base.errors import LeRobotImportError
from transforms.mp4.boxes import Box, BoxWalk, full_box, parse_box_header

__all__ = ["PictureFormat", "picture_format"]

#: MediaIndex codec name -> the configuration box inside its sample entry.
_CONFIG_BOX = {"h264": b"avcC", "h265": b"hvcC", "av1": b"av1C"}
#: A visual sample entry's fixed fields after its 8-byte header, before its child boxes.
_VISUAL_ENTRY_FIXED = 78
#: avcC profiles that carry the chroma format and bit depth after the parameter sets.
_AVC_HIGH_PROFILES = (100, 110, 122, 144, 244)


@dataclasses.dataclass(frozen=True)
class PictureFormat:
    """Attributes:
        monochrome: one plane (luma only).
        bit_depth: bits per luma sample.
    """

    monochrome: bool
    bit_depth: int

    @property
    def is_depth_encoding(self) -> bool:
        """One plane of more than 8 bits: how depth maps are encoded (LeRobot's gray12le), never a colour camera."""
        return self.monochrome and self.bit_depth > 8

    def describe(self) -> str:
        return f"{'one-plane (monochrome)' if self.monochrome else 'colour (YUV)'} {self.bit_depth}-bit pictures"


def _config(sample_entry: bytes, codec: str) -> Optional[bytes]:
    want = _CONFIG_BOX.get(codec)
    if want is None:
        return None
    try:
        walk = BoxWalk(bytes(sample_entry), file="sample_entry", where="sample entry")
        stsd = walk.root()
        if stsd.type != b"stsd":
            return None
        _, pos = full_box(walk.buf, stsd, 4, walk.file, versions=tuple(range(256)))
        entry = Box(parse_box_header(walk.buf, pos + 4, stsd.end, file=walk.file, where="sample entry"))
        config = next((c for c in walk.children(entry, entry.payload + _VISUAL_ENTRY_FIXED) if c.type == want), None)
    except LeRobotImportError:
        return None
    return None if config is None else bytes(walk.buf[config.payload:config.end])


def _avc(cfg: bytes) -> Optional[PictureFormat]:
    if len(cfg) < 7:
        return None
    profile = cfg[1]
    pos = 6
    for _ in range(cfg[5] & 0x1F):  # sequence parameter sets
        if pos + 2 > len(cfg):
            return None
        pos += 2 + int.from_bytes(cfg[pos:pos + 2], "big")
    if pos >= len(cfg):
        return None
    n_pps = cfg[pos]
    pos += 1
    for _ in range(n_pps):
        if pos + 2 > len(cfg):
            return None
        pos += 2 + int.from_bytes(cfg[pos:pos + 2], "big")
    if profile in _AVC_HIGH_PROFILES and pos + 3 <= len(cfg):
        return PictureFormat(monochrome=(cfg[pos] & 0x03) == 0, bit_depth=(cfg[pos + 1] & 0x07) + 8)
    if profile in _AVC_HIGH_PROFILES:
        return None  # the extension is optional in old files: not known
    return PictureFormat(monochrome=False, bit_depth=8)


def picture_format(sample_entry: bytes, codec: str) -> Optional[PictureFormat]:
    """The pictures a track holds, from its `stsd` box (as the MediaIndex stores it).

    Args:
        sample_entry: the whole `stsd` box.
        codec: the MediaIndex codec name (h264, h265, av1).
    Returns:
        The format; None when the configuration does not say (no configuration box, a short one).
    """
    cfg = _config(sample_entry, codec)
    if cfg is None:
        return None
    if codec == "h265":
        if len(cfg) < 19:
            return None
        return PictureFormat(monochrome=(cfg[16] & 0x03) == 0, bit_depth=(cfg[17] & 0x07) + 8)
    if codec == "av1":
        if len(cfg) < 3:
            return None
        b = cfg[2]
        high, twelve, mono = bool(b & 0x40), bool(b & 0x20), bool(b & 0x10)
        return PictureFormat(monochrome=mono, bit_depth=12 if high and twelve else 10 if high else 8)
    return _avc(cfg)
