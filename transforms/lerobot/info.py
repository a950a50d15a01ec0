"""`meta/info.json` as a typed model: features in declared order and safe path templates.

Everything the import derives from info.json (the episode type, where files are, which cameras get
a MediaIndex) comes from this one model, so every rule about info.json lives here (mapping §1, §2).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from typing import Any, Optional

from transforms.errors import LeRobotImportError

NUMERIC_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                  "uint8", "uint16", "uint32", "uint64")
INDEXED_CODECS = ("h264", "hevc", "av1")
INFO_PATH = "meta/info.json"
EPISODES_DIR = "meta/episodes"
DEFAULT_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")
LANGUAGE_FEATURES = ("language_persistent", "language_events")


@dataclasses.dataclass(frozen=True)
class Feature:
    """One entry of info.json `features`, classified by how it imports."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    names: Any
    info: dict

    @property
    def kind(self) -> str:
        """numeric | bool | string | image | video | language."""
        if self.dtype in NUMERIC_DTYPES:
            return "numeric"
        return self.dtype

    @property
    def is_scalar(self) -> bool:
        return self.shape in ((), (1,))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dim_names(self) -> Optional[list[str]]:
        """Dimension names: only when `names` names each dimension once (mapping §2)."""
        names = self.names
        if isinstance(names, dict):
            names = list(names.keys())
        if (isinstance(names, list) and len(names) == len(self.shape)
                and all(isinstance(n, str) for n in names)):
            return list(names)
        return None

    def named_dim(self, label: str) -> Optional[int]:
        """The shape entry that `names` calls `label` (e.g. width), or None."""
        names = self.names
        if isinstance(names, dict):
            names = list(names.keys())
        if isinstance(names, list) and len(names) == len(self.shape) and label in names:
            return int(self.shape[names.index(label)])
        return None

    @property
    def video_codec(self) -> Optional[str]:
        """The declared codec: `info["video.codec"]`, or `video_info["video.codec"]` in older files."""
        for block in (self.info, self.info.get("video_info") if isinstance(self.info, dict) else None):
            if isinstance(block, dict) and isinstance(block.get("video.codec"), str):
                return block["video.codec"]
        return None


_PLACEHOLDER = re.compile(r"\{([^{}:]*)(?::([^{}]*))?\}")
_FORMAT_SPEC = re.compile(r"^0?\d*d$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclasses.dataclass(frozen=True)
class PathTemplate:
    """A `data_path`/`video_path` template with only the placeholders the format defines."""

    key: str  # "data_path" or "video_path", for messages
    template: str
    allowed: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.template, str) or not self.template:
            raise LeRobotImportError("path_template", f"info.json `{self.key}` must be a non-empty string",
                                     file=INFO_PATH)
        rest = _PLACEHOLDER.sub("", self.template)
        if "{" in rest or "}" in rest:
            raise LeRobotImportError("path_template", f"info.json `{self.key}` {self.template!r} has an unclosed "
                                     "or unmatched brace", file=INFO_PATH)
        for name, spec in _PLACEHOLDER.findall(self.template):
            if name not in self.allowed:
                raise LeRobotImportError("path_template", f"info.json `{self.key}` {self.template!r} names unknown "
                                         f"placeholder `{name}`; allowed: {', '.join(self.allowed)}", file=INFO_PATH)
            if spec and not _FORMAT_SPEC.match(spec):
                raise LeRobotImportError("path_template", f"info.json `{self.key}` {self.template!r} uses format "
                                         f"`{spec}` for `{name}`; only integer formats such as `03d` are allowed",
                                         file=INFO_PATH)
        check_relative_path(self.template, what=f"info.json `{self.key}`")

    def render(self, **values: Any) -> str:
        """The path relative to the dataset root; rejects results that would leave the root."""

        def sub(m: re.Match) -> str:
            name, spec = m.group(1), m.group(2)
            value = values[name]
            if name == "video_key":
                return str(value)
            value = int(value)
            if value < 0:
                raise LeRobotImportError("path_template", f"`{name}` is negative ({value})")
            return format(value, spec or "d")

        path = _PLACEHOLDER.sub(sub, self.template)
        check_relative_path(path, what=f"`{self.key}` rendered as {path!r}")
        return path


def check_relative_path(path: str, *, what: str) -> None:
    """A path inside the dataset root: no scheme, not absolute, no `..`, no backslashes."""
    if (_SCHEME.match(path) or path.startswith(("/", "\\", "~")) or "\\" in path or "\x00" in path
            or any(part in ("..", ".") for part in path.split("/")) or "//" in path):
        raise LeRobotImportError("path_template", f"{what} is not a plain path inside the dataset root "
                                 "(absolute paths, `..`, `.` and URL schemes are refused)", file=INFO_PATH)


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """The parts of info.json the import uses, validated."""

    codebase_version: str
    fps: Optional[float]
    features: tuple[Feature, ...]
    data_path: PathTemplate
    video_path: Optional[PathTemplate]
    sha256: str

    @property
    def frame_features(self) -> tuple[Feature, ...]:
        return tuple(f for f in self.features if f.kind != "video")

    @property
    def video_features(self) -> tuple[Feature, ...]:
        return tuple(f for f in self.features if f.kind == "video")

    @property
    def camera_keys(self) -> tuple[str, ...]:
        """Features a language `camera` may name: `observation.images.*` images and videos."""
        return tuple(f.name for f in self.features
                     if f.kind in ("video", "image") and f.name.startswith("observation.images."))

    def without_videos(self) -> "DatasetInfo":
        return dataclasses.replace(self, features=self.frame_features, video_path=None)

    def data_file(self, chunk_index: int, file_index: int) -> str:
        return self.data_path.render(chunk_index=chunk_index, file_index=file_index)

    def video_file(self, video_key: str, chunk_index: int, file_index: int) -> str:
        assert self.video_path is not None
        return self.video_path.render(video_key=video_key, chunk_index=chunk_index, file_index=file_index)


def parse_info(raw: bytes) -> DatasetInfo:
    """Parse and validate info.json bytes (mapping §1, §2, §6)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as ex:
        raise LeRobotImportError("info_json", f"meta/info.json is not UTF-8 ({ex.reason} at byte {ex.start})",
                                 file=INFO_PATH) from None
    except json.JSONDecodeError as ex:
        raise LeRobotImportError("info_json", f"meta/info.json is not JSON: {ex.msg} at line {ex.lineno} "
                                 f"column {ex.colno}", file=INFO_PATH) from None
    if not isinstance(doc, dict):
        raise LeRobotImportError("info_json", "meta/info.json must hold a JSON object", file=INFO_PATH)
    version = doc.get("codebase_version")
    if version != "v3.0":
        raise LeRobotImportError("codebase_version", f"the dataset is codebase version {version!r}; only v3.0 "
                                 "is read (convert older datasets with LeRobot's converter)", file=INFO_PATH)
    features = _parse_features(doc.get("features"))
    if "data_path" not in doc or doc["data_path"] is None:
        raise LeRobotImportError("missing_data_path", "info.json has no `data_path`", file=INFO_PATH)
    data_path = PathTemplate("data_path", doc["data_path"], ("chunk_index", "file_index"))
    video_path = None
    if any(f.kind == "video" for f in features):
        if not doc.get("video_path"):
            names = ", ".join(f.name for f in features if f.kind == "video")
            raise LeRobotImportError("missing_video_path", f"info.json declares video features ({names}) but no "
                                     "`video_path`", file=INFO_PATH)
        video_path = PathTemplate("video_path", doc["video_path"], ("video_key", "chunk_index", "file_index"))
    fps = doc.get("fps")
    return DatasetInfo(codebase_version=version, fps=float(fps) if isinstance(fps, (int, float)) else None,
                       features=features, data_path=data_path, video_path=video_path,
                       sha256=hashlib.sha256(raw).hexdigest())


def _parse_features(raw: Any) -> tuple[Feature, ...]:
    if not isinstance(raw, dict) or not raw:
        raise LeRobotImportError("bad_feature", "info.json `features` must be a non-empty object", file=INFO_PATH)
    out = []
    for name, spec in raw.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str):
            raise LeRobotImportError("bad_feature", f"feature `{name}` has no string `dtype`", file=INFO_PATH)
        if "/" in name or not name:
            raise LeRobotImportError("bad_feature", f"feature name {name!r} is empty or contains `/`", file=INFO_PATH)
        shape = spec.get("shape", [1])
        if shape is None:
            shape = [1]
        if (not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0
                                                   for d in shape)):
            raise LeRobotImportError("bad_feature", f"feature `{name}` has shape {shape!r}; a shape is a list of "
                                     "positive integers", file=INFO_PATH)
        info = spec.get("info") if isinstance(spec.get("info"), dict) else {}
        if "video_info" in spec and isinstance(spec["video_info"], dict):
            info = {**info, "video_info": spec["video_info"]}
        feature = Feature(name=name, dtype=spec["dtype"], shape=tuple(shape), names=spec.get("names"), info=info)
        kind = feature.kind
        if kind in ("bool", "string") and not feature.is_scalar:
            raise LeRobotImportError("scalar_shape", f"feature `{name}` ({kind}) has shape {list(shape)}; its dtype "
                                     "is mapped only as a scalar, shape [1]", file=INFO_PATH)
        if kind not in ("numeric", "bool", "string", "image", "video", "language"):
            raise LeRobotImportError("unknown_dtype", f"feature `{name}` has unknown dtype `{feature.dtype}`",
                                     file=INFO_PATH)
        if kind == "numeric" and feature.size > 1 << 24:
            raise LeRobotImportError("bad_feature", f"feature `{name}` declares {feature.size} values per frame",
                                     file=INFO_PATH)
        out.append(feature)
    return tuple(out)
