"""What an import reports beyond its episodes: warnings for quirks that import fine, a hint where a missing
MP4 really is, one note per dataset that `--skip-videos` imports the rest, each part's size and digest,
counts that agree between errors.jsonl, the manifest and the metrics, and a finish step that always
writes errors.jsonl and manifest.json."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from tests import mp4_factory as MF
from tests.dataset_factory import DatasetSpec, edit_episodes, edit_info, write_dataset
from tests.helpers import read_errors, read_manifest, run_import
from transforms.work import finish
from transforms.episode import clips
from transforms.base.errors import LeRobotImportError

CAM = "observation.images.cam"
MP4 = f"videos/{CAM}/chunk-000/file-000.mp4"
FILE0 = "meta/episodes/chunk-000/file-000.parquet"
FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [2], "names": ["a", "b"]},
    CAM: {"dtype": "video", "shape": [48, 64, 3], "names": ["height", "width", "channels"],
          "info": {"video.codec": "h264", "video.fps": 10, "video.pix_fmt": "yuv420p"}},
}


@pytest.fixture(scope="module")
def h264(tmp_path_factory) -> Path:
    """30 frames of H.264 at 10 fps: episodes of 10, 12 and 8 frames in one file."""
    return MF.encode(tmp_path_factory.mktemp("mp4") / "cam.mp4", codec="libx264", frames=30, fps=10)


def _dataset(root: Path, mp4: Path) -> Path:
    return write_dataset(root, DatasetSpec(lengths=(10, 12, 8), fps=10, features=FEATURES, video_files={CAM: mp4}))


def _edit_column(root: Path, name: str, values: list) -> None:
    edit_episodes(root, lambda t: t.set_column(t.schema.get_field_index(name), name, pa.array(values, pa.float64())))


def test_clips_one_frame_short_import_with_one_warning_per_camera_saying_no_frame_is_lost(tmp_path, h264):
    """Clips that end one frame short (`(length - 1) / fps`, as published datasets write them): one warning
    for the camera with the count, saying what holds: the reader still returns every frame, the last one
    pixel-exact (here compared with the frames of a dataset whose clips end where they should)."""
    exact = _dataset(tmp_path / "exact", h264)
    root = _dataset(tmp_path / "ds", h264)
    to = f"videos/{CAM}/to_timestamp"
    _edit_column(root, to, [0.9, 2.1, 2.9])  # (length - 1) / fps after each start: one frame short
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    manifest = read_manifest(out)
    assert manifest["status"] == "imported" and manifest["totals"]["warnings"] == 1
    assert [(w["episode_index"], w["what"], w["by"], w["file"]) for w in manifest["warnings"]] == [
        (0, "clip_end_short", "0.1 s (1 frame)", MP4)]
    assert manifest["warnings"][0]["message"] == (
        f"camera `{CAM}`: the clips of every episode end 0.1 s (1 frame) before the episode's last frame ends "
        "(to_timestamp = from_timestamp + (length - 1) / fps: the last frame's start, not its end); first: episode "
        "0 ends its clip at 0.9 s, its frames at 0 + 10 / 10 = 1 s. No frame is lost: readers find each frame at "
        "from_timestamp + timestamp and read the episode's frames past to_timestamp; only a reader that stops at "
        "to_timestamp would miss them")
    assert read_errors(out) == []
    pytest.importorskip("torch")
    from transforms.reader import ImportedFrames
    exact_out = tmp_path / "exact_out"
    assert run_import(exact, exact_out) == 0
    short, whole = ImportedFrames(str(out)), ImportedFrames(str(exact_out))
    for i in (9, 21, 29):  # the last frame of each episode
        assert np.array_equal(np.asarray(short[i][CAM]), np.asarray(whole[i][CAM]))


def test_clip_starts_off_the_file_frames_warn_with_the_drift(tmp_path, h264):
    root = _dataset(tmp_path / "ds", h264)
    _edit_column(root, f"videos/{CAM}/from_timestamp", [0.0, 1.2, 2.2])  # written 1.0, 2.2: episode 1 is 2 late
    _edit_column(root, f"videos/{CAM}/to_timestamp", [1.0, 2.4, 3.0])
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    warnings = read_manifest(out)["warnings"]
    assert [(w["episode_index"], w["what"], w["by"]) for w in warnings] == [(1, "start_drift", "+0.2 s (2 frames)")]
    assert "the 10 frames before it in that file end at 1 s" in warnings[0]["message"]


def test_declared_codec_other_than_the_file_warns(tmp_path, h264):
    root = _dataset(tmp_path / "ds", h264)
    edit_info(root, lambda info: info["features"][CAM]["info"].update({"video.codec": "hevc"}))
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    manifest = read_manifest(out)
    assert [(w["what"], w["by"], w["file"], w["episode_index"]) for w in manifest["warnings"]] == [
        ("codec_mismatch", "declared hevc, found avc1 (h264)", MP4, None)]
    assert manifest["totals"]["warnings"] == 1


def test_mp4s_under_a_sibling_folder_are_named_and_skip_videos_is_said_once(tmp_path, h264):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(10, 12, 8), fps=10, features=FEATURES,
                                                      episodes_per_meta_file=1, video_files={CAM: h264}))
    (root / "videos").rename(root / "video")
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    missing = [e for e in read_errors(out) if e["rule"] == "file_missing"]
    assert [e["episode_index"] for e in missing] == [0, 1, 2]
    assert all(f"a file of that name is at video/{CAM}/chunk-000/file-000.mp4" in e["message"] and
               "the dataset's folder is `video/` where the path template says `videos/`" in e["message"]
               for e in missing)
    notes = read_manifest(out)["notes"]
    assert len(notes) == 1 and notes[0].startswith(f"camera `{CAM}`: 1 MP4 file is missing or unusable "
                                                   f"(file_missing; first: {MP4})")
    assert "--skip-videos imports the dataset without its video features" in notes[0]
    assert run_import(root, tmp_path / "skipped", "--skip-videos") == 0


def test_manifest_records_each_part_size_rows_and_digest(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(4, 6, 5, 3), episodes_per_data_file=2))
    out = tmp_path / "out"
    md = pq.ParquetFile(root / "data" / "chunk-000" / "file-000.parquet").metadata
    limit = sum(md.row_group(g).column(j).total_compressed_size  # episodes 0-1's bytes: a part per data file
                for g in range(md.num_row_groups) for j in range(md.num_columns))
    assert run_import(root, out, "--data-span-limit", str(limit)) == 0
    entry = read_manifest(out)["episodes_files"][FILE0]
    assert [p["path"] for p in entry["part_files"]] == entry["parts"] and len(entry["parts"]) == 2
    for record in entry["part_files"]:
        data = (out / record["path"]).read_bytes()
        assert record["bytes"] == len(data) and record["sha256"] == hashlib.sha256(data).hexdigest()
        assert record["rows"] == pq.ParquetFile(out / record["path"]).metadata.num_rows
    assert [p["rows"] for p in entry["part_files"]] == [2, 2]


def _run_with_counters(root: Path, out: Path) -> dict[str, int]:
    from pipelines.import_lerobot import build_pipeline, config_from_options
    from pipelines.options import ImportOptions
    options = PipelineOptions(["--dataset", str(root), "--output", str(out), "--runner", "FnApiRunner"])
    result = build_pipeline(options, config_from_options(options.view_as(ImportOptions)), "t0").run()
    result.wait_until_finish()
    found = result.metrics().query(MetricsFilter().with_namespace("lerobot_import"))["counters"]
    return {c.key.metric.name: c.committed for c in found}


def test_the_errors_counter_equals_the_manifest_and_errors_jsonl(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4, 5, 2), episodes_per_meta_file=2))
    edit_episodes(root, lambda t: t.set_column(t.schema.get_field_index("length"), "length",
                                               pa.array([3, 5], pa.int64())))  # episode 1: 4 frames, says 5
    out = tmp_path / "out"
    counters = _run_with_counters(root, out)
    errors = read_errors(out)
    assert [(e["episode_index"], e["rule"]) for e in errors] == [(0, "file_failed"), (1, "length_mismatch")]
    assert counters["errors"] == read_manifest(out)["totals"]["errors"] == len(errors)
    assert counters["episodes"] == 2 and counters.get("datasets_failed") == 1


def test_a_dataset_failing_before_its_episodes_files_counts_none(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3,)))
    for path in sorted((root / "meta" / "episodes").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    manifest = read_manifest(out)
    assert manifest["totals"]["episodes_files"] == 0 and manifest["episodes_files"] == {}
    assert manifest["totals"]["errors"] == 1 == len(read_errors(out))


def test_a_memory_error_while_finishing_still_writes_errors_and_manifest(tmp_path, monkeypatch):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4)))

    def out_of_memory(root):
        raise MemoryError("simulated while reading meta/info.json")

    monkeypatch.setattr(finish, "info_sha256", out_of_memory)
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    errors = read_errors(out)
    assert [e["rule"] for e in errors] == ["internal"]
    assert "MemoryError" in errors[0]["message"] and "simulated while reading" in errors[0]["message"]
    manifest = read_manifest(out)
    assert manifest["status"] == "failed" and manifest["totals"]["errors"] == 1
    assert manifest["episodes_files"][FILE0]["status"] == "imported"  # the episodes themselves imported
    assert (out / "episodes" / "chunk-000" / "file-000.parquet").exists()


def test_a_media_index_part_that_cannot_be_written_fails_the_dataset_not_the_run(tmp_path, h264, monkeypatch):
    from transforms import read_mp4_facts

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(read_mp4_facts, "update_media_index_shard", full_disk)
    root = _dataset(tmp_path / "ds", h264)
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    errors = read_errors(out)
    shard = f"media_index/videos/{CAM}/chunk-000.parquet"
    assert [(e["rule"], e["file"], e["episodes_file"]) for e in errors] == [("internal", shard, None)]
    assert "No space left on device" in errors[0]["message"]
    manifest = read_manifest(out)
    assert manifest["status"] == "failed" and manifest["totals"]["errors"] == 1
    assert manifest["episodes_files"][FILE0]["status"] == "imported" and manifest["media_index"] == []
    assert manifest["video_versions"] == {}  # its MP4 is not accounted for: the next run reads it again
    monkeypatch.undo()
    assert run_import(root, out) == 0
    manifest = read_manifest(out)
    assert manifest["episodes_files"][FILE0]["status"] == "imported" and manifest["media_index"] == [shard]


@pytest.mark.parametrize("tail", ['"deep": ' + "[" * 100_000 + "]" * 100_000, '"big": ' + "9" * 5000])
def test_an_info_json_too_deep_or_too_long_still_gets_errors_and_manifest(tmp_path, tail):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4), episodes_per_meta_file=1))
    info = root / "meta" / "info.json"
    info.write_text(info.read_text().rstrip()[:-1] + ", " + tail + "}")
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    errors = read_errors(out)
    assert {e["rule"] for e in errors} == {"info_json", "file_failed"} and len(errors) == 4
    manifest = read_manifest(out)
    assert manifest["status"] == "failed" and manifest["totals"]["errors"] == 4
    assert manifest["info_json_sha256"] == hashlib.sha256(info.read_bytes()).hexdigest()


def test_clip_times_beyond_int64_nanoseconds_are_refused(tmp_path, h264):
    root = _dataset(tmp_path / "ds", h264)
    _edit_column(root, f"videos/{CAM}/from_timestamp", [0.0, 1.0, 9.3e9])
    _edit_column(root, f"videos/{CAM}/to_timestamp", [1.0, 2.2, 9.3e9 + 0.8])
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    rows = [e for e in read_errors(out) if e["rule"] == "timestamps"]
    assert rows and rows[0]["episode_index"] == 2 and CAM in rows[0]["message"]
    assert not (out / "episodes" / "chunk-000" / "file-000.parquet").exists()


def test_seconds_to_ns_never_wraps():
    ns = clips.seconds_to_ns(np.array([0.0, 1.5e-9, -2.5e-9, 9.2e9])).tolist()
    assert ns == [0, 2, -3, 9_200_000_000_000_000_000]
    for bad in (9.3e9, -9.3e9, float("nan"), float("inf")):
        with pytest.raises(LeRobotImportError, match="does not fit in nanoseconds") as info:
            clips.seconds_to_ns(np.array([1.0, bad]))
        assert info.value.rule == "timestamps"


def test_clip_times_name_the_episode_and_camera():
    from transforms.lerobot.episodes_files import VideoSlice
    slices = [VideoSlice(CAM, MP4, 0.0, 1.0), VideoSlice(CAM, MP4, 1e10, 1e10 + 1)]
    with pytest.raises(LeRobotImportError, match=f"episode 8: camera `{CAM}` clip spans 10000000000.0") as info:
        clips.clip_times_ns(slices, [7, 8])
    assert info.value.rule == "timestamps" and info.value.episode_index == 8
    start, end = clips.clip_times_ns(slices[:1], [7])
    assert start.tolist() == [0] and end.tolist() == [1_000_000_000]


def test_the_manifest_tool_version_is_the_installed_package_version(tmp_path):
    import importlib.metadata
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(2,)))
    assert run_import(root, tmp_path / "out") == 0
    tool = read_manifest(tmp_path / "out")["tool"]
    assert tool == {"name": "lerobot-beam-import", "version": importlib.metadata.version("lerobot-beam-import")}
    assert json.dumps(tool)  # plain JSON values
