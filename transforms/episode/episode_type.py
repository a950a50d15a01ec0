"""DatasetInfo -> the Arrow type of one imported episode.

The type depends on info.json alone, so every dataset with the same features imports with the
same episode type.
"""

from __future__ import annotations

import json

import pyarrow as pa

from transforms.language import columns
from transforms.lerobot import depth
from transforms.episode import spql_types
from transforms.lerobot.info import DatasetInfo, Feature
from transforms.base.errors import LeRobotImportError

TENSOR_METADATA_KEY = b"spiraldb:tensor:metadata"

_ARROW_NUMERIC = {
    "float16": pa.float16(), "float32": pa.float32(), "float64": pa.float64(),
    "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(),
}


def numeric_type(dtype: str) -> pa.DataType:
    return _ARROW_NUMERIC[dtype]


def tensor_type(feature: Feature) -> pa.DataType:
    return pa.fixed_shape_tensor(numeric_type(feature.dtype), list(feature.shape), dim_names=feature.dim_names)


def tensor_metadata(feature: Feature) -> dict[bytes, bytes]:
    meta: dict = {"shape": list(feature.shape)}
    if feature.dim_names is not None:
        meta["dim_names"] = feature.dim_names
    return {TENSOR_METADATA_KEY: json.dumps(meta, separators=(",", ":")).encode()}


def frame_field(feature: Feature) -> pa.Field:
    """The frame field of a non-video feature (all frame fields are nullable)."""
    kind = feature.kind
    if kind == "numeric":
        if feature.is_scalar:
            return pa.field(feature.name, numeric_type(feature.dtype))
        return pa.field(feature.name, tensor_type(feature), metadata=tensor_metadata(feature))
    if kind == "bool":
        return pa.field(feature.name, pa.bool_())
    if kind == "string":
        return pa.field(feature.name, pa.utf8())
    if kind == "image":
        return pa.field(feature.name, spql_types.encoded_image())
    if kind == "language":
        if feature.name == "language_persistent":
            return pa.field(feature.name, columns.persistent_type())
        if feature.name == "language_events":
            return pa.field(feature.name, columns.events_type())
        raise LeRobotImportError("unknown_dtype", f"feature `{feature.name}` has dtype `language`, which only "
                                 "`language_persistent` and `language_events` may have", file="meta/info.json")
    raise LeRobotImportError("unknown_dtype", f"feature `{feature.name}` has unknown dtype `{feature.dtype}`",
                             file="meta/info.json")


def frame_type(info: DatasetInfo) -> pa.StructType:
    return pa.struct([frame_field(f) for f in info.frame_features])


def video_entry_type() -> pa.StructType:
    return pa.struct([pa.field("clip", spql_types.clip_ref()),
                      pa.field("time_origin", spql_types.duration(), nullable=False)])


def videos_type(info: DatasetInfo) -> pa.StructType:
    return pa.struct([pa.field(f.name, video_entry_type(), nullable=False) for f in info.video_features])


def depth_specs(info: DatasetInfo) -> dict[str, depth.DepthSpec]:
    """The dataset's depth cameras (video or image features whose info says `is_depth_map`), by name."""
    found = {f.name: depth.depth_spec(f.dtype, f.info) for f in info.features}
    return {name: spec for name, spec in found.items() if spec is not None}


def episode_schema(info: DatasetInfo) -> pa.Schema:
    """The episode type. A depth camera is typed as any camera (its clip, or its encoded image), as the
    reference types it; what a reader needs to turn its pixels into depth (unit, quantization, pixel format)
    is in the schema's metadata (`depth.DEPTH_METADATA_KEY`), which the schema's fields and the reference's
    equality leave alone, and which only a dataset with depth cameras has."""
    fields = [
        pa.field("episode_index", pa.int64(), nullable=False),
        pa.field("tasks", pa.list_(pa.field("item", pa.utf8(), nullable=False)), nullable=False),
        pa.field("length", pa.int64(), nullable=False),
        pa.field("frames", pa.list_(pa.field("item", frame_type(info), nullable=False)), nullable=False),
    ]
    if info.video_features:
        fields.append(pa.field("videos", videos_type(info), nullable=False))
    return pa.schema(fields, metadata=depth.specs_to_metadata(depth_specs(info)) or None)
