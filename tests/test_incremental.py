"""Re-imports of a grown or edited dataset redo only the episodes files whose sources changed."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq

from tests.dataset_factory import DatasetSpec, write_dataset
from tests.helpers import read_manifest, run_import

EF = "meta/episodes/chunk-000/file-{:03d}.parquet"

# four episodes, one per episodes file; two episodes per data file (file-000: 0-1, file-001: 2-3)
SPEC = DatasetSpec(lengths=(5, 7, 6, 4), episodes_per_meta_file=1, episodes_per_data_file=2)


def _parts(out: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted((out / "episodes").rglob("*.parquet"))}


def _statuses(manifest: dict) -> dict[str, str]:
    return {rel: e["status"] for rel, e in manifest["episodes_files"].items()}


def _first_import(tmp_path: Path) -> tuple[Path, Path, dict]:
    data, out = write_dataset(tmp_path / "ds", SPEC), tmp_path / "out"
    assert run_import(data, out) == 0
    return data, out, read_manifest(out)


def test_first_import_records_sources_and_run(tmp_path):
    _, _, first = _first_import(tmp_path)
    entries = first["episodes_files"]
    assert sorted(entries) == [f"meta/episodes/chunk-000/file-00{i}.parquet" for i in range(4)]
    for entry in entries.values():
        assert entry["status"] == "imported" and "run_id" not in entry  # written by the manifest's run
        assert len(entry["source_digest"]) == 64
    assert entries["meta/episodes/chunk-000/file-002.parquet"]["source_data_files"] == [
        "data/chunk-000/file-001.parquet"]
    assert first["totals"]["episodes_files_unchanged"] == 0 and first["totals"]["episodes_files_removed"] == 0


def test_changed_data_file_reimports_only_its_episodes_files(tmp_path):
    data, out, first = _first_import(tmp_path)
    before = _parts(out)
    touched = data / "data/chunk-000/file-001.parquet"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    assert run_import(data, out) == 0
    second = read_manifest(out)
    assert _statuses(second) == {
        EF.format(0): "unchanged", EF.format(1): "unchanged", EF.format(2): "imported", EF.format(3): "imported"}
    assert second["run_id"] != first["run_id"]
    kept = second["episodes_files"]["meta/episodes/chunk-000/file-000.parquet"]
    assert kept["run_id"] == first["run_id"]
    after = _parts(out)
    assert after["episodes/chunk-000/file-000.parquet"] == before["episodes/chunk-000/file-000.parquet"]
    assert after["episodes/chunk-000/file-001.parquet"] == before["episodes/chunk-000/file-001.parquet"]
    assert after["episodes/chunk-000/file-002.parquet"][1] != before["episodes/chunk-000/file-002.parquet"][1]
    totals = second["totals"]
    assert (totals["episodes"], totals["episodes_written"], totals["frames"]) == (4, 4, 22)
    counts = (totals["episodes_files"], totals["episodes_files_imported"], totals["episodes_files_unchanged"])
    assert counts == (4, 2, 2)
    assert second["status"] == "imported"
    rows = sum(pq.read_table(out / rel).num_rows for rel in after)
    assert rows == 4


def test_force_reimports_everything(tmp_path):
    data, out, _ = _first_import(tmp_path)
    touched = data / "data/chunk-000/file-001.parquet"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    assert run_import(data, out, "--force") == 0
    assert set(_statuses(read_manifest(out)).values()) == {"imported"}


def test_removed_episodes_file_loses_its_output(tmp_path):
    data, out, _ = _first_import(tmp_path)
    (data / "meta/episodes/chunk-000/file-003.parquet").unlink()
    assert (out / "episodes/chunk-000/file-003.parquet").exists()
    run_import(data, out)
    second = read_manifest(out)
    gone = second["episodes_files"]["meta/episodes/chunk-000/file-003.parquet"]
    assert gone == {"status": "removed", "parts": []}
    assert not (out / "episodes/chunk-000/file-003.parquet").exists()
    assert sorted(p.name for p in (out / "episodes/chunk-000").iterdir()) == [
        "file-000.parquet", "file-001.parquet", "file-002.parquet"]
    assert second["totals"]["episodes_files_removed"] == 1
    assert second["totals"]["episodes_files_unchanged"] == 3
    assert (second["totals"]["episodes"], second["totals"]["frames"]) == (3, 18)


def test_failed_file_is_retried_though_its_sources_did_not_change(tmp_path):
    import json
    data, out, first = _first_import(tmp_path)
    doc = read_manifest(out)
    doc["episodes_files"]["meta/episodes/chunk-000/file-001.parquet"]["status"] = "failed"
    doc["status"] = "failed"  # the dataset as a whole is not skipped either
    (out / "manifest.json").write_text(json.dumps(doc))
    assert run_import(data, out) == 0
    assert _statuses(read_manifest(out)) == {
        EF.format(0): "unchanged", EF.format(1): "imported", EF.format(2): "unchanged", EF.format(3): "unchanged"}


def test_reader_opens_every_episode_with_video_after_a_reimport(tmp_path):
    import shutil

    from tests.helpers import lerobot_dataset
    from transforms.reader.import_reader import ImportReader
    data, out = tmp_path / "ds", tmp_path / "out"
    shutil.copytree(lerobot_dataset("h264_multi_file"), data)
    assert run_import(data, out) == 0
    want = [(ep.episode_index, len(ep["timestamp"])) for ep in ImportReader(str(out))]
    touched = next(iter(sorted((data / "data").rglob("*.parquet"))))
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    assert run_import(data, out) == 0
    assert read_manifest(out)["status"] == "imported"
    seen = []
    for ep in ImportReader(str(out)):
        for camera in ep.cameras:
            frame = ep.video(camera).frame_at(float(ep["timestamp"][0]))
            assert frame.dtype.name == "uint8" and frame.ndim == 3
        seen.append((ep.episode_index, len(ep["timestamp"])))
    assert seen == want and len(seen) > 1


def test_warnings_of_unchanged_files_are_kept(tmp_path):
    import json
    data, out, _ = _first_import(tmp_path)
    doc = read_manifest(out)
    said = {"episodes_file": EF.format(0), "episode_index": 0, "file": None, "what": "start_drift",
            "by": "+0.1 s (1 frame)", "message": "episode 0: noted by the first import"}
    doc["warnings"], doc["totals"]["warnings"] = [said, {**said, "episodes_file": EF.format(2)}], 2
    (out / "manifest.json").write_text(json.dumps(doc))
    touched = data / "data/chunk-000/file-001.parquet"  # episodes files 2 and 3 are imported again
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    assert run_import(data, out) == 0
    second = read_manifest(out)
    assert second["warnings"] == [said] and second["totals"]["warnings"] == 1


def test_appended_episodes_files_are_the_only_ones_imported(tmp_path):
    import json
    import shutil
    full = write_dataset(tmp_path / "full", DatasetSpec(lengths=(5, 7, 6, 4, 3, 8), episodes_per_meta_file=1,
                                                        episodes_per_data_file=2))
    data, out = tmp_path / "ds", tmp_path / "out"
    shutil.copytree(full, data)
    appended = [EF.format(4), EF.format(5), "data/chunk-000/file-002.parquet"]
    for rel in appended:
        (data / rel).unlink()
    info = json.loads((full / "meta/info.json").read_text())
    (data / "meta/info.json").write_text(json.dumps({**info, "total_episodes": 4, "total_frames": 22,
                                                     "splits": {"train": "0:4"}}))
    assert run_import(data, out) == 0
    before = _parts(out)
    for rel in appended + ["meta/info.json"]:  # as a recording session appends: new files, new totals
        shutil.copy2(full / rel, data / rel)
    assert run_import(data, out) == 0
    second = read_manifest(out)
    assert _statuses(second) == {**{EF.format(i): "unchanged" for i in range(4)},
                                 EF.format(4): "imported", EF.format(5): "imported"}
    after = _parts(out)
    assert {rel: after[rel] for rel in before} == before
    assert sorted(set(after) - set(before)) == ["episodes/chunk-000/file-004.parquet",
                                                "episodes/chunk-000/file-005.parquet"]
    totals = second["totals"]
    assert (totals["episodes"], totals["episodes_written"], totals["frames"], totals["errors"]) == (6, 6, 33, 0)
    assert second["status"] == "imported"
