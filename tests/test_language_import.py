"""The `language` dataset (written by LeRobot) imports with typed language fields, every row round-tripping."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers import copy_dataset, lerobot_dataset, read_errors, read_part, run_import
from transforms.language import columns as language_columns


def test_language_dataset_imports_typed(tmp_path):
    root = lerobot_dataset("language")
    out = tmp_path / "out"
    assert run_import(root, out) == 0, read_errors(out)
    part = read_part(out)
    frame_type = part.schema.field("frames").type.value_type
    assert frame_type.field("language_persistent").type == language_columns.persistent_type()
    assert frame_type.field("language_events").type == language_columns.events_type()
    frames = part.column("frames").combine_chunks().flatten()
    data = pq.read_table(root / "data" / "chunk-000" / "file-000.parquet")
    assert len(frames) == data.num_rows
    for name in ("language_persistent", "language_events"):
        ours = language_columns.rows_to_python(frames.field(name))
        on_disk = language_columns.rows_to_python(language_columns.normalize_language_column(
            data.column(name), "persistent" if name.endswith("persistent") else "events", feature=name))
        assert ours == on_disk
    # Every on-disk row keeps its text, style, role and camera; timestamps are the float32 values.
    disk = data.column("language_persistent").to_pylist()
    ours = language_columns.rows_to_python(frames.field("language_persistent"))
    for frame_rows, disk_rows in zip(ours, disk):
        assert [(r["role"], r["content"], r["style"]) for r in frame_rows] == \
               [(r["role"], r["content"], r["style"]) for r in disk_rows]
        assert [r["timestamp"] for r in frame_rows] == [float(pa.scalar(r["timestamp"], pa.float32()).as_py())
                                                        for r in disk_rows]
    assert sum(len(r or []) for r in language_columns.rows_to_python(frames.field("language_events"))) > 0


def test_language_rule_fails_the_episodes_file(tmp_path):
    """A vqa row naming a camera the dataset does not have fails its episode with a clear error."""
    root = copy_dataset(lerobot_dataset("language"), tmp_path / "language")
    path = root / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(path)
    events = table.column("language_events").to_pylist()
    frame = next(i for i, rows in enumerate(events) if rows and any(r["style"] == "vqa" for r in rows))
    for row in events[frame]:
        if row["style"] == "vqa":
            row["camera"] = "observation.images.nowhere"
    col = pa.array(events, table.schema.field("language_events").type)
    pq.write_table(table.set_column(table.schema.get_field_index("language_events"), "language_events", col), path)
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    errors = [e for e in read_errors(out) if e["rule"] == "language"]
    assert errors
    episode = table.column("episode_index")[frame].as_py()
    assert errors[0]["episode_index"] == episode
    assert f"episode {episode} frame {table.column('frame_index')[frame].as_py()}" in errors[0]["message"]
    assert "observation.images.nowhere" in errors[0]["message"]
