"""The `spql.*` Arrow extension types an imported episode uses.

Each type is a pyarrow extension type whose extension name is its id and whose serialized
metadata is the compact, key-sorted JSON of its bridges (and parameters), with the storage that
`spiral/types.py` of spiral-sdk 0.16.56 defines. Registering them lets Parquet and IPC round-trip
the types. spiral-sdk registers the same names; `register()` tolerates that by leaving whatever
is registered in place: the serialized form (name, metadata, storage) is what matters, and both
implementations agree on it.
"""

from __future__ import annotations

import functools
import json
from typing import ClassVar

import pyarrow as pa


def _meta(order: str, eq: str, **params: str) -> bytes:
    return json.dumps({"order": order, "eq": eq, **params}, sort_keys=True, separators=(",", ":")).encode()


class SpqlExtensionType(pa.ExtensionType):
    """An spql type: fixed storage, metadata = its bridges as compact sorted JSON.

    Types are immutable, so each class has one shared instance (`instance()`): pyarrow deserializes
    a type for every array it reads or writes, and rebuilding the nested storage each time was a
    measurable share of an import."""

    type_id: ClassVar[str]
    bridges: ClassVar[tuple[str, str]] = ("none", "identity")  # (order, eq)
    _shared: ClassVar[dict] = {}

    def __init__(self) -> None:
        pa.ExtensionType.__init__(self, self._cached_storage(), self.type_id)

    @classmethod
    def storage(cls) -> pa.DataType:
        raise NotImplementedError

    @classmethod
    def _cached_storage(cls) -> pa.DataType:
        key = ("storage", cls)
        if key not in SpqlExtensionType._shared:
            SpqlExtensionType._shared[key] = cls.storage()
        return SpqlExtensionType._shared[key]

    @classmethod
    def instance(cls) -> "SpqlExtensionType":
        key = ("instance", cls)
        if key not in SpqlExtensionType._shared:
            SpqlExtensionType._shared[key] = cls()
        return SpqlExtensionType._shared[key]

    def __arrow_ext_serialize__(self) -> bytes:
        return self._serialized()

    @classmethod
    def _serialized(cls) -> bytes:
        key = ("meta", cls)
        if key not in SpqlExtensionType._shared:
            SpqlExtensionType._shared[key] = cls._metadata()
        return SpqlExtensionType._shared[key]

    @classmethod
    def _metadata(cls) -> bytes:
        return _meta(*cls.bridges)

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> "SpqlExtensionType":
        return cls.instance()

    def __reduce__(self):
        return type(self), ()


def _f(name: str, type_: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


def _list(item: pa.DataType) -> pa.DataType:
    return pa.list_(pa.field("item", item, nullable=False))


class BlobType(SpqlExtensionType):
    type_id = "spql.Blob"

    @classmethod
    def storage(cls) -> pa.DataType:
        return pa.struct([
            _f("bytes", pa.binary()), _f("uri", pa.utf8()), _f("offset", pa.uint64()), _f("size", pa.uint64()),
            _f("mime_type", pa.utf8()), _f("version", pa.utf8()), _f("etag", pa.utf8()), _f("digest", pa.binary()),
        ])


class EncodedImageType(SpqlExtensionType):
    type_id = "spql.EncodedImage"

    @classmethod
    def storage(cls) -> pa.DataType:
        return pa.struct([
            _f("source", BlobType.instance()), _f("format", pa.utf8()), _f("mime_type", pa.utf8()),
            _f("width", pa.uint32()), _f("height", pa.uint32()),
        ])


@functools.lru_cache(maxsize=None)
def media_track_type() -> pa.StructType:
    """`spql.media.index.MediaTrack`: a plain struct, one per indexed video track."""
    u32, i64 = pa.uint32(), pa.int64()
    dts_run = pa.struct([_f("count", u32, False), _f("delta", u32, False)])
    edit = pa.struct([_f("duration", i64, False), _f("media_time", i64, False), _f("rate", pa.int32(), False)])
    chunk = pa.struct([_f("first_sample", u32, False), _f("offset", pa.uint64(), False)])
    gop = pa.struct([
        _f("decode_start", u32, False), _f("frame_start", u32, False), _f("pts_start", i64, False),
        _f("byte_offset", pa.uint64(), False), _f("byte_length", pa.uint64(), False), _f("sample_count", u32, False),
    ])
    return pa.struct([
        _f("track_id", u32, False), _f("kind", pa.utf8(), False), _f("codec", pa.utf8(), False),
        _f("language", pa.utf8()), _f("width", u32), _f("height", u32),
        _f("timescale", u32, False), _f("movie_timescale", u32, False), _f("duration_ticks", i64, False),
        _f("sample_entry", pa.binary(), False),
        _f("dts_runs", _list(dts_run), False), _f("edit_list", _list(edit), True),
        _f("chunks", _list(chunk), False), _f("gops", _list(gop), False),
        _f("sizes", _list(u32), False), _f("ctts", _list(pa.int32()), True), _f("flags", _list(pa.uint8()), False),
    ])


class MediaIndexType(SpqlExtensionType):
    type_id = "spql.MediaIndex"

    @classmethod
    def storage(cls) -> pa.DataType:
        return pa.struct([_f("primary_track_id", pa.uint32(), False), _f("tracks", _list(media_track_type()), False)])


class EncodedMediaType(SpqlExtensionType):
    type_id = "spql.EncodedMedia"

    @classmethod
    def storage(cls) -> pa.DataType:
        return pa.struct([_f("source", BlobType.instance()), _f("container", pa.utf8()),
                          _f("index", MediaIndexType.instance())])


class DurationType(SpqlExtensionType):
    """`spql.Duration` in nanoseconds; Arrow storage duration("ns")."""

    type_id = "spql.Duration"
    bridges = ("storage", "storage")

    @classmethod
    def storage(cls) -> pa.DataType:
        return pa.duration("ns")

    @classmethod
    def _metadata(cls) -> bytes:
        return _meta(*cls.bridges, unit="ns")


class ClipRefType(SpqlExtensionType):
    type_id = "spql.ClipRef"

    @classmethod
    def storage(cls) -> pa.DataType:
        return pa.struct([
            _f("media", EncodedMediaType.instance()), _f("stream_indices", _list(pa.int32())),
            # The reference writes start/end as spql.Duration, not the plain duration("ns") of
            # spiral/types.py: where the two disagree, the reference's output is what we match.
            _f("start", DurationType.instance()), _f("end", DurationType.instance()),
        ])


ALL_TYPES: tuple[type[SpqlExtensionType], ...] = (
    BlobType, EncodedImageType, MediaIndexType, EncodedMediaType, DurationType, ClipRefType,
)


def register() -> None:
    """Register every spql type with pyarrow once; keep a registration made by spiral-sdk."""
    for cls in ALL_TYPES:
        try:
            pa.register_extension_type(cls.instance())
        except pa.ArrowKeyError:
            pass  # already registered (by us, or by spiral.types under the same name)


register()


def blob() -> pa.DataType:
    return BlobType.instance()


def encoded_image() -> pa.DataType:
    return EncodedImageType.instance()


def media_index() -> pa.DataType:
    return MediaIndexType.instance()


def encoded_media() -> pa.DataType:
    return EncodedMediaType.instance()


def clip_ref() -> pa.DataType:
    return ClipRefType.instance()


def duration() -> pa.DataType:
    return DurationType.instance()


def storage_of(array: pa.Array) -> pa.Array:
    """The storage of an extension array (a spql.* value is a struct underneath); other arrays as they are."""
    return array.storage if isinstance(array, pa.ExtensionArray) else array


def null_media_index(n: int) -> pa.Array:
    """`n` null MediaIndex values whose non-nullable children hold valid placeholders (Parquet refuses
    nulls in a non-nullable child even under a null parent)."""
    storage_type = MediaIndexType.storage()
    track_list = storage_type.field("tracks").type
    import numpy as np
    children = [pa.array(np.zeros(n, np.uint32)),
                pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], track_list.value_type),
                                         type=track_list)]
    storage = pa.StructArray.from_arrays(children, fields=list(storage_type), mask=pa.array(np.ones(n, bool)))
    return pa.ExtensionArray.from_storage(MediaIndexType.instance(), storage)


def type_signature(t: pa.DataType) -> str:
    """A canonical text form of a type: extension names, their metadata and storage, field names,
    nullability and field metadata. Two types with equal signatures serialize identically, whichever
    Python class (ours or spiral-sdk's) implements an extension name in this process."""
    if isinstance(t, pa.BaseExtensionType):
        if hasattr(t, "__arrow_ext_serialize__"):
            meta = t.__arrow_ext_serialize__().decode()
        elif isinstance(t, pa.FixedShapeTensorType):  # canonical types implemented in C++
            meta = json.dumps({a: getattr(t, a) for a in ("shape", "dim_names", "permutation")}, sort_keys=True)
        else:  # other canonical types (arrow.json, arrow.uuid, ...) carry no parameters worth comparing
            meta = ""
        return f"ext<{t.extension_name}|{meta}|{type_signature(t.storage_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ", ".join(field_signature(t.field(i)) for i in range(t.num_fields)) + ">"
    if pa.types.is_fixed_size_list(t):
        return f"fixed_size_list[{t.list_size}]<{field_signature(t.value_field)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"{str(t).split('<')[0]}<{field_signature(t.value_field)}>"
    return str(t)


def field_signature(f: pa.Field) -> str:
    meta = "" if not f.metadata else " " + json.dumps({k.decode(): v.decode() for k, v in f.metadata.items()},
                                                       sort_keys=True)
    return f"{f.name}: {type_signature(f.type)}{'' if f.nullable else ' not null'}{meta}"


def schema_signature(schema: pa.Schema) -> list[str]:
    return [field_signature(f) for f in schema]


def array_to_ipc(array: pa.Array) -> bytes:
    """An Arrow array (of any type, spql ones included) as Arrow IPC stream bytes, for `array_from_ipc`."""
    batch = pa.record_batch([array], names=["value"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def array_from_ipc(data: bytes) -> pa.Array:
    """The array `array_to_ipc` wrote (its buffers zero-copy views of `data`)."""
    batch = pa.ipc.open_stream(pa.py_buffer(data)).read_next_batch()
    return batch.column(0)
