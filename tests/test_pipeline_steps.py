"""The import's composite steps, each run alone (TestPipeline on the FnApiRunner, `assert_that`) on small
synthetic elements: what each one emits, and that each turns an unexpected error into a record."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.dataset_factory import DatasetSpec, edit_episodes, write_dataset
from transforms.base import storage
from transforms.work import finish
from transforms.output import writes
from transforms.episode.outcomes import FileOutcome, PartFile, PartResult, failed_file
from transforms.output.paths import output_part_path
from transforms.episode.quirks import ClipSpan, WarningRecord
from transforms.base.errors import FailureRecord
from transforms.import_dataset import CheckDatasets, ImportLeRobotDatasets, PlanEpisodesFiles
from transforms.read_mp4_facts import ReadMp4Facts
from transforms.work.messages import ClipUse, DatasetReport, FileInputs, ImportConfig, PartInputs, VideoFailure
from transforms.safety_net import NAMESPACE
from transforms.commit_episodes_files import CommitEpisodesFiles
from transforms.finish_datasets import FinishDatasets
from transforms.write_parts import WriteParts

FILE0, FILE1 = "meta/episodes/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-001.parquet"
CAM = "observation.images.cam"
VIDEO_FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [2], "names": ["a", "b"]},
    CAM: {"dtype": "video", "shape": [48, 64, 3], "names": ["height", "width", "channels"],
          "info": {"video.codec": "h264", "video.fps": 10}},
}


def _pipeline() -> test_pipeline.TestPipeline:
    return test_pipeline.TestPipeline(runner="FnApiRunner")


def _uri(path: Path) -> str:
    return "file://" + str(path)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _counters(result) -> dict[str, int]:
    found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    return {c.key.metric.name: c.committed for c in found}


# ---- CheckDatasets ---------------------------------------------------------------------------------


def test_check_lists_episodes_files_and_fails_a_dataset_without_any(tmp_path):
    good = _uri(write_dataset(tmp_path / "good", DatasetSpec(lengths=(2, 3), episodes_per_meta_file=1)))
    empty = write_dataset(tmp_path / "empty", DatasetSpec(lengths=(2,)))
    shutil.rmtree(empty / "meta" / "episodes")
    empty = _uri(empty)
    config = ImportConfig(targets=((good, _uri(tmp_path / "o1")), (empty, _uri(tmp_path / "o2"))))
    with _pipeline() as p:
        checked = p | beam.Create(list(config.targets)) | CheckDatasets(config)
        assert_that(checked.reports | beam.FlatMapTuple(lambda root, r: [root] * len(r.sources)),
                    equal_to([good, empty]), label="sources")
        # each file (and its output root) with the rows read to find its sources: planning does not read it again
        assert_that(checked.episodes_files | beam.Map(lambda e: (e[0], e[1], tuple(r.episode_index
                                                                                for r in e[3].rows))),
                    equal_to([(good, FILE0, (0,)), (good, FILE1, (1,))]), label="files")
        assert_that(checked.reports | beam.FlatMapTuple(lambda root, r: [(
                        root, f.episodes_file, f.rule, f.file, "the dataset has no episodes files" in f.message)
                        for f in r.failures]),
                    equal_to([(empty, None, "episodes_file", "meta/episodes", True)]), label="failures")


def test_check_skips_a_dataset_whose_last_import_is_up_to_date(tmp_path):
    from transforms.lerobot import fingerprint
    root = _uri(write_dataset(tmp_path / "ds", DatasetSpec(lengths=(2,))))
    out = tmp_path / "out"
    out.mkdir()
    config = ImportConfig(targets=((root, _uri(out)),))
    (out / "manifest.json").write_text(json.dumps({
        "status": "imported", "episodes_files": {}, "options": config.output_options(),
        "source": fingerprint.fingerprint(root).to_json()}))
    with _pipeline() as p:
        checked = p | beam.Create(list(config.targets)) | CheckDatasets(config)
        assert_that(checked.reports, equal_to([]), label="reports")
        assert_that(checked.episodes_files, equal_to([]), label="files")
    # A manifest that is not JSON proves nothing: the dataset is imported again.
    (out / "manifest.json").write_text("{not json")
    with _pipeline() as p:
        checked = p | beam.Create(list(config.targets)) | CheckDatasets(config)
        assert_that(checked.episodes_files | beam.Map(lambda e: e[:2]), equal_to([(root, FILE0)]), label="files")


# ---- PlanEpisodesFiles -----------------------------------------------------------------------------


def test_plan_finds_an_episode_listed_in_two_files_and_short_clips(tmp_path):
    ds = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4, 5, 2), episodes_per_meta_file=2, fps=10,
                                                    features=VIDEO_FEATURES))
    # file-001 claims episode 1 (also in file-000) instead of 2; its clips end one frame short.
    edit_episodes(ds, lambda t: t.set_column(t.schema.get_field_index("episode_index"), "episode_index",
                                             pa.array([1, 3], pa.int64())), file_index=1)
    to = f"videos/{CAM}/to_timestamp"
    edit_episodes(ds, lambda t: t.set_column(t.schema.get_field_index(to), to,
                                             pa.array([v - 0.1 for v in t.column(to).to_pylist()])), file_index=1)
    root = _uri(ds)
    config = ImportConfig(targets=((root, _uri(tmp_path / "out")),))
    with _pipeline() as p:
        plans = (p | beam.Create([(root, rel, config.targets[0][1]) for rel in (FILE0, FILE1)])
                 | PlanEpisodesFiles(config))
        assert_that(plans.to_files | beam.FlatMapTuple(lambda key, i: [(key, f.rule, f.episode_index,
                                                                         f.message.split(": ", 1)[1])
                                                                        for f in i.duplicates]),
                    equal_to([((root, FILE0), "duplicate_episode", 1, f"episode 1 is listed 2 times (also in {FILE1})"),
                              ((root, FILE1), "duplicate_episode", 1,
                               f"episode 1 is listed 2 times (also in {FILE0})")]), label="duplicates")
        assert_that(plans.to_parts | beam.MapTuple(lambda key, i: (key, [r.episode_index for r in i.headers[0].rows])),
                    equal_to([((root, FILE0, 0), [0, 1]), ((root, FILE1, 0), [1, 3])]), label="headers")
        mp4 = f"videos/{CAM}/chunk-000/file-000.mp4"
        assert_that(plans.clip_uses | beam.MapTuple(lambda key, u: (key, u.part, u.camera, u.codec, u.fps,
                                                                     [c.episode_index for c in u.clips])),
                    equal_to([((root, mp4), (root, FILE0, 0), CAM, "h264", 10.0, [0, 1]),
                              ((root, mp4), (root, FILE1, 0), CAM, "h264", 10.0, [1, 3])]), label="uses")
        assert_that(plans.reports | beam.FlatMapTuple(lambda r, rep: [(w.episodes_file, w.episode_index, w.what, w.by)
                                                                      for w in rep.warnings] + list(rep.outcomes)),
                    equal_to([(FILE1, 1, "clip_end_short", "0.1 s (1 frame)")]), label="warnings")  # one per camera


def test_plan_fails_an_unreadable_episodes_file_with_its_rule(tmp_path):
    ds = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4), episodes_per_meta_file=1))
    (ds / FILE1).write_bytes(b"not parquet at all")
    root = _uri(ds)
    config = ImportConfig(targets=((root, _uri(tmp_path / "out")),))
    with _pipeline() as p:
        plans = (p | beam.Create([(root, rel, config.targets[0][1]) for rel in (FILE0, FILE1)])
                 | PlanEpisodesFiles(config))
        assert_that(plans.reports | beam.FlatMapTuple(lambda r, rep: [(o.episodes_file, o.status,
                                                                       [f.rule for f in o.failures])
                                                                      for o in rep.outcomes]),
                    equal_to([(FILE1, "failed", ["episodes_file"])]), label="outcomes")
        assert_that(plans.to_parts | beam.Keys(), equal_to([(root, FILE0, 0)]), label="headers")


def test_plan_uses_the_rows_the_check_step_read(tmp_path):
    """Given the rows the check step read, planning does not read the episodes file again (here it is gone)."""
    from transforms.lerobot.dataset import read_info
    from transforms.lerobot.episodes_files import read_episodes_file
    from transforms.work.messages import ReadRows
    ds = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4), episodes_per_meta_file=1))
    root = _uri(ds)
    rows = tuple(read_episodes_file(root, FILE1, read_info(root)))
    (ds / FILE1).unlink()
    config = ImportConfig(targets=((root, _uri(tmp_path / "out")),))
    with _pipeline() as p:
        out = config.targets[0][1]
        plans = p | beam.Create([(root, FILE0, out), (root, FILE1, out, ReadRows(rows))]) | PlanEpisodesFiles(config)
        assert_that(plans.to_parts | beam.MapTuple(lambda key, i: (key, [r.episode_index for r in i.headers[0].rows])),
                    equal_to([((root, FILE0, 0), [0]), ((root, FILE1, 0), [1])]), label="headers")


def test_a_plan_that_raises_on_rows_the_check_step_read_fails_that_file_as_internal(tmp_path, monkeypatch):
    """The safety net's handler unpacks every shape of planning's input, the rows the check step read included."""
    from transforms.work.messages import ReadRows
    from transforms.work.planner import EpisodesFilePlanner

    def broken(self, root, rel, out, read=None):
        raise RuntimeError(f"planning {rel} broke")

    monkeypatch.setattr(EpisodesFilePlanner, "plan", broken)
    root, out = "memory://ds", "memory://out"
    config = ImportConfig(targets=((root, out),))
    with _pipeline() as p:
        plans = p | beam.Create([(root, FILE0, out, ReadRows(())), (root, FILE1, out)]) | PlanEpisodesFiles(config)
        assert_that(plans.reports | beam.FlatMapTuple(lambda r, rep: [
                        (r, o.episodes_file, o.status, [(f.rule, f"planning {o.episodes_file} broke" in f.message)
                                                        for f in o.failures]) for o in rep.outcomes]),
                    equal_to([(root, FILE0, "failed", [("internal", True)]),
                              (root, FILE1, "failed", [("internal", True)])]))


# ---- ReadMp4Facts ----------------------------------------------------------------------------------


def test_a_missing_mp4_fails_each_part_using_it_and_says_where_it_is(tmp_path):
    ds = tmp_path / "ds"
    rel = f"videos/{CAM}/chunk-000/file-000.mp4"
    misplaced = ds / "video" / CAM / "chunk-000" / "file-000.mp4"
    misplaced.parent.mkdir(parents=True)
    misplaced.write_bytes(b"\0" * 16)
    root = _uri(ds)
    config = ImportConfig(targets=((root, _uri(tmp_path / "out")),))
    uses = [ClipUse((root, FILE0, 0), CAM, "h264", 10.0,
                    (ClipSpan(FILE0, 0, 0.0, 0.3, 3), ClipSpan(FILE0, 1, 0.3, 0.7, 4))),
            ClipUse((root, FILE1, 0), CAM, "h264", 10.0, (ClipSpan(FILE1, 2, 0.7, 1.2, 5),))]
    with _pipeline() as p:
        facts = p | beam.Create([((root, rel), u) for u in uses]) | ReadMp4Facts(config)
        failures = facts.to_parts | beam.FlatMapTuple(lambda key, i: [(key, f) for f in i.failures] +
                                                      [(key, "video") for _ in i.mp4s])
        assert_that(failures | beam.MapTuple(lambda key, f: (key, f.rule, f.episode_index, f.file)),
                    equal_to([((root, FILE0, 0), "file_missing", 0, rel), ((root, FILE1, 0), "file_missing", 2, rel)]),
                    label="failures")
        assert_that(failures | beam.MapTuple(lambda key, f: f"a file of that name is at video/{CAM}/" in f.message
                                             and "`video/`" in f.message and "`videos/`" in f.message),
                    equal_to([True, True]), label="hint")
        assert_that(facts.reports | beam.MapTuple(lambda r, rep: (r, rep.mp4_failures, rep.warnings)),
                    equal_to([(root, (VideoFailure(root, CAM, rel, "file_missing"),), ())]), label="reports")


# ---- WriteParts ------------------------------------------------------------------------------------


def test_a_part_with_a_failed_mp4_fails_without_reading_and_a_part_without_plan_is_internal(tmp_path):
    from transforms.lerobot.episodes_files import PartPlan
    from transforms.work.messages import PartHeader
    root = "memory://nowhere"  # nothing may be read: the failure is known before any read
    config = ImportConfig(targets=((root, "memory://out"),))
    header = PartHeader(root, FILE0, PartPlan(0, (0,), ("data/x.parquet",), 10), 1, (), "memory://out")
    failure = FailureRecord(root, FILE0, 0, "videos/x.mp4", "file_missing", "gone")
    with _pipeline() as p:
        results = (p | beam.Create([((root, FILE0, 0), PartInputs(headers=(header,))),
                                    ((root, FILE0, 0), PartInputs(failures=(failure,))),
                                    ((root, FILE1, 0), PartInputs(failures=(failure,)))])
                   | WriteParts(config))
        assert_that(results | beam.FlatMapTuple(lambda key, i: [(key, r.part, r.tmp_uri, [f.rule for f in r.failures])
                                                                 for r in i.results]),
                    equal_to([((root, FILE0), 0, None, ["file_missing"]), ((root, FILE1), 0, None, ["internal"])]))


# ---- CommitEpisodesFiles ---------------------------------------------------------------------------


def _tmp_part(out: str, rel: str, part: int, num_parts: int, data: bytes) -> str:
    return storage.write_tmp(storage.join(out, output_part_path(rel, part, num_parts)), lambda f: f.write(data))


def test_commit_moves_all_parts_or_none(tmp_path):
    out = _uri(tmp_path / "out")
    config = ImportConfig(targets=(("d", out),))
    data = [b"part zero", b"part one!", b"single"]
    results = [PartResult("d", FILE0, 0, 2, (0, 1), tmp_uri=_tmp_part(out, FILE0, 0, 2, data[0]), frames=7,
                          bytes=len(data[0]), sha256=_sha(data[0])),
               PartResult("d", FILE0, 1, 2, (2,), tmp_uri=_tmp_part(out, FILE0, 1, 2, data[1]), frames=5,
                          bytes=len(data[1]), sha256=_sha(data[1])),
               PartResult("d", FILE1, 0, 1, (3, 4), tmp_uri=_tmp_part(out, FILE1, 0, 1, data[2]), frames=9,
                          bytes=len(data[2]), sha256=_sha(data[2]))]
    duplicate = FailureRecord("d", FILE1, 4, FILE1, "duplicate_episode", "episode 4 is listed 2 times")
    with _pipeline() as p:
        outcomes = (p | beam.Create([(("d", r.episodes_file), FileInputs(results=(r,), outputs=(out,)))
                                     for r in results] + [(("d", FILE1), FileInputs(duplicates=(duplicate,)))])
                    | CommitEpisodesFiles(config)
                    | beam.FlatMapTuple(lambda root, rep: [(root, o) for o in rep.outcomes]))
        assert_that(outcomes | beam.MapTuple(lambda root, o: (root, o.episodes_file, o.status, o.parts, o.part_files,
                                                               o.frames, sorted((f.episode_index, f.rule)
                                                                                for f in o.rows()))),
                    equal_to([("d", FILE0, "imported", ("episodes/chunk-000/file-000.part-0000.parquet",
                                                        "episodes/chunk-000/file-000.part-0001.parquet"),
                               (PartFile("episodes/chunk-000/file-000.part-0000.parquet", 9, 2, _sha(data[0])),
                                PartFile("episodes/chunk-000/file-000.part-0001.parquet", 9, 1, _sha(data[1]))),
                               12, []),
                              ("d", FILE1, "failed", (), (), 0, [(3, "file_failed"), (4, "duplicate_episode")])]))
    folder = tmp_path / "out" / "episodes" / "chunk-000"
    assert sorted(p.name for p in folder.iterdir()) == ["file-000.part-0000.parquet", "file-000.part-0001.parquet"]
    assert (folder / "file-000.part-0001.parquet").read_bytes() == data[1]


def test_a_commit_that_raises_fails_its_file_as_internal_and_leaves_nothing(tmp_path, monkeypatch):
    out = _uri(tmp_path / "out")
    config = ImportConfig(targets=(("d", out),))
    tmp = _tmp_part(out, FILE0, 0, 1, b"written")
    result = PartResult("d", FILE0, 0, 1, (0, 1), tmp_uri=tmp, frames=3, bytes=7, sha256=_sha(b"written"))

    def broken(*args, **kwargs):
        raise RuntimeError("the store went away")

    monkeypatch.setattr(writes, "commit_episodes_file", broken)
    with _pipeline() as p:
        outcomes = (p | beam.Create([(("d", FILE0), FileInputs(results=(result,), outputs=(out,)))])
                    | CommitEpisodesFiles(config)
                    | beam.FlatMapTuple(lambda root, rep: [(root, o) for o in rep.outcomes]))
        assert_that(outcomes | beam.MapTuple(lambda root, o: (o.status, o.episodes, o.episodes_failed,
                                                               sorted((-1 if f.episode_index is None
                                                                       else f.episode_index, f.rule)
                                                                      for f in o.rows()),
                                                               any("the store went away" in f.message
                                                                   for f in o.rows()))),
                    equal_to([("failed", 2, 2, [(-1, "internal"), (0, "file_failed"),
                                                (1, "file_failed")], True)]))
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


# ---- FinishDatasets --------------------------------------------------------------------------------


def _finish_inputs(p, root: str, out: str):
    imported = FileOutcome(root, FILE0, "imported", parts=("episodes/chunk-000/file-000.parquet",), episodes=2,
                           episodes_written=2, frames=9, bytes=100,
                           part_files=(PartFile("episodes/chunk-000/file-000.parquet", 100, 2, "ab" * 32),))
    failed = failed_file(root, FILE1, (2, 3), [FailureRecord(root, FILE1, 2, "videos/b.mp4", "file_missing", "gone")])
    kept = WarningRecord(root, FILE0, 1, "videos/a.mp4", "clip_end_short", "0.1 s (1 frame)", "short")
    dropped = WarningRecord(root, FILE1, 2, "videos/b.mp4", "clip_end_short", "0.1 s (1 frame)", "short")
    return p | beam.Create([
        (root, DatasetReport(sources=(None,), outputs=(out,))),
        (root, DatasetReport(outcomes=(imported,))), (root, DatasetReport(outcomes=(failed,))),
        (root, DatasetReport(warnings=(kept, dropped))),
        (root, DatasetReport(mp4_failures=(VideoFailure(root, CAM, "videos/b.mp4", "file_missing"),))),
        (root, DatasetReport(mp4_failures=(VideoFailure(root, CAM, "videos/c.mp4", "file_missing"),))),
    ])


def test_finish_writes_errors_and_manifest_and_counts_errors_once(tmp_path):
    ds = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(2,)))
    root, out = _uri(ds), tmp_path / "out"
    config = ImportConfig(targets=((root, _uri(out)),), run_id="r1", started_at="t0")
    p = _pipeline()
    manifests = _finish_inputs(p, root, config.targets[0][1]) | FinishDatasets(config)
    assert_that(manifests | beam.Map(lambda d: (d["status"], d["totals"]["errors"], d["totals"]["warnings"],
                                                d["totals"]["episodes_files"], len(d["notes"]))),
                equal_to([("failed", 2, 1, 2, 1)]))
    result = p.run()
    result.wait_until_finish()
    doc = json.loads((out / "manifest.json").read_text())
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert [(e["episode_index"], e["rule"]) for e in errors] == [(2, "file_missing"), (3, "file_failed")]
    assert _counters(result)["errors"] == doc["totals"]["errors"] == len(errors)
    assert doc["info_json_sha256"] == _sha((ds / "meta" / "info.json").read_bytes())
    assert doc["warnings"] == [{"episodes_file": FILE0, "episode_index": 1, "file": "videos/a.mp4",
                                "what": "clip_end_short", "by": "0.1 s (1 frame)", "message": "short"}]
    assert doc["notes"][0].startswith(f"camera `{CAM}`: 2 MP4 files are missing or unusable (file_missing; "
                                      "first: videos/b.mp4)") and "--skip-videos" in doc["notes"][0]
    assert doc["episodes_files"][FILE0]["part_files"] == [
        {"path": "episodes/chunk-000/file-000.parquet", "bytes": 100, "rows": 2, "sha256": "ab" * 32}]


def test_finish_that_raises_still_writes_errors_and_manifest(tmp_path, monkeypatch):
    """A MemoryError (or any other surprise) while finishing: both files are written, the error is a record."""
    ds = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(2,)))
    root, out = _uri(ds), tmp_path / "out"
    config = ImportConfig(targets=((root, _uri(out)),))

    def out_of_memory(root):
        raise MemoryError("simulated: info.json too large")

    monkeypatch.setattr(finish, "info_sha256", out_of_memory)
    p = _pipeline()
    manifests = _finish_inputs(p, root, config.targets[0][1]) | FinishDatasets(config)
    assert_that(manifests | beam.Map(lambda d: (d["status"], d["totals"]["errors"], d["totals"]["episodes"])),
                equal_to([("failed", 3, 4)]))
    result = p.run()
    result.wait_until_finish()
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    internal = [e for e in errors if e["rule"] == "internal"]
    assert len(internal) == 1 and "MemoryError" in internal[0]["message"] and "too large" in internal[0]["message"]
    assert json.loads((out / "manifest.json").read_text())["status"] == "failed"
    assert _counters(result)["errors"] == len(errors) == 3


# ---- the whole story -------------------------------------------------------------------------------


def test_building_the_import_declares_every_output_tag(tmp_path, caplog):
    """Beam warns about tags a DoFn yields without declaring them; the import declares all of them."""
    root = _uri(write_dataset(tmp_path / "ds", DatasetSpec(lengths=(2,))))
    config = ImportConfig(targets=((root, _uri(tmp_path / "out")),))
    with caplog.at_level(logging.WARNING):
        p = beam.Pipeline(runner="FnApiRunner")
        _ = p | beam.Create(list(config.targets)) | ImportLeRobotDatasets(config)
    assert not [r for r in caplog.records if "not declared in type hints" in r.getMessage()]
    assert len(p.to_runner_api().components.transforms) > 20  # the pipeline was really built
    shutil.rmtree(p.local_tempdir, ignore_errors=True)  # Beam removes its temporary folder only in run()


@pytest.mark.parametrize("clips, warned", [
    ([ClipSpan(FILE0, 0, 0.0, 1.0, 10), ClipSpan(FILE0, 1, 1.0, 2.0, 10)], []),
    ([ClipSpan(FILE0, 0, 0.0, 0.9, 10), ClipSpan(FILE0, 1, 0.9, 1.8, 10), ClipSpan(FILE0, 2, 1.8, 2.7, 10)],
     [(1, "-0.1 s (-1 frame)"), (2, "-0.2 s (-2 frames)")]),
    ([ClipSpan(FILE0, 0, 0.04, 1.04, 10)], []),
])
def test_start_drift_is_measured_against_the_frames_before_the_clip(clips, warned):
    from transforms.episode.quirks import start_drift_warnings
    got = start_drift_warnings("d", "videos/a.mp4", clips, 10.0)
    assert [(w.episode_index, w.by) for w in got] == warned


def test_write_parts_encodes_a_part_while_the_next_read_unit_is_prepared(tmp_path, monkeypatch, capsys):
    """Single-part read units (the usual layout): each part is stored only once the next unit's part is
    read, typed and checked (its encoding overlapped that work), the bundle's last one in finish_bundle;
    every part is still written and its file committed by its writer."""
    from tests.dataset_factory import DatasetSpec, write_dataset
    from tests.helpers import read_manifest, run_import
    from transforms.work import part_writer

    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(5, 7, 6, 4), episodes_per_meta_file=1))
    events = []
    prepare, finish = part_writer.PartWriter._prepare_part, part_writer.PartWriter._finish
    monkeypatch.setattr(part_writer.PartWriter, "_prepare_part",
                        lambda self, key, inputs: events.append(("prepare", key[1])) or prepare(self, key, inputs))
    monkeypatch.setattr(part_writer.PartWriter, "_finish",
                        lambda self, pending, facts: events.append(("store", pending.key[1])) or finish(
                            self, pending, facts))
    assert run_import(root, tmp_path / "out") == 0
    files = [f"meta/episodes/chunk-000/file-{i:03d}.parquet" for i in range(4)]
    order = [f for _, f in events if _ == "prepare"]
    assert sorted(order) == files and len(events) == 8
    # a part is stored after the next part is prepared, the last one at the bundle's end
    assert events == [("prepare", order[0])] + [e for i in range(1, 4) for e in (("prepare", order[i]),
                                                                                ("store", order[i - 1]))] + [
        ("store", order[3])]
    manifest = read_manifest(tmp_path / "out")
    assert sorted(manifest["episodes_files"]) == files
    assert all(e["status"] == "imported" for e in manifest["episodes_files"].values())
    assert "files_committed_early=4" in capsys.readouterr().out
