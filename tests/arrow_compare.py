"""Helpers for comparing Arrow data exactly: schemas by their serialized form, values as plain Python."""

from __future__ import annotations

import pyarrow as pa

from transforms.episode.spql_types import schema_signature  # noqa: F401  (re-exported for tests)


def plain(arr: pa.Array) -> pa.Array:
    """The same values without extension types, durations as int64 (so to_pylist keeps nanoseconds)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if isinstance(t, pa.BaseExtensionType):
        return plain(arr.storage)
    if pa.types.is_duration(t):
        return arr.cast(pa.int64())
    if pa.types.is_struct(t):
        children = [plain(arr.field(i)) for i in range(t.num_fields)]
        names = [t.field(i).name for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, names=names, mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        flat = arr.flatten() if not arr.null_count else None
        if flat is not None and arr.offset == 0 and arr.offsets[0].as_py() == 0:
            return type(arr).from_arrays(arr.offsets, plain(arr.values))
        return pa.array(arr.to_pylist(), _plain_type(t)) if not _has_duration(t) else pa.array(
            [None if v is None else plain(v.values).to_pylist() for v in arr], _plain_type(t))
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(plain(arr.flatten()), t.list_size,
                                                 mask=arr.is_null() if arr.null_count else None)
    return arr


def _has_duration(t: pa.DataType) -> bool:
    if isinstance(t, pa.BaseExtensionType):
        return _has_duration(t.storage_type)
    if pa.types.is_duration(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_duration(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_duration(t.value_type)
    return False


def _plain_type(t: pa.DataType) -> pa.DataType:
    if isinstance(t, pa.BaseExtensionType):
        return _plain_type(t.storage_type)
    if pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _plain_type(t.field(i).type), t.field(i).nullable)
                          for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _plain_type(t.value_type), t.value_field.nullable))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_plain_type(t.value_type), t.list_size)
    return t


def rows(table: pa.Table) -> list[dict]:
    """Every row as plain Python values (durations as int nanoseconds, extension types as storage)."""
    return pa.table({name: plain(table.column(name)) for name in table.column_names}).to_pylist()
