#!/usr/bin/env python3
"""The oracle: spiral-sdk's `spql.lerobot.episodes` (the reference implementation) run on a local dataset.

The tests compare the project's episodes with the reference's. There is one way to get them:
`reference_episodes(root, episodes_rel)`, which runs this file as a script in a child process (the
reference's engine stays out of the test process, and a crash or hang there cannot take pytest with it)
and reads back the Arrow file it writes. Results are cached per process, keyed by the dataset's files.

As a script:

    python tests/oracle.py DATASET_ROOT EPISODES_PARQUET OUT.arrow

writes OUT.arrow with one row per episode (episode_index, tasks, length, frames, videos) or exits 1
with the reference's error on stderr.

How the reference is called (spiral-sdk 0.16.56):
* `spql.lerobot.episodes(info, episodes)` takes two `spql.Blob`s and declares its output type per call:
  the call's expression metadata is a serialized vortex `DType` protobuf of the whole result
  (list<struct{episode_index, tasks, length, frames, videos}>). `episodes_dtype` derives it from
  info.json the way the reference's planner does; at run time the function derives it again and fails
  with "the dataset's episodes are X, but the call declares Y" when the two differ.
* Blob URIs must lie under the storage root of the scanned table, so the table lives in a fresh
  temporary folder holding a symlink `ds` -> DATASET_ROOT; the URIs of the result are rewritten from
  that symlink back to file://DATASET_ROOT/.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import pyarrow as pa

#: The reference implementation's package, pinned in the test extra.
REFERENCE = "spiral-sdk==0.16.56"
DEFAULT_EPISODES = "meta/episodes/chunk-000/file-000.parquet"


class OracleError(Exception):
    """The reference rejected the dataset; the message is the reference's own error."""


def spiral_missing() -> Optional[str]:
    """Why the reference cannot run here (None when it can). Does not import spiral into this process."""
    if importlib.util.find_spec("spiral") is None:
        return f"the reference implementation is not installed: pip install {REFERENCE} (or the test extra)"
    return None


# --------------------------------------------------------------------------------------------------
# The runner the tests use
# --------------------------------------------------------------------------------------------------
_CACHE: dict[tuple, object] = {}


def reference_episodes(root: str | os.PathLike, episodes_rel: str = DEFAULT_EPISODES,
                       work_dir: Optional[Path] = None, timeout: float = 600) -> pa.Table:
    """The reference's episodes (one row per episode) for one episodes file of a local dataset.

    Args:
        root: the dataset root (a local folder).
        episodes_rel: the episodes file, relative to `root`.
        work_dir: where the child process writes its Arrow file (a temporary folder by default).
        timeout: seconds before the child process is killed (subprocess.TimeoutExpired propagates).

    Returns:
        The reference's table, its `spql.*` extension types registered by the project's own module.

    Raises:
        OracleError: the reference rejected the dataset (cached like a result).
        RuntimeError: spiral-sdk is not installed.
    """
    missing = spiral_missing()
    if missing:
        raise RuntimeError(missing)
    key = (str(Path(root).resolve()), episodes_rel, _tree_stamp(Path(root)))
    if key not in _CACHE:
        _CACHE[key] = _run_child(Path(root), episodes_rel, work_dir, timeout)
    value = _CACHE[key]
    if isinstance(value, OracleError):
        raise value
    return value


def _run_child(root: Path, episodes_rel: str, work_dir: Optional[Path], timeout: float) -> pa.Table | OracleError:
    import transforms.episode.spql_types  # noqa: F401  (registers the spql.* names for reading the file)
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        out = os.path.join(tmp, "episodes.arrow")
        proc = subprocess.run([sys.executable, __file__, str(root), episodes_rel, out],
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            return OracleError(lines[-1] if lines else f"the reference exited with status {proc.returncode}")
        with pa.OSFile(out, "rb") as f:
            return pa.ipc.open_file(f).read_all()


def _tree_stamp(root: Path) -> tuple:
    """Every file under `root` with its size and mtime: a changed dataset is never served from the cache."""
    return tuple(sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()))


# --------------------------------------------------------------------------------------------------
# Protobuf encoding (proto3 wire format: varints and length-delimited fields)
# --------------------------------------------------------------------------------------------------
def _varint(out: bytearray, value: int) -> None:
    value &= 0xFFFF_FFFF_FFFF_FFFF
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _varint_field(out: bytearray, field: int, value: int) -> None:
    if value:  # proto3 omits default scalars
        _varint(out, field << 3)
        _varint(out, value)


def _bool(out: bytearray, field: int, value: bool) -> None:
    _varint_field(out, field, int(value))


def _message(out: bytearray, field: int, value: bytes) -> None:
    _varint(out, (field << 3) | 2)
    _varint(out, len(value))
    out += value


def _string(out: bytearray, field: int, value: str, always: bool = False) -> None:
    if value or always:
        _message(out, field, value.encode("utf-8"))


# --------------------------------------------------------------------------------------------------
# vortex DType messages (one field number per kind: null 1, bool 2, primitive 3, utf8 5, binary 6,
# struct 7, list 8, extension 9, fixed-size list 10)
# --------------------------------------------------------------------------------------------------
_PTYPE = {"u8": 0, "u16": 1, "u32": 2, "u64": 3, "i8": 4, "i16": 5, "i32": 6, "i64": 7,
          "f16": 8, "f32": 9, "f64": 10}


def _wrap(field: int, body: bytes) -> bytes:
    out = bytearray()
    _message(out, field, bytes(body))
    return bytes(out)


def d_bool(nullable: bool = False) -> bytes:
    b = bytearray()
    _bool(b, 1, nullable)
    return _wrap(2, b)


def d_prim(ptype: str, nullable: bool = False) -> bytes:
    b = bytearray()
    _varint_field(b, 1, _PTYPE[ptype])
    _bool(b, 2, nullable)
    return _wrap(3, b)


def d_utf8(nullable: bool = False) -> bytes:
    b = bytearray()
    _bool(b, 1, nullable)
    return _wrap(5, b)


def d_binary(nullable: bool = False) -> bytes:
    b = bytearray()
    _bool(b, 1, nullable)
    return _wrap(6, b)


def d_struct(fields: list[tuple[str, bytes]], nullable: bool = False) -> bytes:
    b = bytearray()
    for name, _ in fields:
        _string(b, 1, name, always=True)
    for _, dtype in fields:
        _message(b, 2, dtype)
    _bool(b, 3, nullable)
    return _wrap(7, b)


def d_list(element: bytes, nullable: bool = False) -> bytes:
    b = bytearray()
    _message(b, 1, element)
    _bool(b, 2, nullable)
    return _wrap(8, b)


def d_fsl(element: bytes, size: int, nullable: bool = False) -> bytes:
    b = bytearray()
    _message(b, 1, element)
    _varint_field(b, 2, size)
    _bool(b, 3, nullable)
    return _wrap(10, b)


def d_ext(ext_id: str, storage: bytes, metadata: Optional[bytes] = None) -> bytes:
    b = bytearray()
    _string(b, 1, ext_id)
    _message(b, 2, storage)
    if metadata is not None:
        _message(b, 3, metadata)
    return _wrap(9, b)


# --------------------------------------------------------------------------------------------------
# The episode type, derived from info.json as the reference's planner derives it
# --------------------------------------------------------------------------------------------------
def spql_meta(order: str = "none", eq: str = "identity", **params) -> bytes:
    """spql.* extension metadata: canonical JSON (sorted keys, no spaces), as in the Arrow metadata."""
    return json.dumps({"order": order, "eq": eq, **params}, sort_keys=True, separators=(",", ":")).encode()


def tensor_meta(shape: list[int], names=None) -> bytes:
    """vortex.tensor.fixed_shape_tensor metadata: {1: packed uint32 logical shape, 2: dim names}.

    `names` become dimension names only when they are one string per dimension (a [34] feature with 34
    names has none; a [2, 3] feature named ["r", "c"] has r, c); a dict gives its keys in order."""
    b = bytearray()
    packed = bytearray()
    for d in shape:
        _varint(packed, int(d))
    if shape:
        _message(b, 1, bytes(packed))
    if isinstance(names, dict):
        names = list(names.keys())
    if isinstance(names, list) and len(names) == len(shape) and all(isinstance(n, str) for n in names):
        for n in names:
            _string(b, 2, n, always=True)
    return bytes(b)


def blob_dtype() -> bytes:
    return d_ext("spql.Blob", d_struct([
        ("bytes", d_binary(True)), ("uri", d_utf8(True)), ("offset", d_prim("u64", True)),
        ("size", d_prim("u64", True)), ("mime_type", d_utf8(True)), ("version", d_utf8(True)),
        ("etag", d_utf8(True)), ("digest", d_binary(True))], True), spql_meta())


def duration_dtype(nullable: bool) -> bytes:
    return d_ext("spql.Duration", d_prim("i64", nullable), spql_meta("storage", "storage", unit="ns"))


def media_index_dtype() -> bytes:
    def u32(n=False):
        return d_prim("u32", n)

    def i64(n=False):
        return d_prim("i64", n)

    track = d_struct([
        ("track_id", u32()), ("kind", d_utf8()), ("codec", d_utf8()), ("language", d_utf8(True)),
        ("width", u32(True)), ("height", u32(True)), ("timescale", u32()), ("movie_timescale", u32()),
        ("duration_ticks", i64()), ("sample_entry", d_binary()),
        ("dts_runs", d_list(d_struct([("count", u32()), ("delta", u32())]))),
        ("edit_list", d_list(d_struct([("duration", i64()), ("media_time", i64()), ("rate", d_prim("i32"))]),
                             True)),
        ("chunks", d_list(d_struct([("first_sample", u32()), ("offset", d_prim("u64"))]))),
        ("gops", d_list(d_struct([("decode_start", u32()), ("frame_start", u32()), ("pts_start", i64()),
                                  ("byte_offset", d_prim("u64")), ("byte_length", d_prim("u64")),
                                  ("sample_count", u32())]))),
        ("sizes", d_list(u32())), ("ctts", d_list(d_prim("i32"), True)), ("flags", d_list(d_prim("u8"))),
    ])
    return d_ext("spql.MediaIndex", d_struct([("primary_track_id", u32()), ("tracks", d_list(track))], True),
                 spql_meta())


def encoded_image_dtype() -> bytes:
    return d_ext("spql.EncodedImage", d_struct([
        ("source", blob_dtype()), ("format", d_utf8(True)), ("mime_type", d_utf8(True)),
        ("width", d_prim("u32", True)), ("height", d_prim("u32", True))], True), spql_meta())


def encoded_media_dtype() -> bytes:
    return d_ext("spql.EncodedMedia", d_struct([
        ("source", blob_dtype()), ("container", d_utf8(True)), ("index", media_index_dtype())], True),
        spql_meta())


def clip_ref_dtype() -> bytes:
    return d_ext("spql.ClipRef", d_struct([
        ("media", encoded_media_dtype()), ("stream_indices", d_list(d_prim("i32"), True)),
        ("start", duration_dtype(True)), ("end", duration_dtype(True))], True), spql_meta())


_FEATURE_PTYPE = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8", "int16": "i16",
                  "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}


def feature_dtype(name: str, feature: dict) -> bytes:
    """One frame feature's type: shape [] or [1] is a plain nullable column, larger shapes a tensor."""
    kind = feature["dtype"]
    shape = list(feature.get("shape") or [])
    if kind in _FEATURE_PTYPE:
        ptype = _FEATURE_PTYPE[kind]
        if shape in ([], [1]):
            return d_prim(ptype, True)
        size = 1
        for d in shape:
            size *= int(d)
        return d_ext("vortex.tensor.fixed_shape_tensor", d_fsl(d_prim(ptype), size, True),
                     tensor_meta(shape, feature.get("names")))
    if kind == "bool" and shape in ([], [1]):
        return d_bool(True)
    if kind == "string" and shape in ([], [1]):
        return d_utf8(True)
    if kind == "image":
        return encoded_image_dtype()
    # Not derived here: declare a placeholder and let the reference either print the type it derives
    # ("the dataset's episodes are <T>, but the call declares ...") or reject the feature
    # ("LeRobot feature `language_persistent` has unknown dtype `language`").
    print(f"note: feature {name!r}: dtype {kind!r} shape {shape} has no derived type here", file=sys.stderr)
    return d_utf8(True)


def episodes_dtype(info: dict) -> bytes:
    """The whole call result: list<struct{episode_index, tasks, length, frames, videos (when any)}>."""
    frames, videos = [], []
    for name, feature in info["features"].items():
        if feature["dtype"] == "video":
            videos.append((name, d_struct([("clip", clip_ref_dtype()), ("time_origin", duration_dtype(False))])))
        else:
            frames.append((name, feature_dtype(name, feature)))
    fields = [("episode_index", d_prim("i64")), ("tasks", d_list(d_utf8())), ("length", d_prim("i64")),
              ("frames", d_list(d_struct(frames)))]
    if videos:
        fields.append(("videos", d_struct(videos)))
    return d_list(d_struct(fields))


# --------------------------------------------------------------------------------------------------
# Calling the reference (this part imports spiral)
# --------------------------------------------------------------------------------------------------
def run(root: str | os.PathLike, episodes_path: str) -> pa.Table:
    """Run the reference in this process; returns its episodes, one row per episode.

    Args:
        root: the dataset root (a local folder).
        episodes_path: one meta/episodes/*/*.parquet file, relative to `root` or absolute.
    """
    import spiral
    from spiral import types as spql
    from spiral.expressions import Expression, column

    root = os.path.abspath(root)
    with open(os.path.join(root, "meta", "info.json")) as f:
        info = json.load(f)
    if not os.path.isabs(episodes_path):
        candidate = os.path.join(root, episodes_path)
        episodes_path = candidate if os.path.exists(candidate) else os.path.abspath(episodes_path)
    work = tempfile.mkdtemp(prefix="spiral-oracle-")
    try:
        os.symlink(root, os.path.join(work, "ds"))
        episodes_uri_path = _episodes_under(work, root, episodes_path)

        def blob(path: str) -> pa.Array:
            return spql.blob(uri=pa.array(["file://" + path]), size=pa.array([os.path.getsize(path)], pa.uint64()))

        data = pa.table({"info": blob(os.path.join(work, "ds", "meta", "info.json")), "ep": blob(episodes_uri_path)})
        writer = spiral.Client.local().create_local_table(work, data.schema)
        writer.append(data)
        call = Expression("spql.lerobot.episodes", (column("info"), column("ep")), episodes_dtype(info))
        lists = writer.finish().scan(projection={"episodes": call}).to_table().column("episodes").combine_chunks()
        if len(lists) != 1:
            raise RuntimeError(f"the reference returned {len(lists)} rows for one call")
        episodes = pa.Table.from_struct_array(lists.flatten())  # list<struct> -> one row per episode
        return rewrite_uris(episodes, "file://" + os.path.join(work, "ds") + "/", "file://" + root + "/")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _episodes_under(work: str, root: str, episodes_path: str) -> str:
    """The episodes file's path under the table root: through the `ds` symlink, or a copy if outside root."""
    rel = os.path.relpath(episodes_path, root)
    if not rel.startswith(".."):
        return os.path.join(work, "ds", rel)
    os.makedirs(os.path.join(work, "episodes"))
    copy = os.path.join(work, "episodes", os.path.basename(episodes_path))
    shutil.copyfile(episodes_path, copy)
    return copy


def _contains_blob(t: pa.DataType) -> bool:
    if isinstance(t, pa.BaseExtensionType):
        return t.extension_name == "spql.Blob" or _contains_blob(t.storage_type)
    if pa.types.is_struct(t):
        return any(_contains_blob(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _contains_blob(t.value_type)
    return False


def _map_blob_uris(arr: pa.Array, fn) -> pa.Array:
    """`arr` rebuilt with fn applied to the `uri` field of every spql.Blob inside it."""
    t = arr.type
    if not _contains_blob(t):
        return arr
    if isinstance(t, pa.BaseExtensionType):
        storage = arr.storage
        if t.extension_name == "spql.Blob":
            names = [t.storage_type.field(i).name for i in range(t.storage_type.num_fields)]
            children = [storage.field(i) for i in range(len(names))]
            i = names.index("uri")
            children[i] = pa.array([None if u is None else fn(u) for u in children[i].to_pylist()], children[i].type)
            storage = pa.StructArray.from_arrays(children, fields=list(t.storage_type), mask=storage.is_null())
        else:
            storage = _map_blob_uris(storage, fn)
        return pa.ExtensionArray.from_storage(t, storage)
    if pa.types.is_struct(t):
        children = [_map_blob_uris(arr.field(i), fn) for i in range(t.num_fields)]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    if pa.types.is_list(t):
        mask = arr.is_null() if arr.null_count else None
        return pa.ListArray.from_arrays(arr.offsets, _map_blob_uris(arr.values, fn), type=t, mask=mask)
    raise NotImplementedError(f"rewrite URIs inside {t}")


def rewrite_uris(episodes: pa.Table, old_prefix: str, new_prefix: str) -> pa.Table:
    """Every spql.Blob uri starting with old_prefix re-rooted at new_prefix."""
    def fn(u: str) -> str:
        return new_prefix + u[len(old_prefix):] if u.startswith(old_prefix) else u
    columns = []
    for name in episodes.column_names:
        col = episodes.column(name).combine_chunks()
        columns.append(_map_blob_uris(col, fn) if _contains_blob(col.type) else col)
    return pa.Table.from_arrays(columns, schema=episodes.schema)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root")
    parser.add_argument("episodes")
    parser.add_argument("out")
    args = parser.parse_args(argv)
    try:
        episodes = run(args.root, args.episodes)
    except Exception as ex:  # noqa: BLE001  (the reference's own message is the result)
        print("ERROR:", str(ex).split("\nBacktrace")[0], file=sys.stderr)
        return 1
    with pa.OSFile(args.out, "wb") as sink:
        with pa.ipc.new_file(sink, episodes.schema) as writer:
            writer.write_table(episodes)
    print(f"wrote {episodes.num_rows} episodes to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
