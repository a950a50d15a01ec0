"""Write LeRobot v3 datasets for tests and benchmarks, laid out as LeRobot's writer lays them out.

Values are deterministic (seeded) so a test can recompute what any frame must hold.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"

DEFAULTS = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}

_NP = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int8": np.int8, "int16": np.int16,
       "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
       "uint64": np.uint64, "bool": np.bool_}


@dataclasses.dataclass
class DatasetSpec:
    """What to write. `features` are the user features (the 5 defaults are appended)."""

    lengths: Sequence[int] = (5, 7, 6)
    features: dict = dataclasses.field(default_factory=lambda: {
        "observation.state": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
        "action": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
    })
    fps: int = 10
    episodes_per_meta_file: int = 1000
    episodes_per_data_file: int = 1000
    list_kind: str = "fixed"  # "fixed" (recording writer) or "list" (merge/convert tools)
    tasks: Sequence[str] = ("pick the cube", "place the cube")
    seed: int = 0
    rows_per_group: Optional[int] = None  # None: one row group per episode, like LeRobot's writer
    video_files: dict = dataclasses.field(default_factory=dict)  # video key -> path of an MP4 to copy
    video_codec: str = "av1"
    extra_info: dict = dataclasses.field(default_factory=dict)


def feature_values(name: str, spec: dict, n: int, rng: np.random.Generator, start: int) -> object:
    """Deterministic values of a user feature for `n` frames starting at global index `start`."""
    dtype, shape = spec["dtype"], list(spec.get("shape") or [1])
    if dtype == "string":
        return [f"{name}-{start + i}" for i in range(n)]
    if dtype == "image":
        return [{"bytes": f"img-{name}-{start + i}".encode(), "path": f"frame-{start + i:06d}.png"} for i in range(n)]
    size = math.prod(shape)
    if dtype == "bool":
        return ((np.arange(start, start + n * size) % 3) == 0).reshape(n, *shape)
    np_type = _NP[dtype]
    if np.issubdtype(np_type, np.floating):
        values = rng.standard_normal(n * size).astype(np_type)
    else:
        info = np.iinfo(np_type)
        values = rng.integers(max(info.min, -1000), min(info.max, 1000), n * size, endpoint=True).astype(np_type)
    return values.reshape(n, *shape)


def column_array(spec: dict, values: object, list_kind: str) -> pa.Array:
    dtype, shape = spec["dtype"], list(spec.get("shape") or [1])
    if dtype == "string":
        return pa.array(values, pa.string())
    if dtype == "image":
        return pa.array(values, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    arr = np.asarray(values)
    n = arr.shape[0]
    flat = pa.array(arr.reshape(-1))
    if shape == [1]:
        return flat
    out = flat
    for dim in reversed(shape):
        count = len(out) // dim
        if list_kind == "fixed":
            out = pa.FixedSizeListArray.from_arrays(out, dim)
        else:
            out = pa.ListArray.from_arrays(pa.array(np.arange(0, (count + 1) * dim, dim, dtype=np.int32)), out)
    assert len(out) == n
    return out


def write_dataset(root: Path, spec: DatasetSpec = DatasetSpec(),
                  mutate_data: Optional[Callable[[pa.Table, int], pa.Table]] = None) -> Path:
    """Write a dataset under `root` (created). `mutate_data(table, file_number)` may edit a data file."""
    root = Path(root)
    rng = np.random.default_rng(spec.seed)
    features = {**spec.features, **DEFAULTS}
    video_keys = [k for k, f in features.items() if f["dtype"] == "video"]
    info = {
        "codebase_version": "v3.0", "fps": spec.fps, "total_episodes": len(spec.lengths),
        "total_frames": int(sum(spec.lengths)), "total_tasks": len(spec.tasks), "chunks_size": 1000,
        "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if video_keys else None, "robot_type": "synthetic",
        "splits": {"train": f"0:{len(spec.lengths)}"}, "features": features, **spec.extra_info,
    }
    (root / "meta").mkdir(parents=True, exist_ok=True)
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    pq.write_table(pa.table({"task_index": pa.array(range(len(spec.tasks)), pa.int64()),
                             "task": pa.array(list(spec.tasks))}), root / "meta" / "tasks.parquet")

    starts = np.concatenate([[0], np.cumsum(spec.lengths)]).astype(np.int64)
    episode_rows = []
    data_groups: dict[int, list[pa.Table]] = {}
    video_offsets: dict[str, float] = {k: 0.0 for k in video_keys}
    for ep, length in enumerate(spec.lengths):
        data_file = ep // spec.episodes_per_data_file
        columns = {}
        for name, f in spec.features.items():
            if f["dtype"] == "video":
                continue
            columns[name] = column_array(f, feature_values(name, f, length, rng, int(starts[ep])), spec.list_kind)
        columns["timestamp"] = pa.array((np.arange(length) / spec.fps).astype(np.float32))
        columns["frame_index"] = pa.array(np.arange(length, dtype=np.int64))
        columns["episode_index"] = pa.array(np.full(length, ep, np.int64))
        columns["index"] = pa.array(np.arange(starts[ep], starts[ep + 1], dtype=np.int64))
        columns["task_index"] = pa.array(np.full(length, ep % len(spec.tasks), np.int64))
        data_groups.setdefault(data_file, []).append(pa.table(columns))
        row = {
            "episode_index": ep, "tasks": [spec.tasks[ep % len(spec.tasks)]], "length": length,
            "data/chunk_index": 0, "data/file_index": data_file,
            "dataset_from_index": int(starts[ep]), "dataset_to_index": int(starts[ep + 1]),
        }
        for key in video_keys:
            row[f"videos/{key}/chunk_index"] = 0
            row[f"videos/{key}/file_index"] = 0
            row[f"videos/{key}/from_timestamp"] = video_offsets[key]
            row[f"videos/{key}/to_timestamp"] = video_offsets[key] + length / spec.fps
            video_offsets[key] += length / spec.fps
        row["meta/episodes/chunk_index"] = 0
        row["meta/episodes/file_index"] = ep // spec.episodes_per_meta_file
        episode_rows.append(row)

    for file_number, tables in data_groups.items():
        path = root / DATA_PATH.format(chunk_index=0, file_index=file_number)
        path.parent.mkdir(parents=True, exist_ok=True)
        table = pa.concat_tables(tables)
        if mutate_data is not None:
            table = mutate_data(table, file_number)
        with pq.ParquetWriter(path, table.schema, compression="snappy") as writer:
            if spec.rows_per_group is None:
                offset = 0
                for t in tables:
                    writer.write_table(table.slice(offset, t.num_rows))
                    offset += t.num_rows
                if offset < table.num_rows:
                    writer.write_table(table.slice(offset))
            else:
                writer.write_table(table, row_group_size=spec.rows_per_group)

    for meta_file in sorted({r["meta/episodes/file_index"] for r in episode_rows}):
        rows = [r for r in episode_rows if r["meta/episodes/file_index"] == meta_file]
        path = root / EPISODES_PATH.format(chunk_index=0, file_index=meta_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path)

    for key, source in spec.video_files.items():
        dest = root / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)
    return root


def edit_info(root: Path, edit: Callable[[dict], None]) -> None:
    path = Path(root) / "meta" / "info.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info, indent=4))


def edit_episodes(root: Path, edit: Callable[[pa.Table], pa.Table], file_index: int = 0) -> None:
    path = Path(root) / EPISODES_PATH.format(chunk_index=0, file_index=file_index)
    pq.write_table(edit(pq.read_table(path)), path)
