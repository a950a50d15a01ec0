"""Querying an import with pyarrow, DuckDB or Polars, without losing its types (Beam-free).

An import's Parquet parts carry Arrow extension types: tensors are `arrow.fixed_shape_tensor` (a flat
fixed-size list plus its shape), clip times and `time_origin` are `spql.Duration` (int64 nanoseconds),
clips are `spql.ClipRef` structs. pyarrow keeps them once they are registered (importing this module, or
`transforms.episode`, registers the `spql.*` types). Other engines drop what they do not know: DuckDB reads
a [2, 3] tensor as a flat `FLOAT[]` of 6 and a duration as a `BIGINT`; Polars keeps the extension types
but refuses arithmetic and casts on them. This module gives each engine what it understands, reading
the same files and leaving the output format as it is:

* `read_episodes(OUT)`: the episodes as pyarrow (extension types registered and kept).
* `plain(table)`: the same data with engine-neutral types: each tensor a nested fixed-size list of its
  shape (zero-copy), each `spql.Duration` a `duration[ns]`, every other `spql.*` value its struct.
* `polars_episodes(OUT)`: a Polars DataFrame of `plain` types: tensors `pl.Array(dtype, shape)`,
  durations `pl.Duration("ns")`.
* `duckdb_views(con, OUT)`: three views over the parts, read lazily by DuckDB itself: `episodes`
  (episode_index, tasks, length), `frames` (one row per frame, each tensor a fixed-size `T[n]...` array of
  its shape) and `clips` (one row per episode and camera: uri, size, start, end and time_origin as
  INTERVALs and as seconds, `*_s`). A clip's file time is its episode time minus `time_origin`.

DuckDB and Polars are optional (the test extra installs both); only the function that needs one imports it.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.base import storage
from transforms.episode import spql_types  # noqa: F401 - registers the spql.* extension types with pyarrow

#: DuckDB's names of the value types a tensor feature can have.
_DUCKDB_TYPES = {pa.float16(): "FLOAT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.int8(): "TINYINT",
                 pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT", pa.uint8(): "UTINYINT",
                 pa.uint16(): "USMALLINT", pa.uint32(): "UINTEGER", pa.uint64(): "UBIGINT",
                 pa.bool_(): "BOOLEAN"}
DURATION = "spql.Duration"
#: A view prefix is a plain SQL name's start (letters, digits, `_`; at most 64): it is joined to the view names.
_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def part_files(output: str) -> list[str]:
    """The episode parts of the import at `output` (either layout, as its manifest lists them), as paths for
    local outputs and URLs otherwise."""
    from transforms.reader import ImportReader

    out = []
    for uri in ImportReader(output).parts:
        fs, path = storage.filesystem(uri)
        out.append(path if storage.is_local(fs) else uri)
    return out


def read_episodes(output: str, columns: Optional[Sequence[str]] = None) -> pa.Table:
    """Every episode of the import at `output` as one pyarrow table, the `spql.*` types kept.

    Args:
        output: the import's output root (any fsspec URL).
        columns: top-level columns to read (default: all).
    """
    tables = []
    for uri in _parts(output):
        fs, path = storage.filesystem(uri)
        tables.append(pq.read_table(path, filesystem=fs, columns=list(columns) if columns else None))
    return pa.concat_tables(tables)


def plain_type(t: pa.DataType) -> pa.DataType:
    """`t` with every extension type replaced by what engines without it understand (see `plain`)."""
    if isinstance(t, pa.FixedShapeTensorType) and _row_major(t):
        out = t.value_type
        for size in reversed(t.shape):
            out = pa.list_(out, size)
        return out
    if isinstance(t, pa.BaseExtensionType):
        return pa.duration("ns") if t.extension_name == DURATION else plain_type(t.storage_type)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(plain_type(f.type)) for f in t])
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(plain_type(t.value_type)), t.list_size)
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(plain_type(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(plain_type(t.value_type)))
    return t


def plain(data: Any) -> Any:
    """A table, chunked array or array with engine-neutral types and the same values: each tensor a nested
    fixed-size list of its shape (outermost first; the values are not copied), each `spql.Duration` a
    `duration[ns]`, each other `spql.*` value its storage struct."""
    if isinstance(data, pa.Table):
        return pa.Table.from_arrays([plain(c) for c in data.columns],
                                    schema=pa.schema([f.with_type(plain_type(f.type)) for f in data.schema],
                                                     metadata=data.schema.metadata))
    if isinstance(data, pa.ChunkedArray):
        return pa.chunked_array([plain(c) for c in data.chunks], type=plain_type(data.type))
    return _plain_array(data)


def _row_major(t: pa.FixedShapeTensorType) -> bool:
    return not t.permutation or list(t.permutation) == list(range(len(t.shape)))


def _mask(arr: pa.Array) -> Optional[pa.Array]:
    return arr.is_null() if arr.null_count else None


def _plain_array(arr: pa.Array) -> pa.Array:
    t = arr.type
    if isinstance(t, pa.FixedShapeTensorType) and _row_major(t):
        flat = arr.storage
        size = flat.type.list_size
        out = flat.values.slice(flat.offset * size, len(flat) * size)
        for i, dim in enumerate(reversed(t.shape)):
            outermost = i == len(t.shape) - 1
            out = pa.FixedSizeListArray.from_arrays(out, dim, mask=_mask(flat) if outermost else None)
        return out
    if isinstance(t, pa.BaseExtensionType):
        return _plain_array(arr.storage)
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([_plain_array(arr.field(i)) for i in range(t.num_fields)],
                                          fields=[f.with_type(plain_type(f.type)) for f in t], mask=_mask(arr))
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        values = arr.values.slice(arr.offset * size, len(arr) * size)
        return pa.FixedSizeListArray.from_arrays(_plain_array(values), type=plain_type(t), mask=_mask(arr))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        return cls.from_arrays(arr.offsets, _plain_array(arr.values), type=plain_type(t), mask=_mask(arr))
    return arr


def polars_episodes(output: str, columns: Optional[Sequence[str]] = None):
    """The episodes of the import at `output` as a Polars DataFrame whose tensors are `pl.Array(dtype,
    shape)` and whose clip times are `pl.Duration("ns")` (`plain` types), so `mean`, `cast`,
    `struct.field` and `dt` work at every nesting level.

    Args:
        output: the import's output root (any fsspec URL).
        columns: top-level columns to read (default: all).
    """
    import polars as pl

    return pl.from_arrow(plain(read_episodes(output, columns)))


def duckdb_views(con, output: str, *, prefix: str = "") -> list[str]:
    """Create the views `episodes`, `frames` and `clips` over the import at `output` in DuckDB connection
    `con` (DuckDB reads the parts itself, lazily); returns their names.

    * `{prefix}episodes`: episode_index, tasks, length.
    * `{prefix}frames`: episode_index, then each frame feature: tensors as fixed-size arrays of their shape
      (a [2, 3] float32 tensor is `FLOAT[3][2]`, `x[i][j]` its element i, j), other features as stored.
    * `{prefix}clips`: episode_index, camera, uri, size, start, end, time_origin (INTERVALs, microsecond
      precision) and start_s, end_s, time_origin_s (seconds, DOUBLE). File time = episode time - time_origin.

    Args:
        con: a `duckdb.DuckDBPyConnection`.
        output: the import's output root: a local path or file:// URL (DuckDB reads other URLs through its
            httpfs extension).
        prefix: prepended to each view's name.
    """
    if not isinstance(prefix, str) or (prefix and not _PREFIX.fullmatch(prefix)):
        from transforms.reader import ReaderError
        raise ReaderError(f"the view prefix {prefix!r} is not the start of a plain SQL name (letters, digits and "
                          "`_`, not starting with a digit, at most 64): the views are named `<prefix>episodes`, "
                          "`<prefix>frames` and `<prefix>clips`")
    files = _parts(output)
    schema = _schema(files[0])
    source = "read_parquet([" + ", ".join(_sql_string(f) for f in files) + "])"
    frame = schema.field("frames").type.value_type
    features = []
    for field in frame:
        if field.name == "episode_index":
            continue  # the episode's own column comes first
        features.append(f"{_frame_column(field)} AS {_ident(field.name)}")
    views = {
        "episodes": f"SELECT episode_index, tasks, length FROM {source}",
        "frames": (f"SELECT episode_index, {', '.join(features)} FROM "
                   f"(SELECT episode_index, unnest(frames) AS f FROM {source})"),
    }
    cameras = [f.name for f in schema.field("videos").type] if "videos" in schema.names else []
    selects = []
    for camera in cameras:
        v = f"videos[{_sql_string(camera)}]"
        clip = f"{v}['clip']"
        times = {"start": f"{clip}['start']", "end": f"{clip}['end']", "time_origin": f"{v}['time_origin']"}
        cols = ["episode_index", f"{_sql_string(camera)} AS camera", f"{clip}['media']['source']['uri'] AS uri",
                f"{clip}['media']['source']['size'] AS size"]
        cols += [f"to_microseconds(({x}) // 1000) AS {_ident(k)}" for k, x in times.items()]
        cols += [f"({x}) / 1e9 AS {_ident(k + '_s')}" for k, x in times.items()]
        selects.append(f"SELECT {', '.join(cols)} FROM {source}")
    if selects:
        views["clips"] = " UNION ALL ".join(selects)
    names = []
    for name, sql in views.items():
        con.execute(f"CREATE OR REPLACE VIEW {_ident(prefix + name)} AS {sql}")
        names.append(prefix + name)
    return names


def _parts(output: str) -> list[str]:
    """`part_files`, at least one: an import without parts has no table to query, which is said as such."""
    files = part_files(output)
    if not files:
        from transforms.reader import ReaderError
        raise ReaderError(f"the import at {output} holds no episode parts (no episodes file of it was imported: "
                          "see its errors.jsonl), so there is nothing to query; import the dataset again once its "
                          "errors are fixed")
    return files


def _schema(file: str) -> pa.Schema:
    fs, path = storage.filesystem(file)
    return pq.read_schema(path, filesystem=fs)


def _frame_column(field: pa.Field) -> str:
    """The SQL of a frame feature in the `frames` view: a tensor reshaped and cast to its fixed-size array."""
    x = f"f[{_sql_string(field.name)}]"
    t = field.type
    if isinstance(t, pa.FixedShapeTensorType) and _row_major(t) and t.value_type in _DUCKDB_TYPES:
        dims = "".join(f"[{d}]" for d in reversed(t.shape))
        return f"CAST({_reshape(x, list(t.shape))} AS {_DUCKDB_TYPES[t.value_type]}{dims})"
    if isinstance(t, pa.BaseExtensionType) and t.extension_name == DURATION:
        return f"to_microseconds(({x}) // 1000)"
    return x


def _reshape(x: str, shape: list[int], depth: int = 0) -> str:
    """SQL that turns the flat list `x` into nested lists of `shape` (row-major)."""
    if len(shape) == 1:
        return x
    stride = 1
    for d in shape[1:]:
        stride *= d
    i = f"i{depth}"
    inner = _reshape(f"list_slice({x}, {i} * {stride} + 1, ({i} + 1) * {stride})", shape[1:], depth + 1)
    return f"list_transform(range({shape[0]}), lambda {i}: {inner})"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def tensor_shapes(output: str) -> dict[str, list[int]]:
    """Each tensor frame feature of the import at `output` and its shape, as the parts' schema declares it."""
    files = _parts(output)
    schema = _schema(files[0])
    return {f.name: list(f.type.shape) for f in schema.field("frames").type.value_type
            if isinstance(f.type, pa.FixedShapeTensorType)}


__all__ = ["DURATION", "duckdb_views", "part_files", "plain", "plain_type", "polars_episodes",
           "read_episodes", "tensor_shapes"]
