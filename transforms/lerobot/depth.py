"""Depth cameras as LeRobot (0.6 and later) records and returns them. Pure: no Beam, no torch.

A camera feature whose `info` says `"is_depth_map": true` is a depth map:

* stored as video (LeRobot's default depth encoder): HEVC Main 12, pixel format `gray12le`, lossless; each
  pixel is a 12-bit code, the depth log-quantized between `video.depth_min` and `video.depth_max` metres with
  `video.shift` (`video.use_log`; linear when false);
* stored as images in the data files (`use_videos=False`): 16-bit TIFF holding the depth itself in
  `depth_unit` (millimetres as LeRobot writes integer depth).

`LeRobotDataset` returns a depth frame as a `(1, H, W)` float32 tensor in its `depth_output_unit`: millimetres
by default (rounded to whole millimetres), metres on request. `dequantize` and `image_depth` compute the same
values with numpy, in the same float32 steps as LeRobot's torch code (codes times the scale, plus the log of
the lower bound, exp, minus the shift, clamped to the bounds, times 1000 and rounded for millimetres); numpy's
and torch's float32 `exp` can differ in the last bit, which moves a rounding to the next millimetre for a few
pixels.

`DepthSpec` is what a reader needs, read from info.json; the import keeps it in the episode schema's metadata
(`DEPTH_METADATA_KEY`, see `transforms.episode.episode_type`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping, Optional

import numpy as np

__all__ = ["DEPTH_METADATA_KEY", "DEPTH_UNITS", "DepthSpec", "dequantize", "depth_spec", "image_depth",
           "missing_quantization", "specs_from_metadata", "specs_to_metadata"]

#: The episode schema's metadata key holding the depth cameras' specs (JSON: camera -> spec).
DEPTH_METADATA_KEY = b"lerobot:depth"
#: Units a depth frame may be returned in (LeRobot's `depth_output_unit`).
DEPTH_UNITS = ("mm", "m")
#: 12-bit codes: the largest code LeRobot's depth encoder writes.
QMAX = (1 << 12) - 1
#: The quantization fields of a depth video feature's `info`, and LeRobot 0.6.1's defaults for them.
QUANTIZATION_DEFAULTS = {"video.depth_min": 0.01, "video.depth_max": 10.0, "video.shift": 3.5,
                         "video.use_log": True}
_MM_PER_M = np.float32(1000.0)
_UINT16_MAX = np.float32(65535.0)


@dataclasses.dataclass(frozen=True)
class DepthSpec:
    """How one depth camera is stored, from its info.json feature.

    Attributes:
        stored: "video" (12-bit codes in an MP4) or "image" (depth values in encoded images).
        unit: the unit LeRobot recorded the depth in (`depth_unit`, "mm" or "m").
        depth_min, depth_max, shift, use_log: the quantization (metres; video only, None for images).
        pix_fmt: the declared pixel format (`video.pix_fmt`, e.g. gray12le; video only).
    """

    stored: str
    unit: str = "mm"
    depth_min: Optional[float] = QUANTIZATION_DEFAULTS["video.depth_min"]
    depth_max: Optional[float] = QUANTIZATION_DEFAULTS["video.depth_max"]
    shift: Optional[float] = QUANTIZATION_DEFAULTS["video.shift"]
    use_log: Optional[bool] = True
    pix_fmt: Optional[str] = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "DepthSpec":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


def _info(feature_info: Any) -> dict:
    """A feature's `info`, older files' `video_info` block merged under it."""
    if not isinstance(feature_info, dict):
        return {}
    older = feature_info.get("video_info")
    return {**(older if isinstance(older, dict) else {}), **feature_info}


def is_depth(feature_info: Any) -> bool:
    """Whether a feature's `info` declares a depth map (`is_depth_map`, or `video.is_depth_map`, true)."""
    info = _info(feature_info)
    return info.get("is_depth_map") is True or info.get("video.is_depth_map") is True


def missing_quantization(feature_info: Any) -> list[str]:
    """The quantization fields a depth video feature's `info` lacks (or holds as a non-number)."""
    info = _info(feature_info)
    out = []
    for key in QUANTIZATION_DEFAULTS:
        v = info.get(key)
        ok = isinstance(v, bool) if key == "video.use_log" else \
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not ok:
            out.append(key)
    return out


def depth_spec(dtype: str, feature_info: Any) -> Optional[DepthSpec]:
    """The spec of a camera feature (`dtype` video or image), None when it is no depth map. Missing
    quantization fields take LeRobot's defaults (the quality pass names them)."""
    if dtype not in ("video", "image") or not is_depth(feature_info):
        return None
    info = _info(feature_info)
    unit = info.get("depth_unit") if info.get("depth_unit") in DEPTH_UNITS else "mm"
    if dtype == "image":  # the image holds the depth itself: no quantization
        return DepthSpec(stored="image", unit=unit, depth_min=None, depth_max=None, shift=None, use_log=None)
    q = {k: (QUANTIZATION_DEFAULTS[k] if k in missing_quantization(info) else info[k]) for k in QUANTIZATION_DEFAULTS}
    pix_fmt = info.get("video.pix_fmt") if isinstance(info.get("video.pix_fmt"), str) else None
    return DepthSpec(stored="video", unit=unit, depth_min=float(q["video.depth_min"]),
                     depth_max=float(q["video.depth_max"]), shift=float(q["video.shift"]),
                     use_log=bool(q["video.use_log"]), pix_fmt=pix_fmt)


def specs_to_metadata(specs: Mapping[str, DepthSpec]) -> dict[bytes, bytes]:
    """Schema metadata holding the depth cameras' specs ({} when there is none)."""
    if not specs:
        return {}
    doc = {name: spec.to_json() for name, spec in specs.items()}
    return {DEPTH_METADATA_KEY: json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()}


def specs_from_metadata(metadata: Optional[Mapping[bytes, bytes]]) -> dict[str, DepthSpec]:
    """The depth cameras' specs of an episode schema's metadata ({} for an import without depth)."""
    raw = (metadata or {}).get(DEPTH_METADATA_KEY)
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
        return {str(name): DepthSpec.from_json(spec) for name, spec in doc.items()}
    except (ValueError, TypeError, AttributeError) as ex:
        raise ValueError(f"the episode schema's {DEPTH_METADATA_KEY.decode()} metadata is not valid: {ex}") from None


def _check_unit(unit: str) -> None:
    if unit not in DEPTH_UNITS:
        raise ValueError(f"depth_unit={unit!r} is not one of {', '.join(map(repr, DEPTH_UNITS))}")


def dequantize(codes: np.ndarray, spec: DepthSpec, unit: str = "mm") -> np.ndarray:
    """12-bit codes (any shape, uint16) -> depth, float32 of the same shape, as LeRobot de-quantizes them:
    in `unit` (millimetres rounded to whole ones, or metres), clamped to [depth_min, depth_max] metres.

    Args:
        codes: the decoded codes.
        spec: the camera's quantization.
        unit: "mm" (LeRobot's default `depth_output_unit`) or "m".
    """
    _check_unit(unit)
    lo, hi, shift = float(spec.depth_min), float(spec.depth_max), float(spec.shift)
    if spec.use_log:
        offset = math.log(lo + shift)
        scale = (math.log(hi + shift) - offset) / QMAX
    else:
        offset, scale = lo, (hi - lo) / QMAX
    # float32 throughout, one step at a time, as LeRobot's in-place torch ops compute them
    buf = np.asarray(codes).astype(np.float32)
    np.multiply(buf, np.float32(scale), out=buf)
    np.add(buf, np.float32(offset), out=buf)
    if spec.use_log:
        np.exp(buf, out=buf)
        np.subtract(buf, np.float32(shift), out=buf)
    np.clip(buf, np.float32(lo), np.float32(hi), out=buf)
    if unit == "mm":
        np.multiply(buf, _MM_PER_M, out=buf)
        np.rint(buf, out=buf)
        np.clip(buf, np.float32(0), _UINT16_MAX, out=buf)
    return buf


def image_depth(values: np.ndarray, spec: DepthSpec, unit: str = "mm") -> np.ndarray:
    """A depth image's values (in the camera's `depth_unit`) -> float32 in `unit`: millimetres as whole
    millimetres, metres as they are (millimetres / 1000)."""
    _check_unit(unit)
    buf = np.asarray(values).astype(np.float32)
    if spec.unit == unit:
        return buf
    if unit == "m":
        return np.divide(buf, _MM_PER_M, out=buf)
    np.multiply(buf, _MM_PER_M, out=buf)
    return np.rint(buf, out=buf)
