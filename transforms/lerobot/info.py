"""`meta/info.json` as a typed model: features in declared order and safe path templates.

Everything the import derives from info.json (the episode type, where files are, which cameras get
a MediaIndex) comes from this one model, so every rule about info.json lives here. Values that could
make the import allocate without bound (template widths, shapes, the number of features) are
limited to what real datasets use, with the limit named in the error.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import re
from typing import Any, Optional

from transforms.base.errors import LeRobotImportError, quote, shorten

NUMERIC_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                  "uint8", "uint16", "uint32", "uint64")
INDEXED_CODECS = ("h264", "hevc", "av1")
INFO_PATH = "meta/info.json"
META_EPISODES_DIR = "meta/episodes"
DEFAULT_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")

#: info.json is read whole: real ones are a few kilobytes (a few hundred with long `names` lists).
INFO_JSON_MAX_BYTES = 16 * 1024 * 1024
#: A path template is a short relative path (LeRobot's are under 80 characters).
TEMPLATE_MAX_CHARS = 1024
#: `{chunk_index:03d}` pads to 3 digits; a width above this is not a path, it is a request for memory.
TEMPLATE_MAX_WIDTH = 32
#: Features per dataset: real datasets declare tens; each one becomes a field of every frame.
MAX_FEATURES = 4096
#: A shape dimension must fit Arrow's 32-bit list sizes and the uint32 image width/height fields.
MAX_DIM = 2**31 - 1
#: Values per frame of one numeric feature (16 Mi: a 4096 x 4096 tensor).
MAX_FEATURE_VALUES = 1 << 24
#: The versions LeRobot's converter turns into v3.0, and how to call it.
CONVERTER = "python -m lerobot.datasets.v30.convert_dataset_v21_to_v30 --repo-id={repo_id}"
#: The codebase versions read: v3.0, and LeRobot's v2.x layout (one data file and one MP4 per episode,
#: episodes listed in meta/episodes.jsonl), read as it is (`transforms.lerobot.v2`).
V2_VERSIONS = ("v2.0", "v2.1")
READ_VERSIONS = V2_VERSIONS + ("v3.0",)
#: v2.x path templates place files by episode; v3.0 templates by chunk and file.
V2_DATA_PLACEHOLDERS = ("episode_chunk", "episode_index")
V2_VIDEO_PLACEHOLDERS = ("episode_chunk", "video_key", "episode_index")
#: LeRobot's `chunks_size` when info.json has none: episodes per chunk folder in v2.x.
DEFAULT_CHUNKS_SIZE = 1000


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
        """Dimension names: only when `names` names each dimension once (a list of strings, or a dict
        whose keys are)."""
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
        shown = quote(self.template)
        if len(self.template) > TEMPLATE_MAX_CHARS:
            raise LeRobotImportError("path_template", f"info.json `{self.key}` {shown} is {len(self.template):,} "
                                     f"characters long; a path template has at most {TEMPLATE_MAX_CHARS}",
                                     file=INFO_PATH)
        rest = _PLACEHOLDER.sub("", self.template)
        if "{" in rest or "}" in rest:
            raise LeRobotImportError("path_template", f"info.json `{self.key}` {shown} has an unclosed "
                                     "or unmatched brace", file=INFO_PATH)
        for name, spec in _PLACEHOLDER.findall(self.template):
            if name not in self.allowed:
                raise LeRobotImportError("path_template", f"info.json `{self.key}` {shown} names unknown "
                                         f"placeholder `{shorten(name, 40)}`; allowed: {', '.join(self.allowed)}"
                                         + self._version_hint(name), file=INFO_PATH)
            if spec and not _FORMAT_SPEC.match(spec):
                raise LeRobotImportError("path_template", f"info.json `{self.key}` {shown} uses format "
                                         f"`{shorten(spec, 40)}` for `{name}`; only integer formats such as "
                                         "`03d` are allowed", file=INFO_PATH)
            digits = spec[:-1].lstrip("0")
            if len(digits) > 3 or int(digits or 0) > TEMPLATE_MAX_WIDTH:
                width = digits if len(digits) <= 12 else f"a {len(digits):,}-digit number of"
                raise LeRobotImportError("path_template", f"info.json `{self.key}` {shown} pads `{name}` to {width} "
                                         f"digits; at most {TEMPLATE_MAX_WIDTH} are allowed (LeRobot writes `03d`)",
                                         file=INFO_PATH)
        check_relative_path(self.template, what=f"info.json `{self.key}`")

    def _version_hint(self, name: str) -> str:
        """For a v3.0 template naming v2.x's `episode_chunk`/`episode_index`: both ways to an import."""
        if name not in ("episode_chunk", "episode_index") or "chunk_index" not in self.allowed:
            return ""
        v3 = ("data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet" if self.key == "data_path" else
              "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4")
        return (f". `{name}` is v2.x's: if the files are v3.0 (a data file per chunk and file, listed in "
                f"meta/episodes/), set `{self.key}` to {json.dumps(v3)}; if they are v2.x (one data file and one MP4 "
                "per episode, listed in meta/episodes.jsonl), set codebase_version to \"v2.1\"")

    def render(self, **values: Any) -> str:
        """The path relative to the dataset root; rejects results that would leave the root."""
        fmt = _python_format(self.template)
        if fmt is not None and all(type(v) is int and v >= 0 for k, v in values.items() if k != "video_key") \
                and isinstance(values.get("video_key", ""), str):
            # the usual template and values: str.format renders what `sub` below does, without a regex per path
            # (a v2.x dataset renders three paths per episode, hundreds of thousands of times)
            path = fmt.format(**values)
            if _plain_path(path):
                return path
            check_relative_path(path, what=f"`{self.key}` rendered as {quote(path)}")

        return self._render_slow(values)

    def render_many(self, start: int, end: int, chunks_size: int, video_key: Optional[str] = None) -> list[str]:
        """`render(episode_chunk=e // chunks_size, episode_index=e[, video_key=...])` of the episodes e in
        start..end-1, in that order: one path per episode of a v2.x dataset, rendered by the hundred thousand."""
        fmt = _python_format(self.template)
        keys = {} if video_key is None else {"video_key": video_key}
        if fmt is None or start < 0 or (video_key is not None and not isinstance(video_key, str)):
            return [self.render(episode_chunk=e // chunks_size, episode_index=e, **keys) for e in range(start, end)]
        found = [fmt.format(episode_chunk=e // chunks_size, episode_index=e, **keys) for e in range(start, end)]
        for path in found:
            if not _plain_path(path):
                check_relative_path(path, what=f"`{self.key}` rendered as {quote(path)}")
        return found

    def _render_slow(self, values: dict) -> str:
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
        check_relative_path(path, what=f"`{self.key}` rendered as {quote(path)}")
        return path


@functools.lru_cache(maxsize=64)
def _python_format(template: str) -> Optional[str]:
    """The template as a `str.format` string that renders what `PathTemplate.render` does, or None when its
    placeholders are not all of the plain kinds (`{name}`, `{name:03d}` of an integer, `{video_key}`)."""
    for name, spec in _PLACEHOLDER.findall(template):
        if not name.isidentifier() or (spec and (name == "video_key" or not _FORMAT_SPEC.match(spec))):
            return None
    return template


def _plain_path(path: str) -> bool:
    return not (_SCHEME.match(path) or path.startswith(("/", "\\", "~")) or "\\" in path or "\x00" in path
                or any(part in ("..", ".") for part in path.split("/")) or "//" in path)


def check_relative_path(path: str, *, what: str) -> None:
    """A path inside the dataset root: no scheme, not absolute, no `..`, no backslashes."""
    if not _plain_path(path):
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
    chunks_size: int = DEFAULT_CHUNKS_SIZE  # v2.x: episodes per chunk folder (`episode_chunk`)

    @property
    def is_v2(self) -> bool:
        """A v2.x dataset: one data file and one MP4 per episode, listed in meta/episodes.jsonl."""
        return self.codebase_version in V2_VERSIONS

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

    def data_file(self, chunk_index: int, file_index: int) -> str:
        return self.data_path.render(chunk_index=chunk_index, file_index=file_index)

    def video_file(self, video_key: str, chunk_index: int, file_index: int) -> str:
        assert self.video_path is not None
        return self.video_path.render(video_key=video_key, chunk_index=chunk_index, file_index=file_index)


def parse_info(raw: bytes, *, repo_id: Optional[str] = None, skip_videos: bool = False) -> DatasetInfo:
    """Parse and validate info.json bytes, in the order a person would look: a JSON object, its
    codebase version, its features, its path templates.

    Args:
        raw: the bytes of meta/info.json.
        repo_id: the dataset's Hugging Face repo id when known, to name in the converter's command.
        skip_videos: leave the video features out (`--skip-videos`): `video_path` is then not read at all,
            so a dataset whose video template is wrong or missing imports without its cameras.
    Returns:
        The validated DatasetInfo. Raises LeRobotImportError naming the rule broken."""
    doc = _json_object(raw)
    version = check_codebase_version(doc.get("codebase_version"), repo_id=repo_id)
    v2 = version in V2_VERSIONS
    features = _parse_features(doc.get("features"))
    if skip_videos:
        features = tuple(f for f in features if f.kind != "video")
    if "data_path" not in doc or doc["data_path"] is None:
        raise LeRobotImportError("missing_data_path", "info.json has no `data_path`", file=INFO_PATH)
    if v2:
        _check_v2_templates(doc, version, keys=("data_path",) if skip_videos else ("data_path", "video_path"))
    data_path = PathTemplate("data_path", doc["data_path"],
                             V2_DATA_PLACEHOLDERS if v2 else ("chunk_index", "file_index"))
    video_path = None
    if any(f.kind == "video" for f in features):
        if not doc.get("video_path"):
            names = ", ".join(f.name for f in features if f.kind == "video")
            raise LeRobotImportError("missing_video_path", f"info.json declares video features ({names}) but no "
                                     "`video_path`", file=INFO_PATH)
        video_path = PathTemplate("video_path", doc["video_path"],
                                  V2_VIDEO_PLACEHOLDERS if v2 else ("video_key", "chunk_index", "file_index"))
    fps = doc.get("fps")
    fps = float(fps) if isinstance(fps, (int, float)) and not isinstance(fps, bool) else None
    fps = fps if fps is not None and math.isfinite(fps) else None
    chunks_size = _chunks_size(doc.get("chunks_size")) if v2 else DEFAULT_CHUNKS_SIZE
    if v2 and video_path is not None and (fps is None or fps <= 0):
        # a v2.x clip ends at length / fps: without a frame rate it has no end
        raise LeRobotImportError("info_json", f"info.json has no positive `fps` ({quote(doc.get('fps'), 40)}); a "
                                 f"{version} dataset's clips end at length / fps, so its videos need one",
                                 file=INFO_PATH)
    return DatasetInfo(codebase_version=version, fps=fps, features=features, data_path=data_path,
                       video_path=video_path, sha256=hashlib.sha256(raw).hexdigest(), chunks_size=chunks_size)


def _check_v2_templates(doc: dict, version: str, keys: tuple[str, ...]) -> None:
    """A v2.x info.json whose templates place files by chunk and file (v3.0's `{chunk_index}` and
    `{file_index}`) describes v3.0 files: the version is what is wrong, not the template."""
    for key in keys:
        template = doc.get(key)
        if isinstance(template, str) and ("{chunk_index" in template or "{file_index" in template):
            raise LeRobotImportError("codebase_version", f"info.json says {version}, but its `{key}` "
                                     f"{quote(shorten(template, 200))} places files by `chunk_index` and "
                                     "`file_index`, as v3.0 does (v2.x places them by `episode_chunk` and "
                                     "`episode_index`): if the files are v3.0, set codebase_version to \"v3.0\"",
                                     file=INFO_PATH)


def _chunks_size(value: Any) -> int:
    """v2.x `chunks_size` (episodes per chunk folder), LeRobot's 1000 when absent."""
    if value is None:
        return DEFAULT_CHUNKS_SIZE
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIM:
        raise LeRobotImportError("info_json", f"info.json `chunks_size` is {quote(value, 40)}; it is the number of "
                                 "episodes per chunk folder, a positive integer (LeRobot writes 1000)", file=INFO_PATH)
    return value


def _json_object(raw: bytes) -> dict:
    """info.json as a dict. Hostile JSON (nested thousands of levels deep, numbers of thousands of digits,
    more than memory holds) is the `info_json` rule like any other JSON that is not a dataset's info."""
    if len(raw) > INFO_JSON_MAX_BYTES:
        raise LeRobotImportError("limit", f"meta/info.json is {len(raw):,} bytes; an info.json has at most "
                                 f"{INFO_JSON_MAX_BYTES:,} (real ones have a few kilobytes)", file=INFO_PATH)
    if not raw.strip():  # "not JSON" would send the user looking for a syntax error in a file with nothing in it
        raise LeRobotImportError("info_json", f"meta/info.json is empty ({len(raw)} bytes): a copy or download that "
                                 "did not finish, or a recording that stopped before writing it; restore it from the "
                                 "dataset's source", file=INFO_PATH)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as ex:
        raise LeRobotImportError("info_json", f"meta/info.json is not UTF-8 ({ex.reason} at byte {ex.start})",
                                 file=INFO_PATH) from None
    except json.JSONDecodeError as ex:
        raise LeRobotImportError("info_json", f"meta/info.json is not JSON: {ex.msg} at line {ex.lineno} "
                                 f"column {ex.colno}", file=INFO_PATH) from None
    except RecursionError:
        raise LeRobotImportError("info_json", "meta/info.json nests arrays or objects too deeply to be read "
                                 "(about a thousand levels); a dataset's info.json nests a few",
                                 file=INFO_PATH) from None
    except ValueError:  # Python refuses integers of more than 4,300 digits
        raise LeRobotImportError("info_json", "meta/info.json holds an integer of more than 4,300 digits, which "
                                 "is not read; a dataset's info.json holds counts, sizes and fps",
                                 file=INFO_PATH) from None
    except MemoryError:
        raise LeRobotImportError("info_json", f"meta/info.json ({len(raw):,} bytes) does not fit in memory once "
                                 "parsed", file=INFO_PATH) from None
    if not isinstance(doc, dict):
        raise LeRobotImportError("info_json", "meta/info.json must hold a JSON object", file=INFO_PATH)
    return doc


def check_codebase_version(version: Any, *, repo_id: Optional[str] = None) -> str:
    """The dataset's `codebase_version`, if it is one this importer reads (v2.0, v2.1, v3.0); otherwise the
    error says which version the dataset is and how to get a v3.0 copy of it."""
    if version in READ_VERSIONS:
        return version
    if version is None:
        raise LeRobotImportError("codebase_version", "meta/info.json has no `codebase_version`; LeRobot writes it "
                                 "in every dataset (\"v3.0\" for the datasets this importer reads): is this a "
                                 "LeRobot dataset's info.json?", file=INFO_PATH)
    shown = shorten(version, 40) if isinstance(version, str) else quote(version, 40)
    raise LeRobotImportError("codebase_version", f"the dataset is codebase version {shown}; v2.0, v2.1 and v3.0 are "
                             "read (convert older datasets with LeRobot's converters)", file=INFO_PATH)


def _parse_features(raw: Any) -> tuple[Feature, ...]:
    if not isinstance(raw, dict) or not raw:
        raise LeRobotImportError("bad_feature", "info.json `features` must be a non-empty object", file=INFO_PATH)
    if len(raw) > MAX_FEATURES:
        raise LeRobotImportError("limit", f"info.json declares {len(raw):,} features; at most {MAX_FEATURES:,} "
                                 "are read (each becomes a field of every frame)", file=INFO_PATH)
    return tuple(_parse_feature(name, spec) for name, spec in raw.items())


def _parse_feature(name: str, spec: Any) -> Feature:
    shown = shorten(name, 120)
    if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str):
        raise LeRobotImportError("bad_feature", f"feature `{shown}` has no string `dtype`", file=INFO_PATH)
    if "/" in name or not name:
        raise LeRobotImportError("bad_feature", f"feature name {quote(name, 120)} is empty or contains `/`",
                                 file=INFO_PATH)
    shape = spec.get("shape", [1])
    if shape is None:
        shape = [1]
    if (not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
        raise LeRobotImportError("bad_feature", f"feature `{shown}` has shape {quote(shape, 80)}; a shape is a "
                                 "list of positive integers", file=INFO_PATH)
    if len(shape) > 32 or any(d > MAX_DIM for d in shape):
        raise LeRobotImportError("bad_feature", f"feature `{shown}` has shape {quote(shape, 80)}; a shape has at "
                                 f"most 32 dimensions of at most {MAX_DIM:,} each", file=INFO_PATH)
    info = spec.get("info") if isinstance(spec.get("info"), dict) else {}
    if "video_info" in spec and isinstance(spec["video_info"], dict):
        info = {**info, "video_info": spec["video_info"]}
    feature = Feature(name=name, dtype=spec["dtype"], shape=tuple(shape), names=spec.get("names"), info=info)
    kind = feature.kind
    if kind in ("bool", "string") and not feature.is_scalar:
        raise LeRobotImportError("scalar_shape", f"feature `{shown}` ({kind}) has shape {list(shape)}; its dtype "
                                 "is mapped only as a scalar, shape [1]", file=INFO_PATH)
    if kind not in ("numeric", "bool", "string", "image", "video", "language"):
        raise LeRobotImportError("unknown_dtype", f"feature `{shown}` has unknown dtype "
                                 f"`{shorten(feature.dtype, 60)}`", file=INFO_PATH)
    if kind == "numeric" and feature.size > MAX_FEATURE_VALUES:
        raise LeRobotImportError("bad_feature", f"feature `{shown}` declares {feature.size:,} values per frame; at "
                                 f"most {MAX_FEATURE_VALUES:,} are read", file=INFO_PATH)
    return feature
