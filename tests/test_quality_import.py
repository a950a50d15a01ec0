"""The quality checks inside the import's own pass: the per-episodes-file tables under quality/, the manifest's
`quality` summary, the summary line, and `--strict` failing exactly the episodes files concerned."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.dataset_factory import DatasetSpec, edit_info, write_dataset
from tests.helpers import SAMPLE, read_errors, read_manifest, run_import

FILES = [f"meta/episodes/chunk-000/file-{i:03d}.parquet" for i in range(3)]


def _faulty(root):
    """Three episodes files of one episode each: NaN in episode 0's state, episode 2's action frozen."""
    def mutate(table, _):
        state = table.column("observation.state").combine_chunks()
        values = state.flatten().to_numpy().reshape(len(state), -1).copy()
        values[1, 2] = np.nan
        action = table.column("action").combine_chunks().flatten().to_numpy().reshape(len(state), -1).copy()
        action[12:18] = [1.0, 2.0, 3.0]
        for name, v in (("observation.state", values), ("action", action)):
            i = table.schema.get_field_index(name)
            table = table.set_column(i, table.schema.field(i), pa.FixedSizeListArray.from_arrays(
                pa.array(v.reshape(-1).astype(np.float32)), 3))
        return table
    return write_dataset(root, DatasetSpec(lengths=(5, 7, 6), episodes_per_meta_file=1), mutate_data=mutate)


def test_the_sample_imports_with_no_finding(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_import(SAMPLE, out) == 0
    doc = read_manifest(out)
    assert doc["quality"] == {"checks": {}, "findings": 0,
                              "tables": ["quality/chunk-000/file-000.parquet", "quality/dataset.parquet"]}
    assert doc["episodes_files"]["meta/episodes/chunk-000/file-000.parquet"]["quality"]["listed"] == {
        "episodes": 4, "frames": 46, "episode_ranges": [[0, 4]]}
    for table in doc["quality"]["tables"]:
        assert pq.read_table(out / table).num_rows == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("file://")][0]
    assert "quality" not in line and "imported - 4/4 episodes" in line


def test_findings_land_in_the_tables_the_manifest_and_the_summary_line(tmp_path, capsys):
    root, out = _faulty(tmp_path / "ds"), tmp_path / "out"
    assert run_import(root, out) == 0
    doc = read_manifest(out)
    assert doc["status"] == "imported" and doc["totals"]["errors"] == 0
    assert doc["quality"]["findings"] == 2
    assert doc["quality"]["checks"] == {
        "frozen_feature": {"episodes": 1, "findings": 1, "severity": "warning",
                           "example": "episode 2: `action` holds one value ([1, 2, 3]) in all 6 frames: a frozen "
                                      "sensor or actuator?"},
        "non_finite": {"episodes": 1, "findings": 1, "severity": "warning",
                       "example": "episode 0: `observation.state` holds 1 non-finite values (1 NaN, 0 infinite) in 1 "
                                  "of 5 frames, first at frame 1 (dimensions: z)"}}
    rows = pq.read_table(out / "quality/chunk-000/file-000.parquet").to_pylist()
    assert [(r["episodes_file"], r["episode_index"], r["check"], r["severity"], r["feature"], r["count"],
             r["first_frame"]) for r in rows] == [(FILES[0], 0, "non_finite", "warning", "observation.state", 1, 1)]
    assert rows[0]["dataset"] == doc["dataset"]
    assert pq.read_table(out / "quality/chunk-000/file-001.parquet").num_rows == 0
    everything = pq.read_table([out / t for t in doc["quality"]["tables"]][0]).schema
    assert everything.names[:4] == ["dataset", "episodes_file", "episode_index", "check"]
    printed = capsys.readouterr().out
    assert "imported - 3/3 episodes, 18 frames, 3/3 episodes files, 0 errors, 2 quality findings ->" in printed
    assert "  quality: frozen_feature (1 episodes), non_finite (1 episodes): " in printed
    assert "refuse" not in printed


def test_strict_fails_exactly_the_episodes_files_concerned(tmp_path):
    root = _faulty(tmp_path / "ds")
    out = tmp_path / "one"
    assert run_import(root, out, "--strict", "non_finite") == 1
    doc = read_manifest(out)
    assert {rel: e["status"] for rel, e in doc["episodes_files"].items()} == {
        FILES[0]: "failed", FILES[1]: "imported", FILES[2]: "imported"}
    errors = read_errors(out)
    assert [(e["episodes_file"], e["episode_index"], e["rule"]) for e in errors] == [(FILES[0], 0, "quality")]
    assert errors[0]["message"].startswith("quality check `non_finite` (--strict): episode 0: `observation.state` "
                                           "holds 1 non-finite values")
    assert errors[0]["file"] == "data/chunk-000/file-000.parquet"
    assert doc["quality"]["checks"]["non_finite"]["severity"] == "error"
    assert doc["quality"]["checks"]["frozen_feature"]["severity"] == "warning"
    assert not (out / "episodes/chunk-000/file-000.parquet").exists()
    assert pq.read_table(out / "quality/chunk-000/file-000.parquet").column("severity").to_pylist() == ["error"]
    assert doc["options"]["strict"] == ["non_finite"]

    out = tmp_path / "all"
    assert run_import(root, out, "--strict", "all") == 1
    doc = read_manifest(out)
    assert {rel: e["status"] for rel, e in doc["episodes_files"].items()} == {
        FILES[0]: "failed", FILES[1]: "imported", FILES[2]: "failed"}
    assert sorted((e["episode_index"], e["rule"]) for e in read_errors(out)) == [(0, "quality"), (2, "quality")]


def test_a_blocking_finding_says_lerobot_will_refuse_the_dataset(tmp_path, capsys):
    """Wall-clock timestamps: timestamp_grid, and (the frames' times leave the clips) video_samples."""
    root = tmp_path / "so101"
    shutil.copytree(SAMPLE, root)
    data = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    i = table.schema.get_field_index("timestamp")
    late = table.column("timestamp").to_numpy() + np.float32(2.17)
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(late, pa.float32())), data)
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    checks = read_manifest(out)["quality"]["checks"]
    assert sorted(checks) == ["timestamp_grid", "video_samples"]  # the steps are still 1/fps
    assert checks["timestamp_grid"]["episodes"] == 4 and checks["video_samples"]["episodes"] == 4
    assert checks["video_samples"]["findings"] == 8  # 4 episodes x 2 cameras
    printed = capsys.readouterr().out
    assert "LeRobot's loader will refuse this dataset (timestamp_grid, video_samples)" in printed


def test_an_mp4_at_another_rate_than_info_json_is_found_from_the_media_index(tmp_path):
    root = tmp_path / "so101"
    shutil.copytree(SAMPLE, root)
    edit_info(root, lambda info: info.update(fps=20))
    data = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    i = table.schema.get_field_index("timestamp")
    ts = (table.column("frame_index").to_numpy() / 20).astype(np.float32)
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(ts)), data)
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    rows = pq.read_table(out / "quality/chunk-000/file-000.parquet").to_pylist()
    assert {r["check"] for r in rows} == {"video_samples"}
    assert {(r["episode_index"], r["feature"]) for r in rows} == {
        (ep, cam) for ep in range(4) for cam in ("observation.images.front", "observation.images.wrist")}
    assert "the MP4 holds 46 samples at 30 fps, info.json says 20 fps" in rows[0]["detail"]


def test_dataset_totals_survive_an_incremental_run_and_strict_fails_the_dataset(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(5, 7, 6), episodes_per_meta_file=1))
    edit_info(root, lambda info: info.update(total_episodes=105, splits={"train": "0:105"}))
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    first = read_manifest(out)
    assert first["quality"]["checks"]["dataset_totals"]["findings"] == 2
    assert pq.read_table(out / "quality/dataset.parquet").column("feature").to_pylist() == ["splits.train",
                                                                                            "total_episodes"]
    # info.json's totals are not what the episodes files' imports depend on: a run after touching one file
    # imports that file alone and still knows what the others list
    write_dataset(tmp_path / "ds2", DatasetSpec(lengths=(5, 7, 6), episodes_per_meta_file=1, seed=1))
    shutil.copyfile(tmp_path / "ds2/meta/episodes/chunk-000/file-001.parquet", root / FILES[1])
    assert run_import(root, out) == 0
    doc = read_manifest(out)
    assert {rel: e["status"] for rel, e in doc["episodes_files"].items()} == {
        FILES[0]: "unchanged", FILES[1]: "imported", FILES[2]: "unchanged"}
    assert doc["quality"]["checks"] == first["quality"]["checks"]

    strict = tmp_path / "strict"
    assert run_import(root, strict, "--strict", "dataset_totals") == 1
    doc = read_manifest(strict)
    assert doc["status"] == "failed" and doc["totals"]["episodes_files_imported"] == 3
    assert [(e["episodes_file"], e["rule"], e["file"]) for e in read_errors(strict)] == [
        (None, "quality", "meta/info.json"), (None, "quality", "meta/info.json")]
    assert json.loads(json.dumps(doc["quality"]["checks"]["dataset_totals"]))["severity"] == "error"
