"""Dataset checks in the order a person makes them, on layouts seen in published datasets.

Each layout is built here from the project's own data: a v2.1 dataset (one Parquet file and one MP4
per episode, meta/episodes.jsonl), a folder holding datasets, a root that does not exist, a dataset's
`meta/` given as the root, a Hugging Face cache snapshot (files symlinked into `blobs/`), episodes
files under a symlinked chunk folder. The pure check (`check_dataset`) and the import end to end
must both name the real cause and the next step.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import SAMPLE, lerobot_dataset, read_errors, read_manifest, run_import
from tests.hostile_datasets import lfs_pointer_text
from transforms.base.errors import LeRobotImportError
from transforms.lerobot.dataset import check_dataset, hf_repo_id

CONVERTER = "python -m lerobot.datasets.v30.convert_dataset_v21_to_v30"


def write_v21_layout(dest: Path, src: Path = SAMPLE) -> Path:
    """The sample dataset as LeRobot v2.1 lays it out: info.json v2.1 with per-episode templates,
    meta/episodes.jsonl and meta/tasks.jsonl, one data file and one MP4 per episode (the MP4s copied
    as they are: only the layout matters here)."""
    info = json.loads((src / "meta" / "info.json").read_text())
    info.update(codebase_version="v2.1", data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
                video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4")
    (dest / "meta").mkdir(parents=True)
    (dest / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    episodes = pq.read_table(src / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    data = pq.read_table(src / "data" / "chunk-000" / "file-000.parquet")
    lines, tasks = [], {}
    (dest / "data" / "chunk-000").mkdir(parents=True)
    for row in episodes.select(["episode_index", "tasks", "length"]).to_pylist():
        lines.append(json.dumps(row))
        for task in row["tasks"]:
            tasks.setdefault(task, len(tasks))
        mask = pa.compute.equal(data.column("episode_index"), row["episode_index"])
        pq.write_table(data.filter(mask), dest / "data" / "chunk-000" / f"episode_{row['episode_index']:06d}.parquet")
    (dest / "meta" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    (dest / "meta" / "tasks.jsonl").write_text("\n".join(json.dumps({"task_index": i, "task": t})
                                                         for t, i in tasks.items()) + "\n")
    return dest


def _raises(root, rule: str) -> str:
    with pytest.raises(LeRobotImportError) as raised:
        check_dataset(str(root))
    assert raised.value.rule == rule, str(raised.value)
    return str(raised.value)


# ---- the pure checks -----------------------------------------------------------------------------

def test_a_dataset_passes_with_its_episodes_files(tmp_path):
    checked = check_dataset(str(lerobot_dataset("h264_multi_file")))
    assert checked.root.startswith("file:///") and checked.info.codebase_version == "v3.0"
    assert checked.episodes_files == ("meta/episodes/chunk-000/file-000.parquet",
                                      "meta/episodes/chunk-000/file-001.parquet",
                                      "meta/episodes/chunk-001/file-000.parquet",
                                      "meta/episodes/chunk-001/file-001.parquet",
                                      "meta/episodes/chunk-002/file-000.parquet")
    assert [f.name for f in check_dataset(str(SAMPLE), skip_videos=True).info.video_features] == []


def test_missing_root_names_the_nearest_folder(tmp_path):
    (tmp_path / "datasets" / "so101").mkdir(parents=True)
    message = _raises(tmp_path / "datasets" / "so10l", "dataset_root")
    assert f"the dataset root file://{tmp_path}/datasets/so10l does not exist" in message
    assert f"the nearest folder that exists is file://{tmp_path}/datasets (its folders: so101)" in message


def test_a_file_as_root_names_its_dataset(tmp_path):
    root = Path(shutil.copytree(SAMPLE, tmp_path / "so101"))
    message = _raises(root / "meta" / "info.json", "dataset_root")
    assert "is a file, not a folder: give the dataset's folder" in message and str(root) in message


def test_folder_of_datasets_names_them(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "repo" / "so101")
    shutil.copytree(SAMPLE, tmp_path / "repo" / "recordings" / "day1")
    (tmp_path / "repo" / "src").mkdir()
    message = _raises(tmp_path / "repo", "info_json")
    assert f"not a LeRobot dataset: meta/info.json does not exist under file://{tmp_path}/repo" in message
    assert "these sub-folders are LeRobot datasets: recordings/day1/, so101/" in message
    assert f"--dataset {tmp_path}/repo/recordings/day1" in message


def test_plain_folder_says_what_a_dataset_holds(tmp_path):
    (tmp_path / "photos").mkdir()
    message = _raises(tmp_path / "photos", "info_json")
    assert "not a LeRobot dataset" in message and "holds meta/info.json, meta/episodes/, data/" in message


def test_meta_folder_as_root_names_the_dataset(tmp_path):
    root = Path(shutil.copytree(SAMPLE, tmp_path / "so101"))
    message = _raises(root / "meta", "info_json")
    assert f"is a folder inside the dataset file://{root}: import that one (--dataset {root})" in message


def test_v21_dataset_is_read_as_it_is(tmp_path):
    """A v2.1 dataset is imported as it is (`tests/test_v2_import.py`): its episodes are planned in groups,
    one per chunk folder; without meta/episodes.jsonl it is not laid out as v2.1, and the check says so."""
    root = write_v21_layout(tmp_path / "v21")
    checked = check_dataset(str(root))
    assert checked.info.codebase_version == "v2.1" and checked.episodes_files == ("meta/episodes.jsonl:chunk-000",)
    (root / "meta" / "episodes.jsonl").unlink()
    message = _raises(root, "codebase_version")
    assert "not laid out as LeRobot v2.1" in message and "it has no meta/episodes.jsonl" in message


def test_v30_info_over_v21_files_says_so(tmp_path):
    root = write_v21_layout(tmp_path / "v21")
    info = json.loads((root / "meta" / "info.json").read_text())
    (root / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v3.0",
                                                         "data_path": "data/{chunk_index}/{file_index}.parquet",
                                                         "video_path": "videos/{video_key}/{file_index}.mp4"}))
    message = _raises(root, "episodes_file")
    assert "has meta/episodes.jsonl, the v2.x layout, although its info.json says v3.0" in message
    assert CONVERTER in message


def test_episodes_file_outside_a_chunk_folder_is_named(tmp_path):
    root = Path(shutil.copytree(SAMPLE, tmp_path / "so101"))
    episodes = root / "meta" / "episodes"
    (episodes / "chunk-000" / "file-000.parquet").rename(episodes / "file-000.parquet")
    (episodes / "chunk-000").rmdir()
    message = _raises(root, "episodes_file")
    assert "meta/episodes/file-000.parquet lies directly in meta/episodes/" in message
    assert "move it into a chunk folder" in message


def test_lfs_pointer_info_json(tmp_path):
    root = Path(shutil.copytree(SAMPLE, tmp_path / "so101"))
    info = root / "meta" / "info.json"
    info.write_text(lfs_pointer_text(info.read_bytes()))
    message = _raises(root, "lfs_pointer")
    assert "meta/info.json is a git-LFS pointer, not the file" in message and "`git lfs pull`" in message


def test_unknown_url_scheme(tmp_path):
    with pytest.raises(LeRobotImportError) as raised:
        check_dataset("hdfz://cluster/datasets/so101")
    assert raised.value.rule == "url"
    assert "`hdfz://`, a URL scheme no filesystem is known for" in str(raised.value)


# ---- the same checks, end to end: one dataset-level failure, "0 episodes files" ------------------

def test_import_reports_the_real_cause(tmp_path, capsys):
    root = write_v21_layout(tmp_path / "v21")
    (root / "meta" / "episodes.jsonl").unlink()
    rule, words = "codebase_version", ["v2.1", "no meta/episodes.jsonl"]
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    errors = read_errors(out)
    assert [e["rule"] for e in errors] == [rule], errors
    for word in words:
        assert word in errors[0]["message"]
    assert errors[0]["episodes_file"] is None and errors[0]["dataset"] == f"file://{root}"
    totals = read_manifest(out)["totals"]
    assert (totals["episodes_files"], totals["episodes"], totals["errors"]) == (0, 0, 1)
    lines = capsys.readouterr().out.splitlines()
    line = next(x for x in lines if x.startswith(f"file://{root}:"))
    assert "failed - 0/0 episodes, 0 frames, 0 episodes files, 1 error ->" in line, line
    # the cause itself is on the terminal, not only in errors.jsonl
    assert lines[lines.index(line) + 1:lines.index(line) + 3] == ["  codebase_version: 1 error",
                                                                  f"    {errors[0]['message']}"]
    assert not (root / "meta" / "episodes").exists()


@pytest.mark.parametrize("layout", ["folder_of_datasets", "missing_root"])
def test_a_root_that_is_no_dataset_is_refused_before_anything_is_written(tmp_path, layout):
    if layout == "folder_of_datasets":
        shutil.copytree(SAMPLE, tmp_path / "repo" / "so101")
        root, rule, words = tmp_path / "repo", "info_json", ["not a LeRobot dataset", "so101/"]
    else:
        root, rule, words = tmp_path / "nope", "dataset_root", ["does not exist"]
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as raised:
        run_import(root, out)
    message = str(raised.value)
    assert message.startswith(f"error: [{rule}] ") and "\n" not in message
    for word in words:
        assert word in message
    assert not out.exists()


# ---- Hugging Face cache snapshots: every file a symlink into the repository's blobs/ --------------

def write_hf_cache_snapshot(cache: Path, src: Path, repo_id: str = "lerobot/so101", revision: str = "0123abcd") -> Path:
    """`src` as the hub cache holds it: `datasets--ORG--NAME/blobs/<sha256>` and
    `snapshots/<revision>/<path>` symlinks (relative, as huggingface_hub writes them)."""
    repo = cache / ("datasets--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    for path in sorted(p for p in src.rglob("*") if p.is_file() and "expected" not in p.parts[-2]):
        data = path.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / path.relative_to(src)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def test_hf_cache_snapshot_imports(tmp_path):
    root = write_hf_cache_snapshot(tmp_path / "hub", SAMPLE)
    assert (root / "meta" / "info.json").is_symlink()
    out = tmp_path / "out"
    assert run_import(root, out) == 0, read_errors(out)
    totals = read_manifest(out)["totals"]
    assert (totals["episodes_written"], totals["frames"]) == (4, 46)
    reference = tmp_path / "reference"
    assert run_import(SAMPLE, reference) == 0
    ours = pq.read_table(out / "episodes" / "chunk-000" / "file-000.parquet")
    theirs = pq.read_table(reference / "episodes" / "chunk-000" / "file-000.parquet")
    assert ours.schema == theirs.schema
    same = [c for c in ours.column_names if not c.startswith("videos")]  # clips name their MP4's own path
    assert ours.select(same).equals(theirs.select(same))
    value = ours.column("videos").combine_chunks().field("observation.images.front").field("clip")
    for name in ("media", "source", "uri"):  # spql.* extension arrays: step through their storage
        value = getattr(value, "storage", value).field(name)
    assert value[0].as_py() == f"file://{root}/videos/observation.images.front/chunk-000/file-000.mp4"


def test_hf_cache_snapshot_link_outside_blobs_is_refused(tmp_path):
    root = write_hf_cache_snapshot(tmp_path / "hub", SAMPLE)
    data = root / "data" / "chunk-000" / "file-000.parquet"
    elsewhere = tmp_path / "elsewhere.parquet"
    elsewhere.write_bytes(data.read_bytes())
    data.unlink()
    data.symlink_to(elsewhere)
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    rules = {e["rule"] for e in read_errors(out) if e["rule"] != "file_failed"}
    assert rules == {"path_outside_root"}


def test_hf_cache_v21_names_its_repo_id(tmp_path):
    v21 = write_v21_layout(tmp_path / "v21")
    info = json.loads((v21 / "meta" / "info.json").read_text())
    (v21 / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v3.0",
                                                        "data_path": "data/{chunk_index}/{file_index}.parquet",
                                                        "video_path": "videos/{video_key}/{file_index}.mp4"}))
    root = write_hf_cache_snapshot(tmp_path / "hub", v21, repo_id="someone/old_pusht")
    assert hf_repo_id(f"file://{root}") == "someone/old_pusht"
    assert f"`{CONVERTER} --repo-id=someone/old_pusht`" in _raises(root, "episodes_file")


# ---- episodes files under a symlinked chunk folder ------------------------------------------------

def _link_chunk(root: Path, target: Path) -> None:
    chunk = root / "meta" / "episodes" / "chunk-001"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(chunk), str(target))
    chunk.symlink_to(target, target_is_directory=True)


def test_symlinked_chunk_folder_inside_the_root_imports(tmp_path):
    root = Path(shutil.copytree(lerobot_dataset("h264_multi_file"), tmp_path / "ds",
                                ignore=shutil.ignore_patterns("expected*")))
    _link_chunk(root, root / "meta" / "moved" / "chunk-001")
    out = tmp_path / "out"
    assert run_import(root, out) == 0, read_errors(out)
    manifest = read_manifest(out)
    assert sorted(manifest["episodes_files"]) == sorted(check_dataset(str(root)).episodes_files)
    assert manifest["totals"]["episodes_files_imported"] == 5 and manifest["totals"]["episodes_written"] == 10


def test_symlinked_chunk_folder_outside_the_root_fails_its_files(tmp_path):
    root = Path(shutil.copytree(lerobot_dataset("h264_multi_file"), tmp_path / "ds",
                                ignore=shutil.ignore_patterns("expected*")))
    _link_chunk(root, tmp_path / "elsewhere" / "chunk-001")
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    errors = [e for e in read_errors(out) if e["rule"] != "file_failed"]
    assert {e["episodes_file"] for e in errors} == {"meta/episodes/chunk-001/file-000.parquet",
                                                    "meta/episodes/chunk-001/file-001.parquet"}
    assert {e["rule"] for e in errors} == {"path_outside_root"}
    totals = read_manifest(out)["totals"]
    assert totals["episodes_files"] == 5 and totals["episodes_files_imported"] == 3
