"""The import's steps without Beam (`transforms.work`): each body called directly, no pipeline."""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.dataset_factory import DatasetSpec, write_dataset
from transforms.base.errors import FailureRecord
from transforms.episode.quirks import ClipSpan
from transforms.episode.outcomes import PartResult
from transforms.output import paths, sinks
from transforms.work import finish, mp4_facts
from transforms.work.checker import CheckedDataset, check_to_import
from transforms.work.messages import ClipUse, DatasetReport, ImportConfig, Mp4Version, PartInputs, VideoFailure
from transforms.work.part_writer import COUNTERS, PartWriter, by_read_unit
from transforms.work.planner import EpisodesFilePlanner, duplicate_episodes

FILE0 = "meta/episodes/chunk-000/file-000.parquet"


class _Counter:
    """A counter as a step's DoFn hands one in (Beam's have the same `inc`)."""

    def __init__(self, tally: collections.Counter, name: str) -> None:
        self._tally, self._name = tally, name

    def inc(self, n: int = 1) -> None:
        self._tally[self._name] += n


def _counters() -> tuple[collections.Counter, dict]:
    tally: collections.Counter = collections.Counter()
    return tally, {name: _Counter(tally, name) for name in COUNTERS}


def test_planner_cuts_an_episodes_file_into_parts_with_its_episode_ids_and_counts(tmp_path):
    root = "file://" + str(write_dataset(tmp_path / "ds", DatasetSpec(lengths=(5, 7, 6))))
    out = "file://" + str(tmp_path / "out")
    planned = EpisodesFilePlanner(ImportConfig(targets=((root, out),))).plan(root, FILE0, out)
    assert not planned.failed
    assert [r.episode_index for r in planned.rows] == [0, 1, 2]
    assert [key for key, _ in planned.to_parts] == [(root, FILE0, 0)]
    header = planned.to_parts[0][1].headers[0]
    assert (header.dataset, header.episodes_file, header.num_parts, header.output) == (root, FILE0, 1, out)
    assert [(r.episode_index, r.length) for r in header.rows] == [(0, 5), (1, 7), (2, 6)]
    assert planned.episode_ranges == ((root, (FILE0, ((0, 3),))),)  # one claim per file, not one per episode
    assert planned.clip_uses == ()  # no cameras
    counts = planned.report.file_counts[0]
    assert (counts.episodes_file, counts.episodes, counts.frames, counts.episode_ranges) == (FILE0, 3, 18, ((0, 3),))


def test_duplicate_check_finds_episodes_claimed_twice_from_ranges():
    """Claims are ranges, one per file: 300 files of 1,000 episodes each with no index twice give nothing, and
    an index two files claim fails both, naming the other, whatever the size of the ranges around it."""
    clean = [(f"meta/episodes.jsonl:chunk-{c:03d}", ((c * 1000, c * 1000 + 1000),)) for c in range(300)]
    assert list(duplicate_episodes("r", clean)) == []
    claims = clean + [("meta/episodes/x.parquet", ((5, 6), (299_999, 300_002)))]
    found = sorted((key, [(d.episode_index, d.message) for d in inputs.duplicates])
                   for key, inputs in duplicate_episodes("r", claims))
    assert found == [
        (("r", "meta/episodes.jsonl:chunk-000"),
         [(5, "[duplicate_episode] dataset r, episodes file meta/episodes.jsonl:chunk-000, episode 5: episode 5 is "
              "listed 2 times (also in meta/episodes/x.parquet)")]),
        (("r", "meta/episodes.jsonl:chunk-299"),
         [(299_999, "[duplicate_episode] dataset r, episodes file meta/episodes.jsonl:chunk-299, episode 299999: "
                    "episode 299999 is listed 2 times (also in meta/episodes/x.parquet)")]),
        (("r", "meta/episodes/x.parquet"),
         [(5, "[duplicate_episode] dataset r, episodes file meta/episodes/x.parquet, episode 5: episode 5 is listed "
              "2 times (also in meta/episodes.jsonl:chunk-000)")]),
        (("r", "meta/episodes/x.parquet"),
         [(299_999, "[duplicate_episode] dataset r, episodes file meta/episodes/x.parquet, episode 299999: episode "
                    "299999 is listed 2 times (also in meta/episodes.jsonl:chunk-299)")]),
    ]


def test_planner_fails_a_missing_episodes_file_as_a_whole(tmp_path):
    root = "file://" + str(write_dataset(tmp_path / "ds", DatasetSpec(lengths=(5,))))
    rel = "meta/episodes/chunk-000/file-009.parquet"
    planned = EpisodesFilePlanner(ImportConfig(targets=((root, "memory://out"),))).plan(root, rel, "memory://out")
    assert planned.failed and planned.to_parts == () and planned.rows == ()
    outcome, = planned.report.outcomes
    assert (outcome.episodes_file, outcome.status) == (rel, "failed")
    assert outcome.failures[0].rule == "file_missing"


def test_part_writer_writes_and_commits_a_part_when_flushed(tmp_path):
    """The part stays pending (encoding) until flushed; then it is stored and, being its file's only part,
    committed at once: the file's outcome, the part in place, the counts as Beam's counters would hold."""
    root = "file://" + str(write_dataset(tmp_path / "ds", DatasetSpec(lengths=(5, 7, 6))))
    out = tmp_path / "out"
    config = ImportConfig(targets=((root, "file://" + str(out)),), run_id="run-1")
    planned = EpisodesFilePlanner(config).plan(root, FILE0, config.targets[0][1])
    (unit, part), = [by_read_unit(key, [inputs]) for key, inputs in planned.to_parts]
    tally, counters = _counters()
    writer = PartWriter(config, counters)
    try:
        assert list(writer.write_unit(unit, [part], facts={(root, FILE0): []})) == []  # pending
        writer.new_bundle()  # as if that bundle failed: its part is forgotten, not stored
        assert writer.flush() is None and not (out / paths.output_part_path(FILE0, 0, 1)).exists()
        assert list(writer.write_unit(unit, [part], facts={(root, FILE0): []})) == []  # the retried bundle
        (key, written) = writer.flush()
        assert writer.flush() is None
    finally:
        writer.close()
    assert key == (root, FILE0)
    done, = written.committed
    assert (done.outcome.status, done.outcome.episodes_written, done.outcome.frames) == ("imported", 3, 18)
    part_file = out / paths.output_part_path(FILE0, 0, 1)
    table = pq.read_table(part_file)
    assert table.num_rows == 3 and table.column("episode_index").to_pylist() == [0, 1, 2]
    assert {k: tally[k] for k in ("episodes", "frames", "parts_written", "files_committed_early")} == {
        "episodes": 3, "frames": 18, "parts_written": 1, "files_committed_early": 1}
    assert tally["output_bytes"] == part_file.stat().st_size and tally["data_bytes_read"] > 0


def test_part_writer_fails_a_part_whose_mp4_failed_without_reading(tmp_path):
    root = "memory://nowhere"  # nothing may be read: the failure is known before any read
    config = ImportConfig(targets=((root, "memory://out"),))
    from transforms.lerobot.episodes_files import PartPlan
    from transforms.work.messages import PartHeader
    header = PartHeader(root, FILE0, PartPlan(0, (0,), ("data/x.parquet",), 10), 1, (), "memory://out")
    failure = FailureRecord(root, FILE0, 0, "videos/x.mp4", "file_missing", "gone")
    tally, counters = _counters()
    writer = PartWriter(config, counters)
    try:
        results = list(writer.write_unit((root, FILE0, 0), [((root, FILE0, 0), PartInputs(
            headers=(header,), failures=(failure,)))])) + [writer.flush()]
    finally:
        writer.close()
    (key, written), none = results
    assert key == (root, FILE0) and none is None
    result, = written.results
    assert (result.part, result.tmp_uri, [f.rule for f in result.failures]) == (0, None, ["file_missing"])
    assert sum(tally.values()) == 0


SAMPLE = Path(__file__).parent / "data" / "lerobot" / "so101_av1"


def test_mp4_reader_reads_each_mp4_once_for_every_part_using_it(tmp_path):
    """The bundled sample: each camera's MP4 read once, its facts for the part using it (the file's true size;
    without --inline-index no MediaIndex travels to the part), its media_index/ row and its token reported."""
    root = "file://" + str(SAMPLE)
    config = ImportConfig(targets=((root, "file://" + str(tmp_path / "out")),))
    planned = EpisodesFilePlanner(config).plan(root, FILE0, config.targets[0][1])
    by_mp4: dict = {}
    for (_, rel), use in planned.clip_uses:
        by_mp4.setdefault(rel, []).append(use)
    assert sorted(by_mp4) == [f"videos/observation.images.{cam}/chunk-000/file-000.mp4" for cam in ("front", "wrist")]
    tally: collections.Counter = collections.Counter()
    reader = mp4_facts.Mp4FactsReader(config, {name: _Counter(tally, name) for name in mp4_facts.COUNTERS})
    for rel, uses in sorted(by_mp4.items()):
        result = reader.read(root, rel, uses)
        assert [key for key, _ in result.to_parts] == [(root, FILE0, 0)]
        told, = result.to_parts[0][1].mp4s
        assert (told.file, told.mp4.size, told.mp4.index) == (rel, (SAMPLE / rel).stat().st_size, None)
        assert told.samples is not None  # sample times for the part's quality checks
        assert (result.index_row.row.file, result.index_row.row.size) == (rel, (SAMPLE / rel).stat().st_size)
        assert result.index_row.output == config.targets[0][1]  # the shard's output, as the clip uses carry it
        assert result.report.video_versions == ((rel, ""),) and result.report.mp4_failures == ()
    assert tally["mp4_files"] == 2 and tally["mp4_read_requests"] >= 2
    # files this small are read whole by the first range read (a large one: its head and moov only)
    assert tally["mp4_bytes_read"] == sum((SAMPLE / rel).stat().st_size for rel in by_mp4)


def test_mp4_reader_fails_each_part_using_a_missing_mp4(tmp_path):
    root = "file://" + str(tmp_path / "ds")
    rel = "videos/cam/chunk-000/file-000.mp4"
    uses = [ClipUse((root, FILE0, 0), "cam", "h264", 10.0, (ClipSpan(FILE0, 3, 0.0, 0.3, 3),)),
            ClipUse((root, FILE0, 1), "cam", "h264", 10.0, (ClipSpan(FILE0, 5, 0.3, 0.7, 4),))]
    tally: collections.Counter = collections.Counter()
    reader = mp4_facts.Mp4FactsReader(ImportConfig(targets=((root, "memory://out"),)),
                                      {name: _Counter(tally, name) for name in mp4_facts.COUNTERS})
    result = reader.read(root, rel, uses)
    assert [(key, f.rule, f.episode_index, f.file) for key, i in result.to_parts for f in i.failures] == [
        ((root, FILE0, 0), "file_missing", 3, rel), ((root, FILE0, 1), "file_missing", 5, rel)]
    assert f"video file {rel} does not exist" in result.to_parts[0][1].failures[0].message
    assert result.index_row is None
    assert result.report.mp4_failures == (VideoFailure(root, "cam", rel, "file_missing"),)
    assert sum(tally.values()) == 0
    assert reader.read(root, rel, [Mp4Version("token")]) == mp4_facts.Mp4Result()  # no clip uses: nothing to tell


def test_check_lists_a_new_dataset_and_skips_it_once_imported_up_to_date(tmp_path):
    from tests.helpers import run_import
    path = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(5, 7)))
    root, out = "file://" + str(path), tmp_path / "out"
    config = ImportConfig(targets=((root, "file://" + str(out)),), run_id="run-1")
    checked = check_to_import(config, root, config.targets[0][1])
    assert not checked.skipped
    (listed_root, rel, to, read), = checked.episodes_files  # its rows, read for its sources' digest, go along
    assert (listed_root, rel, to) == (root, FILE0, "file://" + str(out))
    assert [(r.episode_index, r.length) for r in read.rows] == [(0, 5), (1, 7)]
    found, decisions = checked.reports
    assert found.sources[0] is not None and found.failures == () and found.outputs == ("file://" + str(out),)
    assert [s.episodes_file for s in decisions.file_sources] == [FILE0] and decisions.kept == ()
    assert [(key, i.sources[0].episodes_file) for key, i in checked.file_sources] == [((root, FILE0), FILE0)]
    assert checked.mp4_versions == () and checked.shard_touches == ()  # no cameras
    assert run_import(path, out) == 0
    assert check_to_import(config, root, "file://" + str(out)) == CheckedDataset(skipped=True)


def test_check_fails_a_dataset_without_episodes_files_as_a_whole(tmp_path):
    (tmp_path / "ds").mkdir()
    root = "file://" + str(tmp_path / "ds")
    out = "file://" + str(tmp_path / "out")
    checked = check_to_import(ImportConfig(targets=((root, out),)), root, out)
    assert checked.episodes_files == () and not checked.skipped
    failure, = [f for r in checked.reports for f in r.failures]
    assert (failure.dataset, failure.episodes_file) == (root, None)
    assert failure.rule == "info_json" and "a LeRobot dataset's root holds meta/info.json" in failure.message


def test_finisher_writes_the_manifest_and_errors_of_a_failed_dataset_and_counts_them(tmp_path):
    root, out = "file://" + str(tmp_path / "ds"), tmp_path / "out"
    out.mkdir()
    config = ImportConfig(targets=((root, "file://" + str(out)),), run_id="run-1", started_at="2026-12-06T00:00:00")
    failure = FailureRecord(root, None, None, "meta/info.json", "info_json", "meta/info.json does not exist")
    tally: collections.Counter = collections.Counter()
    finisher = finish.DatasetFinisher(config, {name: _Counter(tally, name) for name in finish.COUNTERS})
    doc = finisher.finish(root, DatasetReport(failures=(failure,), outputs=("file://" + str(out),)))
    assert json.loads((out / "manifest.json").read_text()) == doc
    assert (doc["status"], doc["run_id"], doc["totals"]["errors"], doc["episodes_files"]) == (
        "failed", "run-1", 1, {})
    row, = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert (row["rule"], row["file"], row["message"]) == ("info_json", "meta/info.json",
                                                          "meta/info.json does not exist")
    assert dict(tally) == {"errors": 1, "warnings": 0, "datasets_failed": 1}


def test_finisher_after_a_bug_records_it_as_internal(tmp_path):
    root, out = "file://" + str(tmp_path / "ds"), tmp_path / "out"
    out.mkdir()
    config = ImportConfig(targets=((root, "file://" + str(out)),), run_id="run-1")
    tally: collections.Counter = collections.Counter()
    finisher = finish.DatasetFinisher(config, {name: _Counter(tally, name) for name in finish.COUNTERS})
    try:
        raise KeyError("no such thing")
    except KeyError:
        import sys
        doc = finisher.finish_after_bug(root, DatasetReport(outputs=("file://" + str(out),)), sys.exc_info())
    assert doc["status"] == "failed" and doc["info_json_sha256"] is None
    row, = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert row["rule"] == "internal" and "no such thing" in row["message"]
    assert tally["datasets_failed"] == 1 and tally["errors"] == 1


def test_parquet_sink_stages_commits_and_removes_an_episodes_files_parts(tmp_path):
    out = "file://" + str(tmp_path / "out")
    sink = sinks.sink("parquet")
    assert sink is sinks.sink() and isinstance(sink, sinks.ParquetParts)
    table = pa.table({"episode_index": pa.array([0, 1], pa.int64()), "length": pa.array([5, 7], pa.int64())})
    encoded = sink.encode(table)
    data = encoded.read()
    assert pq.read_table(pa.BufferReader(data)).equals(table) and not encoded.spilled
    assert (encoded.size, encoded.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    tmp = sink.stage(out, FILE0, 0, 1, encoded)
    final = tmp_path / "out" / paths.output_part_path(FILE0, 0, 1)
    assert not final.exists() and Path(tmp.removeprefix("file://")).read_bytes() == data
    result = PartResult("d", FILE0, 0, 1, (0, 1), tmp_uri=tmp, frames=12, bytes=encoded.size,
                        sha256=encoded.sha256)
    outcome = sink.commit(out, "d", FILE0, [result])
    assert (outcome.status, outcome.parts, outcome.frames) == ("imported", (paths.output_part_path(FILE0, 0, 1),), 12)
    assert final.read_bytes() == data and not Path(tmp.removeprefix("file://")).exists()
    sink.remove(out, FILE0, json.dumps({"parts": list(outcome.parts)}))
    assert not final.exists()


def test_a_sink_is_one_class_and_one_registry_line(tmp_path, monkeypatch):
    """A sink registered in SINKS gets every part the writer writes (here one that keeps the tables); a body
    not given a counter for each thing it counts says which."""
    with pytest.raises(ValueError, match="PartWriter counts .*files_committed_early: give a counter for each"):
        PartWriter(ImportConfig(targets=()), {})
    with pytest.raises(KeyError, match="no sink named 'memory'; the sinks are parquet"):
        sinks.sink("memory")
    monkeypatch.setitem(sinks.SINKS, "memory", "tests.test_work:MemorySink")
    root = "file://" + str(write_dataset(tmp_path / "ds", DatasetSpec(lengths=(5, 7))))
    config = ImportConfig(targets=((root, "memory://out"),), sink="memory")
    planned = EpisodesFilePlanner(config).plan(root, FILE0, config.targets[0][1])
    tally, counters = _counters()
    writer = PartWriter(config, counters)
    try:
        assert list(writer.write_unit((root, FILE0, 0), planned.to_parts)) == []
        (_, written) = writer.flush()
    finally:
        writer.close()
    result, = written.results
    assert result.tmp_uri == f"memory://out/staged/{FILE0}/0" and result.sha256 == "2 rows"
    table = sinks.sink("memory").staged[result.tmp_uri]
    assert table.column("episode_index").to_pylist() == [0, 1] and table.column("length").to_pylist() == [5, 7]


class _RowsNoted(sinks.Encoded):
    """No bytes; the digest the manifest records names the part's rows."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows

    @property
    def sha256(self) -> str:
        return f"{self.rows} rows"


class MemorySink(sinks.EpisodesSink):
    """A sink that keeps each part's table in memory, as a table store would take it."""

    name = "memory"

    def __init__(self) -> None:
        self.staged: dict[str, pa.Table] = {}

    def encode(self, table: pa.Table) -> sinks.Encoded:
        self._table = table
        return _RowsNoted(table.num_rows)

    def stage(self, out: str, episodes_file: str, part: int, num_parts: int, encoded: sinks.Encoded) -> str:
        uri = f"{out}/staged/{episodes_file}/{part}"
        self.staged[uri] = self._table
        return uri


def test_merged_records_name_one_output_root_or_say_what_dropped_it():
    from transforms.base.errors import LeRobotImportError
    from transforms.work.messages import FileInputs, output_root
    merged = FileInputs.merge([FileInputs(outputs=("file:///out",)), FileInputs(), FileInputs(outputs=("file:///out",))])
    assert output_root(merged.outputs, "episodes file x") == "file:///out"
    with pytest.raises(LeRobotImportError) as raised:
        output_root((), "episodes file x of d")
    assert raised.value.rule == "internal"
    assert str(raised.value) == ("[internal] episodes file x of d: 0 output roots reached it ([]), not one; "
                                 "please report it")
    with pytest.raises(LeRobotImportError, match=r"2 output roots reached it \(\['a', 'b'\]\)"):
        output_root(("a", "b"), "dataset d")
