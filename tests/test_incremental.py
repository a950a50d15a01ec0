"""Re-imports of a grown or edited dataset redo only the episodes files whose sources changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

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
        assert entry["status"] == "imported" and entry["run_id"] == first["run_id"]  # written by this run
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


# ---- episodes files with MP4s: media_index/ rows carried, only touched shards rewritten -----------------

TOP, SIDE = "videos/observation.images.top", "videos/observation.images.side"
#: h264_multi_file: 5 episodes files of 2 episodes; per camera 2 MP4s a chunk folder (chunks_size 2).
LAST_TWO = ["meta/episodes/chunk-001/file-001.parquet", "meta/episodes/chunk-002/file-000.parquet"]
#: the data files and MP4s only the last two episodes files use
ONLY_LAST_TWO = ["data/chunk-001/file-000.parquet", "data/chunk-001/file-001.parquet",
                 f"{TOP}/chunk-001/file-001.mp4", f"{TOP}/chunk-002/file-000.mp4", f"{SIDE}/chunk-001/file-001.mp4"]


def _shard(folder: str) -> str:
    return f"media_index/{folder}.parquet"


def _shards(out: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted((out / "media_index").rglob("*")) if p.is_file()}


def _rows(out: Path, shard: str) -> dict[str, tuple[int, str]]:
    """MP4 path (relative to the dataset) -> (size, version) of a shard's rows."""
    table = pq.read_table(out / shard, columns=["uri", "size", "version"])
    return {uri.split("/h264/", 1)[1]: (size, version) for uri, size, version in
            zip(*(table.column(c).to_pylist() for c in ("uri", "size", "version")))}


def _metrics(printed: str) -> dict[str, int]:
    line = [row for row in printed.splitlines() if row.startswith("metrics: ")][-1]
    return {k: int(v) for k, v in (kv.split("=") for kv in line[len("metrics: "):].split(", "))}


def _frames(out: Path) -> dict[tuple[int, str], tuple]:
    """Per episode and camera: the first and last frames, seeked by episode time through the reader."""
    from transforms.reader.import_reader import ImportReader
    found = {}
    for ep in ImportReader(str(out)):
        ts = ep["timestamp"]
        for camera in ep.cameras:
            video = ep.video(camera)
            found[(ep.episode_index, camera)] = (video.frame_at(float(ts[0])).tobytes(),
                                                 video.frame_at(float(ts[-1])).tobytes())
    return found


@pytest.fixture(scope="module")
def video_import(tmp_path_factory) -> tuple[Path, Path, dict]:
    """h264_multi_file imported whole once (its frames seeked, as the reference), to copy per test."""
    import shutil

    from tests.helpers import lerobot_dataset
    base = tmp_path_factory.mktemp("videos")
    data, out = base / "h264", base / "out"
    shutil.copytree(lerobot_dataset("h264_multi_file"), data)
    assert run_import(data, out) == 0
    return data, out, _frames(out)


def _copy(video_import, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the dataset, imported whole (an output names its dataset's files by their URIs)."""
    import shutil
    data, out = tmp_path / "h264", tmp_path / "out"
    shutil.copytree(video_import[0], data)
    assert run_import(data, out) == 0
    return data, out


def test_appended_episodes_files_with_mp4s_rewrite_only_their_shards(video_import, tmp_path, capsys):
    import shutil
    full = video_import[0]
    data, out = tmp_path / "h264", tmp_path / "out"
    shutil.copytree(full, data)
    for rel in LAST_TWO + ONLY_LAST_TWO:
        (data / rel).unlink()
    info = json.loads((full / "meta/info.json").read_text())
    (data / "meta/info.json").write_text(json.dumps({**info, "total_episodes": 6, "total_frames": 63,
                                                     "splits": {"train": "0:6"}}))
    assert run_import(data, out) == 0
    first = read_manifest(out)
    assert sorted(first["media_index"]) == [_shard(f"{SIDE}/chunk-000"), _shard(f"{SIDE}/chunk-001"),
                                            _shard(f"{TOP}/chunk-000"), _shard(f"{TOP}/chunk-001")]
    parts, shards = _parts(out), _shards(out)
    kept_row = _rows(out, _shard(f"{TOP}/chunk-001"))[f"{TOP}/chunk-001/file-000.mp4"]
    capsys.readouterr()
    for rel in LAST_TWO + ONLY_LAST_TWO + ["meta/info.json"]:  # as a recording session appends them
        shutil.copy2(full / rel, data / rel)
    assert run_import(data, out) == 0
    metrics = _metrics(capsys.readouterr().out)
    second = read_manifest(out)
    assert _statuses(second) == {**{rel: "unchanged" for rel in second["episodes_files"] if rel not in LAST_TWO},
                                 **{rel: "imported" for rel in LAST_TWO}}
    # the three new MP4s are read; the rows of the two the new files share with old ones are carried
    assert (metrics["mp4_files"], metrics["media_index_rows_carried"], metrics["parts_written"]) == (3, 2, 2)
    assert metrics["media_index_shards_written"] == 3
    after = _shards(out)
    for untouched in (_shard(f"{TOP}/chunk-000"), _shard(f"{SIDE}/chunk-000")):
        assert after[untouched] == shards[untouched]  # same bytes, same mtime
    for grown in (_shard(f"{TOP}/chunk-001"), _shard(f"{SIDE}/chunk-001")):
        assert after[grown][1] != shards[grown][1]
    assert sorted(after) == sorted(second["media_index"]) and len(after) == 5
    grown_rows = _rows(out, _shard(f"{TOP}/chunk-001"))
    assert sorted(grown_rows) == [f"{TOP}/chunk-001/file-000.mp4", f"{TOP}/chunk-001/file-001.mp4"]
    assert grown_rows[f"{TOP}/chunk-001/file-000.mp4"] == kept_row  # carried, not read again
    assert {rel: parts[rel] for rel in parts} == {rel: _parts(out)[rel] for rel in parts}
    assert second["video_versions"] == video_import_versions(data)
    assert second["totals"]["episodes"] == 10 and second["status"] == "imported"
    assert _frames(out) == video_import[2]  # every episode of every camera seeks to the same pixels


def video_import_versions(data: Path) -> dict[str, str]:
    from transforms.lerobot import sources
    listing = sources.list_sources(str(data))
    return {rel: f.token for rel, f in listing.files.items() if rel.endswith(".mp4")}


def _append_free_box(mp4: Path) -> None:
    """Rewrite an MP4 as a writer would (new size, new mtime), its frames where they were: a `free` box at the end."""
    with open(mp4, "ab") as f:
        f.write((16).to_bytes(4, "big") + b"free" + b"\0" * 8)
    st = mp4.stat()
    os.utime(mp4, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_finalize_rewriting_the_last_episodes_file_and_its_mp4_reimports_only_it(video_import, tmp_path, capsys):
    data, out = _copy(video_import, tmp_path)
    shards = _shards(out)
    last = "meta/episodes/chunk-002/file-000.parquet"
    (data / last).write_bytes((data / last).read_bytes())  # rewritten in place: same rows, new mtime
    st = (data / last).stat()
    os.utime(data / last, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    mp4 = f"{TOP}/chunk-002/file-000.mp4"
    _append_free_box(data / mp4)
    capsys.readouterr()
    assert run_import(data, out) == 0
    metrics = _metrics(capsys.readouterr().out)
    doc = read_manifest(out)
    assert [rel for rel, status in _statuses(doc).items() if status == "imported"] == [last]
    assert (metrics["mp4_files"], metrics["media_index_rows_carried"], metrics["media_index_shards_written"]) == (
        1, 2, 1)
    size = (data / mp4).stat().st_size
    assert _rows(out, _shard(f"{TOP}/chunk-002")) == {mp4: (size, doc["video_versions"][mp4])}
    assert doc["video_versions"][mp4].startswith(f"{size}:")
    after = _shards(out)
    assert {k: v for k, v in after.items() if k != _shard(f"{TOP}/chunk-002")} == {
        k: v for k, v in shards.items() if k != _shard(f"{TOP}/chunk-002")}
    assert _frames(out) == video_import[2]


def test_a_changed_mp4_has_its_row_read_again_and_the_others_carried(video_import, tmp_path, capsys):
    data, out = _copy(video_import, tmp_path)
    before = _rows(out, _shard(f"{TOP}/chunk-000"))
    shards = _shards(out)
    mp4 = f"{TOP}/chunk-000/file-000.mp4"  # episodes 0-2, in the first two episodes files
    _append_free_box(data / mp4)
    capsys.readouterr()
    assert run_import(data, out) == 0
    metrics = _metrics(capsys.readouterr().out)
    doc = read_manifest(out)
    assert [rel for rel, s in _statuses(doc).items() if s == "imported"] == [EF.format(0), EF.format(1)]
    assert metrics["mp4_files"] == 1  # the other MP4s of those files: rows carried from their shards
    rows = _rows(out, _shard(f"{TOP}/chunk-000"))
    size = (data / mp4).stat().st_size
    assert rows[mp4] == (size, doc["video_versions"][mp4]) and rows[mp4] != before[mp4] and size == before[mp4][0] + 16
    assert rows[f"{TOP}/chunk-000/file-001.mp4"] == before[f"{TOP}/chunk-000/file-001.mp4"]
    after = _shards(out)
    assert [k for k in shards if after[k] != shards[k]] == [_shard(f"{TOP}/chunk-000")]
    assert _frames(out) == video_import[2]


def test_a_removed_episodes_file_loses_its_parts_and_its_mp4s_rows(video_import, tmp_path):
    data, out = _copy(video_import, tmp_path)
    shards = _shards(out)
    last = "meta/episodes/chunk-002/file-000.parquet"
    (data / last).unlink()  # its MP4s stay in the dataset, no episodes file names them any more
    assert run_import(data, out) == 0
    doc = read_manifest(out)
    assert doc["episodes_files"][last] == {"status": "removed", "parts": []}
    assert not (out / "episodes/chunk-002/file-000.parquet").exists()
    after = _shards(out)
    assert _shard(f"{TOP}/chunk-002") not in after and _shard(f"{TOP}/chunk-002") not in doc["media_index"]
    assert sorted(_rows(out, _shard(f"{SIDE}/chunk-001"))) == [f"{SIDE}/chunk-001/file-000.mp4"]
    assert f"{SIDE}/chunk-001/file-001.mp4" not in doc["video_versions"]
    assert f"{TOP}/chunk-002/file-000.mp4" not in doc["video_versions"]
    for untouched in (_shard(f"{TOP}/chunk-000"), _shard(f"{TOP}/chunk-001"), _shard(f"{SIDE}/chunk-000")):
        assert after[untouched] == shards[untouched]
    from pipelines import verify
    (report,) = verify.verify(str(out))
    assert report.ok and report.media_index_files == 4


def test_an_output_of_the_older_media_index_layout_is_imported_again_whole(video_import, tmp_path):
    import pyarrow as pa
    data, out = _copy(video_import, tmp_path)
    tables = [pq.read_table(out / shard) for shard in read_manifest(out)["media_index"]]
    old = pa.concat_tables(tables).drop_columns(["version"])
    for shard in list((out / "media_index").iterdir()):
        shutil_rmtree(shard)
    pq.write_table(old, out / "media_index/part-00000.parquet", row_group_size=1)
    doc = read_manifest(out)
    for key in ("media_index_layout", "media_index_files", "video_versions"):
        doc.pop(key)
    doc["media_index"] = ["media_index/part-00000.parquet"]
    (out / "manifest.json").write_text(json.dumps(doc))
    from pipelines import verify
    stale = verify.stale_episodes_files(doc)
    assert [p.path for p in stale] == sorted(doc["episodes_files"])
    assert {p.message for p in stale} == {verify.STALE_REASONS["older media_index layout"]}
    assert run_import(data, out) == 0  # nothing changed in the dataset, but the output is of the older layout
    second = read_manifest(out)
    assert set(_statuses(second).values()) == {"imported"}
    assert {e["run_id"] for e in second["episodes_files"].values()} == {second["run_id"]}
    assert second["media_index_layout"] == "mp4-folder/v1"
    assert not (out / "media_index/part-00000.parquet").exists()
    assert sorted(_shards(out)) == sorted(second["media_index"]) and len(second["media_index"]) == 5
    assert _frames(out) == video_import[2]


def shutil_rmtree(path: Path) -> None:
    import shutil
    shutil.rmtree(path) if path.is_dir() else path.unlink()


def test_inline_index_and_force_with_mp4s(video_import, tmp_path, capsys):
    """--inline-index keeps no media_index/: the MP4s an imported file uses are read for its clips; --force
    reads every MP4 and rewrites every shard."""
    import shutil
    data, out = tmp_path / "h264", tmp_path / "inline"
    shutil.copytree(video_import[0], data)
    assert run_import(data, out, "--inline-index") == 0
    _touch_file(data / "data/chunk-000/file-001.parquet")  # episodes 3-5: the 2nd and 3rd episodes files
    capsys.readouterr()
    assert run_import(data, out, "--inline-index") == 0
    metrics = _metrics(capsys.readouterr().out)
    doc = read_manifest(out)
    assert [rel for rel, s in _statuses(doc).items() if s == "imported"] == [EF.format(1),
                                                                             "meta/episodes/chunk-001/file-000.parquet"]
    assert metrics["mp4_files"] == 6 and "media_index_rows_carried" not in metrics
    assert doc["media_index"] == [] and not (out / "media_index").exists()
    assert _frames(out) == video_import[2]
    out = tmp_path / "default"
    assert run_import(data, out) == 0
    shards = _shards(out)
    capsys.readouterr()
    assert run_import(data, out, "--force") == 0
    metrics = _metrics(capsys.readouterr().out)
    assert (metrics["mp4_files"], metrics["media_index_shards_written"]) == (9, 5)
    assert all(_shards(out)[k][1] != shards[k][1] for k in shards) and sorted(_shards(out)) == sorted(shards)


def _touch_file(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_reader_without_a_manifest_finds_the_nested_shards(video_import, tmp_path):
    import shutil

    from transforms.reader.import_reader import ImportReader
    out = Path(shutil.copytree(video_import[1], tmp_path / "out"))
    (out / "manifest.json").unlink()
    reader = ImportReader(str(out), allowed_roots=[str(video_import[0])])
    assert sorted(reader.media_index.files) == sorted(f"file://{p}" for p in (out / "media_index").rglob("*.parquet"))
    assert len(reader.media_index.files) == 5
    ep = reader.episode(9)
    camera = "observation.images.top"
    assert ep.video(camera).frame_at(float(ep["timestamp"][-1])).tobytes() == video_import[2][(9, camera)][1]
