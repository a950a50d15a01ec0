"""`lerobot-import plan`: what a run would do, from generated metadata (sparse data files and MP4s) and
from a real import of the sample; and that a plan writes nothing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pipelines import plan
from tests.bench.bench_incremental import DATA_BYTES_PER_FRAME, write_metadata_dataset
from tests.dataset_factory import DATA_PATH, EPISODES_PATH
from tests.helpers import SAMPLE, copy_dataset, run_import
from transforms.output import lease
from transforms.output import paths
from transforms.lerobot import sources

OPTIONS = plan.output_options(plan.PlanSettings())
EF = "meta/episodes/chunk-000/file-{:03d}.parquet"


def _generated(tmp_path: Path, episodes: int = 1000) -> Path:
    """`episodes` x 150 frames, 50 per episodes file, one data file per 1000 episodes, one MP4 per camera and
    100 episodes (2 cameras)."""
    return write_metadata_dataset(tmp_path / "ds", episodes=episodes)


def _record_import(p: plan.DatasetPlan, out: Path, *, ratio: float = 0.5) -> dict:
    """The manifest an incremental import of plan `p` leaves (every episodes file imported, sources and
    MP4 versions recorded), with output bytes at `ratio` per data byte."""
    files = {f.episodes_file: {"status": "imported", "parts": [f"episodes/{f.episodes_file[len('meta/episodes/'):]}"],
                               "episodes": f.episodes, "data_bytes": f.data_bytes,
                               "bytes": int(f.data_bytes * ratio), **f.sources.to_manifest()} for f in p.files}
    doc = {"dataset": p.dataset, "options": p.options, "status": "imported", "episodes_files": files,
           "video_versions": p.video_versions, "media_index_layout": paths.MEDIA_INDEX_LAYOUT,
           "media_index_files": []}
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_text(json.dumps(doc))
    for entry in files.values():  # the parts are there (a part missing is a damage the run would repair)
        for part in entry["parts"]:
            (out / part).parent.mkdir(parents=True, exist_ok=True)
            (out / part).touch()
    return doc


def _touch(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_first_import_plan_of_generated_metadata(tmp_path):
    root = _generated(tmp_path)
    out = tmp_path / "out"
    p = plan.plan_dataset(str(root), str(out), OPTIONS)
    data_size = 1000 * 150 * DATA_BYTES_PER_FRAME
    assert p.counts == {"import": 20, "unchanged": 0, "removed": 0} and p.problem is None
    assert (p.parts, p.episodes) == (20, 1000)
    assert p.data_bytes == 20 * data_size  # every episodes file spans the one data file
    assert p.data_bytes_to_read == data_size
    assert len(p.mp4s_to_read) == 20 and p.mp4s_to_read[0] == "videos/observation.images.cam0/chunk-000/file-000.mp4"
    assert (p.output_ratio, p.ratio_source) == (plan.DEFAULT_OUTPUT_RATIO, "default")
    assert p.decoded_bytes == p.data_bytes  # its data file is no Parquet: its size spread over its rows
    assert p.estimated_output_bytes == int(round(p.decoded_bytes * plan.DEFAULT_OUTPUT_RATIO))
    assert {f.reason for f in p.files} == {"new"} and p.lease is None
    assert not out.exists(), "a plan writes nothing"


def test_grown_dataset_plans_only_the_new_and_changed_files(tmp_path):
    root = _generated(tmp_path)
    out = tmp_path / "out"
    _record_import(plan.plan_dataset(str(root), str(out), OPTIONS), out)
    before = sorted(p.name for p in out.rglob("*"))
    same = plan.plan_dataset(str(root), str(out), OPTIONS)
    assert same.counts == {"import": 0, "unchanged": 20, "removed": 0} and same.mp4s_to_read == ()

    write_metadata_dataset(root, episodes=100, first_episode=1000)  # two new episodes files, data file 1, 2 MP4s
    _touch(root / EPISODES_PATH.format(chunk_index=0, file_index=19))  # the last one rewritten (finalize)
    (root / EPISODES_PATH.format(chunk_index=0, file_index=0)).unlink()
    p = plan.plan_dataset(str(root), str(out), OPTIONS)
    changed = [(f.episodes_file, f.action, f.reason) for f in p.files if f.action != sources.UNCHANGED]
    assert changed == [(EF.format(0), "removed", "gone"), (EF.format(19), "import", "sources changed"),
                       (EF.format(20), "import", "new"), (EF.format(21), "import", "new")]
    assert p.counts == {"import": 3, "unchanged": 18, "removed": 1}
    assert (p.parts, p.episodes) == (3, 150)
    new_data = 100 * 150 * DATA_BYTES_PER_FRAME
    assert p.data_bytes == 1000 * 150 * DATA_BYTES_PER_FRAME + 2 * new_data
    assert p.mp4s_to_read == ("videos/observation.images.cam0/chunk-000/file-010.mp4",
                              "videos/observation.images.cam1/chunk-000/file-010.mp4")
    assert (p.output_ratio, p.ratio_source) == (pytest.approx(0.5), "last import")
    assert p.estimated_output_bytes == pytest.approx(p.data_bytes * 0.5, abs=1)
    removed = next(f for f in p.files if f.action == sources.REMOVED)
    assert removed.parts == 1
    assert sorted(p.name for p in out.rglob("*")) == before, "a plan writes nothing"


def test_a_touched_data_file_plans_the_files_that_read_it(tmp_path):
    root = write_metadata_dataset(tmp_path / "ds", episodes=600, episodes_per_data_file=200)
    out = tmp_path / "out"
    _record_import(plan.plan_dataset(str(root), str(out), OPTIONS), out)
    _touch(root / DATA_PATH.format(chunk_index=0, file_index=1))  # episodes 200..399: episodes files 4..7
    p = plan.plan_dataset(str(root), str(out), OPTIONS)
    assert [f.episodes_file for f in p.files if f.action == "import"] == [EF.format(i) for i in range(4, 8)]
    assert p.mp4s_to_read == ()  # the MP4s did not change: their MediaIndex rows are reused


def test_parts_and_the_data_span_limit(tmp_path):
    root = write_metadata_dataset(tmp_path / "ds", episodes=100, episodes_per_data_file=10)
    per_file = 10 * 150 * DATA_BYTES_PER_FRAME  # each episodes file spans 5 data files of this size
    # The data files are sparse, not Parquet: without a footer, a file's size is spread over its episodes.
    options = plan.output_options(plan.PlanSettings(data_span_limit=2 * per_file))
    p = plan.plan_dataset(str(root), str(tmp_path / "out"), options)
    assert (p.parts, p.data_bytes) == (2 * 3, 2 * 5 * per_file)
    strict = plan.output_options(plan.PlanSettings(one_part=True, data_span_limit=2 * per_file))
    p = plan.plan_dataset(str(root), str(tmp_path / "out"), strict)
    assert all(f.problem.startswith("[data_span] ") for f in p.files)
    assert "import without --one-part to write this episodes file in parts" in plan.render(p)


def test_plan_after_a_real_import(tmp_path):
    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    assert run_import(dataset, out) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["episodes_files"][EF.format(0)]
    p = plan.plan_dataset(str(dataset), str(out), OPTIONS)
    recorded_sources = "source_digest" in entry
    (f,) = p.files
    assert (f.action, f.reason) == (("unchanged", "unchanged") if recorded_sources else
                                    ("import", "no recorded sources"))
    assert (p.output_ratio, p.ratio_source) == (pytest.approx(entry["bytes"] / entry["data_bytes"]), "last import")
    if not recorded_sources:  # the pipeline does not record sources yet: record them as it will
        entry.update(f.sources.to_manifest())
        (out / "manifest.json").write_text(json.dumps(manifest))
        assert plan.plan_dataset(str(dataset), str(out), OPTIONS).counts["unchanged"] == 1
    assert plan.plan_dataset(str(dataset), str(out), OPTIONS, force=True).files[0].reason == "forced"
    other = plan.output_options(plan.PlanSettings(inline_index=True))
    assert plan.plan_dataset(str(dataset), str(out), other).files[0].reason == "sources changed"


def test_command_line_single_bulk_and_json(tmp_path, capsys):
    base = tmp_path / "datasets"
    for name in ("alpha", "beta"):
        write_metadata_dataset(base / name, episodes=100)
    out = tmp_path / "out"
    assert plan.run(["--dataset", str(base / "alpha"), "--output", str(out), "--runner", "FnApiRunner"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (f"file://{base / 'alpha'} -> file://{out}: 2 episodes files to import, 0 unchanged, "
                          "0 to remove")
    assert printed[1].startswith("  would write 2 parts of 100 episodes, reading 2.2 MB of data files and the "
                                 "MediaIndex of 2 MP4s; ~2.9 MB out (0.65 output bytes per decoded data byte, default)")
    assert printed[2] == f"  import    {EF.format(0)} (new): 50 episodes, 1 parts, 2.2 MB of data"
    assert plan.run(["--datasets", str(base / "*"), "--output", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(Path(d["dataset"]).name, Path(d["output"]).name, d["counts"]["import"]) for d in doc] == [
        ("alpha", "alpha", 2), ("beta", "beta", 2)]
    assert not out.exists()


def test_command_line_unimportable_dataset_and_lease(tmp_path, capsys):
    root = _generated(tmp_path, episodes=100)
    out = tmp_path / "out"
    held = lease.acquire(str(out), run_id="nightly-7", job="scheduler")
    assert plan.run(["--dataset", str(root), "--output", str(out)]) == 0
    assert "  lease: run nightly-7 (host " in capsys.readouterr().out
    lease.release(held)
    (root / "meta" / "info.json").unlink()
    assert plan.run(["--dataset", str(root), "--output", str(out)]) == 1
    assert "  cannot import: meta/info.json does not exist under file://" in capsys.readouterr().out
    shutil.rmtree(root / "meta")
    with pytest.raises(SystemExit, match="is the dataset root"):
        plan.run(["--dataset", str(root), "--output", str(root)])


def test_estimate_does_not_depend_on_the_data_files_row_groups(tmp_path):
    """The same frames in one row group per episode and in one row group per file (LeRobot's first v3 writer)
    take other bytes on disk (a dictionary per column chunk) but the same decoded bytes, from which a plan
    without an earlier import estimates the output: one estimate for both, and both imports write the same."""
    from tests.dataset_factory import DatasetSpec, write_dataset
    features = {"observation.state": {"dtype": "float32", "shape": [16], "names": None},
                "action": {"dtype": "float32", "shape": [16], "names": None}}
    lengths = (150, 230, 310, 180) * 5
    plans, outputs = {}, {}
    for layout, rows_per_group in (("episode", None), ("file", 1 << 20)):
        root = write_dataset(tmp_path / layout, DatasetSpec(lengths=lengths, features=features,
                                                            episodes_per_meta_file=10, rows_per_group=rows_per_group))
        plans[layout] = plan.plan_dataset(str(root), str(tmp_path / f"out-{layout}"), OPTIONS)
        assert run_import(root, tmp_path / f"out-{layout}") == 0
        outputs[layout] = json.loads((tmp_path / f"out-{layout}" / "manifest.json").read_text())["totals"]["bytes"]
    episode, whole = plans["episode"], plans["file"]
    assert episode.data_bytes != whole.data_bytes  # on disk the layouts differ
    # decoded: per frame 2 x 16 float32, float32 timestamp, int64 frame_index, episode_index, index, task_index
    assert episode.decoded_bytes == whole.decoded_bytes == sum(lengths) * (2 * 16 * 4 + 4 + 4 * 8)
    assert [f.decoded_bytes for f in whole.files] == [sum(lengths[:10]) * 164, sum(lengths[10:]) * 164]
    assert episode.ratio_source == whole.ratio_source == "default"
    assert episode.estimated_output_bytes == whole.estimated_output_bytes == round(
        sum(lengths) * 164 * plan.DEFAULT_OUTPUT_RATIO)
    assert outputs["episode"] == outputs["file"]
