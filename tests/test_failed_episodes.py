"""Failures of many episodes cross the pipeline as a few records and become errors.jsonl rows only as it is
written: a v2.x group whose chunk folders are gone, a failed episodes file's `file_failed` rows.

Without this, each of hundreds of thousands of episodes was one record (two, with two cameras) pickled
through every shuffle after planning, and errors.jsonl was built as one string in memory.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as _Pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import lerobot_dataset, read_errors, read_manifest, run_import
from tests.v21_repack import repack_v21
from transforms.base.errors import FailureRecord, LeRobotImportError
from transforms.episode.outcomes import (FileFailed, FilesMissing, episode_failures_from_json, episode_failures_json,
                                         failed_file)
from transforms.work.messages import ImportConfig
from transforms.output import writes
from transforms.plan_episodes_files import PlanEpisodesFiles

GROUP = "meta/episodes.jsonl:chunk-000"
CAMERAS = ("observation.images.side", "observation.images.top")


def _gone_chunks(tmp_path: Path, episodes: int) -> Path:
    """The corpus h264 dataset in v2.1, its data/ and videos/ removed, listing `episodes` episodes in chunks of
    1,000 (so every chunk folder it names is gone)."""
    root = repack_v21(lerobot_dataset("h264_multi_file"), tmp_path / "v21")
    shutil.rmtree(root / "data")
    shutil.rmtree(root / "videos")
    info = json.loads((root / "meta" / "info.json").read_text())
    (root / "meta" / "info.json").write_text(json.dumps({**info, "chunks_size": 1000}))
    (root / "meta" / "episodes.jsonl").write_text("".join(
        json.dumps({"episode_index": i, "tasks": ["pick"], "length": 10}) + "\n" for i in range(episodes)))
    return root


def _video_row(root: str, episodes_file: str, ep: int, camera: str) -> FailureRecord:
    """The row the MP4 step writes for a missing MP4 of episode `ep` (as it did for every one of them)."""
    rel = f"videos/chunk-{ep // 1000:03d}/{camera}/episode_{ep:06d}.mp4"
    return LeRobotImportError("file_missing", f"video file {rel} does not exist (expected at {root}/{rel})",
                              file=rel, episode_index=ep).with_context(dataset=root,
                                                                       episodes_file=episodes_file).to_record()


def test_a_gone_chunk_folder_leaves_its_group_at_planning_as_one_record(tmp_path):
    """1,000 episodes of a group whose chunk folders are gone: no clip use (no MP4 is asked for), the part's
    header holds none of their rows and one FilesMissing for all of them, the MP4s are reported one record
    per camera; every episode is still planned (listed, and checked for duplicates)."""
    root = "file://" + str(_gone_chunks(tmp_path, 1000))
    config = ImportConfig(targets=((root, "file://" + str(tmp_path / "out")),))
    with _Pipeline(runner="DirectRunner") as p:
        plans = p | beam.Create([(root, GROUP, config.targets[0][1])]) | PlanEpisodesFiles(config)
        assert_that(plans.clip_uses | beam.combiners.Count.Globally(), equal_to([0]), label="uses")
        assert_that(plans.to_parts | beam.MapTuple(lambda key, i: (
            key, len(i.headers[0].rows), len(i.headers[0].plan.positions),
            [(type(f).__name__, f.episodes, sorted((o.what, o.video_key) for o in f.files))
             for f in i.headers[0].episode_failures])),
            equal_to([((root, GROUP, 0), 0, 1000,
                       [("FilesMissing", ((0, 1000),), [("video file", c) for c in CAMERAS])])]), label="parts")
        assert_that(plans.reports | beam.FlatMapTuple(lambda r, rep: [
            (f.camera, f.file, f.count) for f in rep.mp4_failures] + [(c.episodes, c.episode_ranges)
                                                                      for c in rep.file_counts]),
            equal_to([(c, f"videos/chunk-000/{c}/episode_000000.mp4", 1000) for c in CAMERAS]
                     + [(1000, ((0, 1000),))]), label="reports")


def test_files_missing_expands_to_the_rows_each_reader_wrote(tmp_path):
    """A FilesMissing record's rows are the MP4 step's rows for those episodes, in errors.jsonl's order; with
    its data folder alone gone an episode's row names its data file, as the part writer's does."""
    from transforms.lerobot.dataset import read_info
    root = "file://" + str(_gone_chunks(tmp_path, 1500))
    info = read_info(root)
    from transforms.lerobot.v2 import OwnFile
    videos = tuple(OwnFile("video file", info.video_path, 1000, c) for c in CAMERAS)
    record = FilesMissing(root, GROUP, ((3, 5), (998, 1001)), videos)
    assert record.rows == 10
    assert list(record.records()) == [_video_row(root, GROUP, ep, c) for ep in (3, 4, 998, 999, 1000)
                                      for c in CAMERAS]
    data = FilesMissing(root, GROUP, ((7, 8),), (OwnFile("data file", info.data_path, 1000),))
    (row,) = data.records()
    assert (row.episode_index, row.file, row.rule) == (7, "data/chunk-000/episode_000007.parquet", "file_missing")
    assert row.message == (f"[file_missing] dataset {root}, episodes file {GROUP}, episode 7, file "
                           f"data/chunk-000/episode_000007.parquet: data file data/chunk-000/episode_000007.parquet "
                           f"does not exist (expected at {root}/data/chunk-000/episode_000007.parquet)")
    assert episode_failures_from_json(json.loads(json.dumps(episode_failures_json(record)))) == record


class _Sink(io.BytesIO):
    def __init__(self):
        super().__init__()
        self.writes = []

    def write(self, data):
        self.writes.append(len(data))
        return super().write(data)


def test_errors_jsonl_is_written_streaming_and_equals_the_rows_one_by_one():
    """50,000 episodes in one record beside single rows: the file holds every row once, in the order of the rows
    one by one (sorted by their key), and is written in batches, never as one string."""
    root, other = "file:///d", "meta/episodes.jsonl:chunk-001"
    from transforms.lerobot.info import PathTemplate
    from transforms.lerobot.v2 import OwnFile
    template = PathTemplate("video_path",
                            "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
                            ("episode_chunk", "video_key", "episode_index"))
    many = FilesMissing(root, GROUP, ((0, 50_000),), tuple(OwnFile("video file", template, 1000, c) for c in CAMERAS))
    single = [_video_row(root, GROUP, 17, CAMERAS[0]),  # the same row as one of the record's: written once
              FailureRecord(root, other, 3, "x.parquet", "data_file", "[data_file] broken"),
              FailureRecord(root, None, None, None, "quality", "[quality] dataset")]
    sink = _Sink()
    assert writes.write_errors_jsonl(sink, single + [many]) == 100_002
    expected = sorted({r.sort_key(): r for r in single + [_video_row(root, GROUP, ep, c) for ep in range(50_000)
                                                           for c in CAMERAS]}.values(), key=FailureRecord.sort_key)
    assert sink.getvalue() == "".join(json.dumps(r.to_json_dict(), sort_keys=True) + "\n"
                                      for r in expected).encode()
    assert len(sink.writes) > 10 and max(sink.writes) < 4 << 20


def test_a_failed_file_of_many_episodes_holds_its_file_failed_rows_as_one_record():
    """A v3 episodes file of 20,000 episodes whose data file is gone: one FileFailed for the 19,999 episodes
    without an error of their own; the rows are the ones each episode got before, word for word."""
    root, rel = "file:///d", "meta/episodes/chunk-000/file-000.parquet"
    cause = LeRobotImportError("file_missing", "data file data/chunk-000/file-000.parquet does not exist",
                               file="data/chunk-000/file-000.parquet", episode_index=0, dataset=root,
                               episodes_file=rel).to_record()
    outcome = failed_file(root, rel, tuple(range(20_000)), [cause])
    assert outcome.failures == (cause,)
    (many,) = outcome.episode_failures
    assert isinstance(many, FileFailed) and many.episodes == ((1, 20_000),)
    assert (outcome.episodes, outcome.episodes_failed, outcome.failure_count) == (20_000, 20_000, 20_000)
    rows = list(outcome.rows())
    assert rows[0] == cause and len(rows) == 20_000
    assert rows[19_999] == FailureRecord(
        root, rel, 19_999, rel, "file_failed",
        f"[file_failed] dataset {root}, episodes file {rel}, episode 19999: not imported because episode 0 of the "
        "same episodes file failed ([file_missing] in data/chunk-000/file-000.parquet; its row says why): an "
        "episodes file imports all its episodes or none, so fixing episode 0 imports this one too")
    # a duplicated episode_index keeps its own rows, one per occurrence
    twice = failed_file(root, rel, (0, 1, 1, 2), [cause])
    assert [(r.episode_index, "row 2 of 2" in r.message) for r in twice.rows()] == [
        (0, False), (1, False), (1, True), (2, False)]


@pytest.mark.parametrize("gone", [("data/chunk-001", "videos/chunk-003"), ("videos/chunk-002/observation.images.top",)])
def test_gone_chunk_folders_are_named_episode_by_episode_end_to_end(tmp_path, gone, capsys):
    """The corpus h264 dataset in v2.1 (five groups of two episodes) with chunk folders removed: each episode of
    those groups fails alone, named with its own files (an MP4 missing hides its data file, as reads go); the
    other groups import; the summary and the manifest count them as before, and say --skip-videos."""
    root = repack_v21(lerobot_dataset("h264_multi_file"), tmp_path / "v21")
    for folder in gone:
        shutil.rmtree(root / folder)
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    rows = [(e["episodes_file"], e["episode_index"], e["rule"], e["file"]) for e in read_errors(out)]
    if "data/chunk-001" in gone:
        expected = [("meta/episodes.jsonl:chunk-001", ep, "file_missing", f"data/chunk-001/episode_{ep:06d}.parquet")
                    for ep in (2, 3)]
        expected += [("meta/episodes.jsonl:chunk-003", ep, "file_missing",
                      f"videos/chunk-003/{c}/episode_{ep:06d}.mp4") for ep in (6, 7) for c in CAMERAS]
        failed = {"meta/episodes.jsonl:chunk-001", "meta/episodes.jsonl:chunk-003"}
    else:
        expected = [("meta/episodes.jsonl:chunk-002", ep, "file_missing",
                     f"videos/chunk-002/observation.images.top/episode_{ep:06d}.mp4") for ep in (4, 5)]
        failed = {"meta/episodes.jsonl:chunk-002"}
    assert rows == expected
    first = read_errors(out)[0]
    assert first["message"].endswith(f"does not exist (expected at file://{root}/{first['file']})")
    manifest = read_manifest(out)
    assert {rel: (e["status"], e["episodes_written"], e["episodes_failed"], e["failures"])
            for rel, e in manifest["episodes_files"].items()} == {
        rel: ("imported", 0, 2, sum(r[0] == rel for r in expected)) if rel in failed else ("imported", 2, 0, 0)
        for rel in (f"meta/episodes.jsonl:chunk-{c:03d}" for c in range(5))}
    assert manifest["totals"]["errors"] == len(expected)
    printed = capsys.readouterr().out
    assert f"{2 * len(failed)} episodes not imported, each on its own missing or broken files" in printed
    if any(f.startswith("videos") for f in gone):
        assert "note: --skip-videos imports the dataset without its video features" in printed


def test_a_renamed_chunk_folder_is_still_named_file_by_file_with_where_it_is(tmp_path):
    """A chunk folder that is gone because it was renamed is left to the MP4 step: each row says where the file
    is (the group is not left out at planning, whose rows could not say it)."""
    root = repack_v21(lerobot_dataset("h264_multi_file"), tmp_path / "v21")
    (root / "videos" / "chunk-001").rename(root / "videos" / "chunk_001")
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    rows = read_errors(out)
    assert [(e["episode_index"], e["file"].split("/")[2]) for e in rows] == [
        (2, CAMERAS[0]), (2, CAMERAS[1]), (3, CAMERAS[0]), (3, CAMERAS[1])]
    assert all("a file of that name is at videos/chunk_001/" in e["message"] for e in rows)


def _group_sources(tmp_path: Path, episodes: int):
    from transforms.lerobot import sources
    root = "file://" + str(_gone_chunks(tmp_path, episodes))
    return root, {f.episodes_file: f for f in sources.scan_dataset(root, {}).files}


def test_a_group_s_sources_cross_the_pipeline_in_a_size_that_does_not_grow_with_its_episodes(tmp_path):
    """A v2.x group's data files and MP4s are held as what renders them: its sources pickle to the same few
    hundred bytes for 10 episodes as for 1,000 (not 3,000 paths), and still list every path, sorted, as the
    references of its rows do."""
    import dataclasses
    import pickle
    from transforms.lerobot.sources import references
    _, small = _group_sources(tmp_path / "small", 10)
    root, large = _group_sources(tmp_path / "large", 3000)
    sizes = [len(pickle.dumps(dataclasses.replace(f[GROUP], rows=None))) for f in (small, large)]
    assert max(sizes) < 2000 and abs(sizes[0] - sizes[1]) < 16, sizes  # a bigger episode number, no more
    src = large["meta/episodes.jsonl:chunk-002"]
    assert src.rows is None  # planning reads a group's rows again: the check holds no dataset's worth of rows
    from transforms.lerobot import v2
    from transforms.lerobot.dataset import read_info
    data, videos = references(v2.group_rows(v2.load_episodes(root), read_info(root), src.episodes_file))
    assert (len(data), len(videos)) == (1000, 2000)
    assert tuple(src.data_files) == data and tuple(src.video_files) == videos
    assert src.video_files[:2] == ["videos/chunk-002/observation.images.side/episode_002000.mp4",
                                   "videos/chunk-002/observation.images.side/episode_002001.mp4"]
    entry = src.to_manifest()
    assert entry["source_data_files"] == list(data) and entry["source_video_files"] == list(videos)
    # the finish keeps them compact; the manifest's writer renders them as it writes the entry
    sink = io.BytesIO()
    writes.write_manifest(sink, {"episodes_files": {src.episodes_file: src.to_manifest(rendered=False)}})
    written = json.loads(sink.getvalue())["episodes_files"][src.episodes_file]
    assert written == {**entry, "source_data_files": list(data), "source_video_files": list(videos)}


def test_the_part_plan_of_episodes_left_out_lists_none_of_their_data_files(tmp_path):
    """The data files of episodes left out at planning are never read: the part's plan (what goes to its
    writer) does not list them, so what crosses to the writer does not grow with them."""
    from transforms.work.planner import EpisodesFilePlanner
    root = "file://" + str(_gone_chunks(tmp_path, 1000))
    config = ImportConfig(targets=((root, "file://" + str(tmp_path / "out")),))
    planned = EpisodesFilePlanner(config).plan(root, GROUP, config.targets[0][1])
    ((_, inputs),) = planned.to_parts
    header = inputs.headers[0]
    assert (len(header.plan.positions), header.plan.data_files, header.rows) == (1000, (), ())
    assert planned.episode_ranges == ((root, (GROUP, ((0, 1000),))),)


def test_an_import_of_gone_chunk_folders_lists_each_group_s_sources_in_its_manifest(tmp_path):
    """The manifest of an import whose groups' folders are gone lists every group's data files and MP4s, as
    before (the writer renders them from the group's templates and runs)."""
    root = _gone_chunks(tmp_path, 1500)
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    entries = read_manifest(out)["episodes_files"]
    second = entries["meta/episodes.jsonl:chunk-001"]
    assert second["source_data_files"] == [f"data/chunk-001/episode_{ep:06d}.parquet" for ep in range(1000, 1500)]
    assert second["source_video_files"] == [f"videos/chunk-001/{c}/episode_{ep:06d}.mp4" for c in CAMERAS
                                            for ep in range(1000, 1500)]
    assert len(read_errors(out)) == 3000


def test_the_import_s_check_plans_no_mp4_of_a_gone_folder(tmp_path):
    """The MP4s of gone chunk folders have nothing to read, carry or drop: the import's check leaves them out
    of its media plan (no token, no shard touched), while `plan`'s decision still lists them as it did."""
    from transforms.base import storage
    from transforms.lerobot import sources
    from transforms.output import incremental
    root = "file://" + str(_gone_chunks(tmp_path, 1500))
    decided = incremental.decide(root, None, {}, inline_index=False, force=False)
    assert (decided.media.tokens, decided.media.used, decided.media.touched) == ({}, frozenset(), {})
    assert [(d.episodes_file, d.action) for d in sources.decide(decided.file_sources, None)] == [
        (GROUP, "import"), ("meta/episodes.jsonl:chunk-001", "import")]
    scanned = sources.scan_dataset(root, {})
    _, listed = incremental.decide_run(scanned.files, None, scanned.listing.token,
                                       dataset_file=lambda rel: storage.join(root, rel))
    assert len(listed.tokens) == 3000 and set(listed.tokens.values()) == {"missing"}
