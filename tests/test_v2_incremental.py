"""v2.x datasets at scale: groups of a chunk's episodes re-import alone when their files change, the
dataset imports from object storage as a local one does, and a real published v2.1 recording (data and
MP4 files as its authors wrote them) imports to the episodes of its v3.0 metadata."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import storage_emulators
from pipelines import plan
from tests.helpers import lerobot_dataset, read_manifest, run_import, third_party_path
from tests.v21_repack import repack_v21

GROUP = "meta/episodes.jsonl:chunk-{:03d}"


def _statuses(manifest: dict) -> dict[str, str]:
    return {rel: e["status"] for rel, e in manifest["episodes_files"].items()}


def _episodes(out: Path) -> pa.Table:
    manifest = read_manifest(out)
    table = pa.concat_tables([pq.read_table(out / p) for e in manifest["episodes_files"].values() for p in e["parts"]])
    return table.take(np.argsort(table.column("episode_index").to_numpy()))


def _mtimes(out: Path) -> dict[str, int]:
    """The episode parts' and media_index shards' mtimes (the quality tables follow their episodes files)."""
    return {p.relative_to(out).as_posix(): p.stat().st_mtime_ns for p in out.rglob("*.parquet")
            if p.relative_to(out).parts[0] in ("episodes", "media_index")}


def test_only_changed_groups_are_imported_again(tmp_path, capsys):
    root = repack_v21(lerobot_dataset("h264_multi_file"), tmp_path / "v21")  # chunks of 2: five groups
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    first = _mtimes(out)
    capsys.readouterr()
    options = plan.output_options(plan.PlanSettings())
    assert {f.episodes_file: f.action for f in plan.plan_dataset(str(root), str(out), options).files} == {
        GROUP.format(c): "unchanged" for c in range(5)}

    # one episode's data file rewritten (same rows, another file): only its group is imported again
    data = root / "data" / "chunk-001" / "episode_000003.parquet"
    table = pq.read_table(data)
    pq.write_table(table, data, row_group_size=5)
    planned = {f.episodes_file: (f.action, f.episodes, f.parts) for f in
               plan.plan_dataset(str(root), str(out), options).files if f.action == "import"}
    assert planned == {GROUP.format(1): ("import", 2, 1)}
    assert run_import(root, out) == 0
    assert _statuses(read_manifest(out)) == {**{GROUP.format(c): "unchanged" for c in (0, 2, 3, 4)},
                                             GROUP.format(1): "imported"}
    second = _mtimes(out)
    changed = sorted(k for k in second if second[k] != first.get(k))
    assert changed == ["episodes/chunk-001.parquet"]  # no shard changes: the group's MP4s did not
    assert "mp4_files=" not in capsys.readouterr().out.split("metrics:")[-1]  # no MP4 read: rows carried

    # two episodes appended (a new chunk): episodes.jsonl is rewritten, but only the new group is imported
    lines = (root / "meta" / "episodes.jsonl").read_text().splitlines()
    (root / "data" / "chunk-005").mkdir()
    for ep in (10, 11):
        shutil.copy(root / "data" / "chunk-004" / "episode_000008.parquet",
                    root / "data" / "chunk-005" / f"episode_{ep:06d}.parquet")
        for camera in ("observation.images.top", "observation.images.side"):
            folder = root / "videos" / "chunk-005" / camera
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(root / "videos" / "chunk-004" / camera / "episode_000008.mp4", folder / f"episode_{ep:06d}.mp4")
        lines.append(json.dumps({"episode_index": ep, "tasks": ["push the T"], "length": 13}))
    (root / "meta" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    assert run_import(root, out) == 0
    manifest = read_manifest(out)
    assert _statuses(manifest) == {**{GROUP.format(c): "unchanged" for c in range(5)}, GROUP.format(5): "imported"}
    assert manifest["totals"]["episodes"] == 12
    third = _mtimes(out)
    assert sorted(k for k in third if third[k] != second.get(k)) == [
        "episodes/chunk-005.parquet", "media_index/videos/chunk-005/observation.images.side.parquet",
        "media_index/videos/chunk-005/observation.images.top.parquet"]

    # a group's line edited (a task renamed): that group alone
    lines[0] = lines[0].replace("push the T", "push the T block")
    (root / "meta" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    assert run_import(root, out) == 0
    assert [rel for rel, s in _statuses(read_manifest(out)).items() if s == "imported"] == [GROUP.format(0)]
    assert _episodes(out).column("tasks")[0].as_py() == ["push the T block"]


@pytest.mark.parametrize("protocol", ["memory", "gs", "s3"])
def test_object_storage_imports_as_local(protocol, tmp_path):
    """From each object store (memory://, and gs:// and s3:// through their emulators), a v2.1 dataset
    imports as the local one does: listing a chunk's data folder, range reads of each MP4's head and moov,
    whole reads of the jsonl files; its clips name the MP4s at their place in the store."""
    import fsspec
    emulator, modules = {"memory": (contextlib.nullcontext, ()),
                         "gs": (storage_emulators.gcs_emulator, ("gcp_storage_emulator.server", "gcsfs")),
                         "s3": (storage_emulators.s3_emulator, ("moto.server", "s3fs"))}[protocol]
    reason = storage_emulators.missing(*modules)
    if reason:
        pytest.skip(reason)
    root = repack_v21(lerobot_dataset("so101_av1"), tmp_path / "v21")
    assert run_import(root, tmp_path / "local") == 0
    local = pq.read_table(tmp_path / "local" / "episodes" / "chunk-000.parquet")
    with emulator():
        fs = fsspec.filesystem(protocol)
        if protocol != "memory":
            fs.mkdir("v2remote")
        for path in root.rglob("*"):
            if path.is_file():
                fs.pipe(f"v2remote/ds/{path.relative_to(root).as_posix()}", path.read_bytes())
        try:
            assert run_import(f"{protocol}://v2remote/ds", f"{protocol}://v2remote/out") == 0
            fs.invalidate_cache()
            with fs.open("v2remote/out/episodes/chunk-000.parquet", "rb") as f:
                remote = pq.read_table(f)
        finally:
            if protocol == "memory":
                fs.rm("/v2remote", recursive=True)
    assert remote.column("episode_index").equals(local.column("episode_index"))
    assert remote.column("frames").equals(local.column("frames"))
    uris = remote.column("videos").combine_chunks().field("observation.images.front").field("clip")
    place = "memory:///v2remote/ds" if protocol == "memory" else f"{protocol}://v2remote/ds"
    assert uris.storage.field("media").storage.field("source").storage.field("uri")[0].as_py() == \
        f"{place}/videos/chunk-000/observation.images.front/episode_000000.mp4"


def _unitree_as_v21(dest: Path) -> Path:
    """The published G1 recording's own data and MP4 files (one per episode, byte for byte), linked under
    the v2.1 names, with the v2.1 metadata its v3.0 metadata was rewritten from (episodes 1, 2, 4, 5)."""
    src = third_party_path("unitree_g1_av1")
    info = json.loads((src / "meta" / "info.json").read_text())
    episodes = pq.read_table(src / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    camera = next(k for k, f in info["features"].items() if f["dtype"] == "video")
    (dest / "meta").mkdir(parents=True)
    for e in episodes:
        ep = e["episode_index"]
        data = dest / f"data/chunk-000/episode_{ep:06d}.parquet"
        mp4 = dest / f"videos/chunk-000/{camera}/episode_{ep:06d}.mp4"
        for link, target in ((data, f"data/chunk-000/file-{e['data/file_index']:03d}.parquet"),
                             (mp4, f"videos/{camera}/chunk-000/file-{e[f'videos/{camera}/file_index']:03d}.mp4")):
            link.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / target, link)
    (dest / "meta" / "episodes.jsonl").write_text("".join(
        json.dumps({"episode_index": e["episode_index"], "tasks": e["tasks"], "length": e["length"]}) + "\n"
        for e in episodes))
    tasks = pq.read_table(src / "meta" / "tasks.parquet")
    (dest / "meta" / "tasks.jsonl").write_text("".join(json.dumps({"task_index": i, "task": t}) + "\n" for i, t in
                                                       enumerate(tasks.column(tasks.column_names[-1]).to_pylist())))
    info.update(codebase_version="v2.1", data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
                video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4")
    (dest / "meta" / "info.json").write_text(json.dumps(info))
    return dest


def test_published_v21_recording_imports(tmp_path):
    root = _unitree_as_v21(tmp_path / "g1")
    src = third_party_path("unitree_g1_av1")
    assert run_import(root, tmp_path / "v21") == 0
    assert run_import(src, tmp_path / "v30") == 0
    a, b = _episodes(tmp_path / "v30"), _episodes(tmp_path / "v21")
    assert b.column("episode_index").to_pylist() == [1, 2, 4, 5]
    for column in ("episode_index", "tasks", "length", "frames"):
        assert b.column(column).equals(a.column(column)), column
    # the v2.1 data keep the recording's own `index` (479.. for episode 1, skipping episode 3's frames)
    assert b.column("frames")[0].as_py()[0]["index"] == 479
