"""The import on a real dask.distributed cluster (`--runner DaskRunner --dask_client_address`), compared with
the DirectRunner's: a LocalCluster of two worker processes on the loopback (one thread each), started once
for the module. Every Parquet file must be `Table.equals` (schema and metadata too), errors.jsonl byte-equal,
manifest.json equal but for the run id and times, and every other file byte-equal; the work must spread
over both workers; an interrupted run resumes as a local one does; a worker killed mid-run ends in the
clean run's output or in a failure that says so, never in a manifest that calls a partial import done.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest

from tests.bench.synth_dataset import make_dataset
from tests.helpers import REPO, lerobot_dataset, output_files, run_import, run_python

try:
    import distributed
except ImportError:  # the tests of the cluster skip; the one of the DirectRunner's path still runs
    distributed = None

SAMPLE = REPO / "tests" / "data" / "so101_av1"
FILES = 24  # episodes files of the interrupt and worker-kill dataset (2 episodes each)


@pytest.fixture(scope="module")
def cluster():
    if distributed is None:
        pytest.skip("dask.distributed is not installed (pip install 'lerobot-beam-import[dask]')")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None) as c, distributed.Client(c) as client:
        yield c, client


def test_direct_runner_loads_nothing_of_dask(tmp_path):
    """The DirectRunner's path is the one it was: an import there loads neither the Dask layer nor Dask."""
    lines = run_python(
        "import sys\n"
        "from tests.helpers import run_import\n"
        f"assert run_import({str(SAMPLE)!r}, {str(tmp_path / 'out')!r}) == 0\n"
        "print(sorted(m for m in sys.modules if m == 'dask' or m.startswith(('dask.', 'distributed', "
        "'pipelines.dask_runner', 'apache_beam.runners.dask'))))")
    assert lines[-1] == "[]", lines[-3:]
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["status"] == "imported"


def _dask_import(cluster, dataset, out, *extra) -> int:
    return run_import(dataset, out, "--runner", "DaskRunner", "--dask_client_address", cluster[0].scheduler_address,
                      *extra)


def assert_same_output(dask_out: Path, direct_out: Path) -> None:
    """Every Parquet file Table.equals (with schema and metadata), every other file byte-equal, manifest.json
    equal but for run id and times (`output_files` blanks those)."""
    dask_files, direct_files = output_files(dask_out), output_files(direct_out)
    assert sorted(dask_files) == sorted(direct_files)
    assert any(name.endswith(".parquet") for name in direct_files)
    for name in direct_files:
        if name.endswith(".parquet"):
            a, b = pq.read_table(dask_out / name), pq.read_table(direct_out / name)
            assert a.schema.equals(b.schema, check_metadata=True), name
            assert a.equals(b, check_metadata=True), name
        else:
            assert dask_files[name] == direct_files[name], name
    if (direct_out / "errors.jsonl").exists():
        assert (dask_out / "errors.jsonl").read_bytes() == (direct_out / "errors.jsonl").read_bytes()


def _bundles_per_worker(stream) -> dict[str, Counter]:
    """step -> worker -> bundles it ran, from the scheduler's task stream (`pipelines.dask_runner` names each
    ParDo's bundle tasks after its step)."""
    per_step: dict[str, Counter] = {}
    for task in stream.data:
        key = task["key"][0] if isinstance(task["key"], tuple) else task["key"]
        if key.startswith("beam_"):
            per_step.setdefault(key.rsplit("-", 1)[0], Counter())[task["worker"]] += 1
    return per_step


def test_sample_equals_direct_runner(cluster, tmp_path, capsys):
    assert _dask_import(cluster, SAMPLE, tmp_path / "dask") == 0
    out = capsys.readouterr().out
    # the counters come back from the workers (Beam's DaskRunner raises on metrics())
    assert "imported - 4/4 episodes, 46 frames, 1/1 episodes files, 0 errors" in out
    assert re.search(r"^metrics: .*episodes=4, .*frames=46, .*parts_written=1", out, re.M), out
    assert run_import(SAMPLE, tmp_path / "direct") == 0
    assert_same_output(tmp_path / "dask", tmp_path / "direct")


def test_multi_file_set_equals_direct_runner_and_spreads(cluster, tmp_path):
    dataset = lerobot_dataset("h264_multi_file")
    with distributed.get_task_stream(cluster[1]) as stream:
        assert _dask_import(cluster, dataset, tmp_path / "dask", "--data-span-limit", "1") == 0
    assert run_import(dataset, tmp_path / "direct", "--data-span-limit", "1") == 0
    assert_same_output(tmp_path / "dask", tmp_path / "direct")
    manifest = json.loads((tmp_path / "dask" / "manifest.json").read_text())
    assert manifest["totals"]["episodes_files"] >= 3 and manifest["status"] == "imported"
    steps = _bundles_per_worker(stream)
    write = next(counts for step, counts in steps.items() if "WriteParts_Write" in step)
    # the parts are written in several bundles, which the scheduler places (where their inputs lie: on a
    # loaded machine it may put them all on one worker); the run as a whole uses both worker processes
    assert sum(write.values()) >= 2, steps
    assert set().union(*steps.values()) == set(cluster[1].scheduler_info()["workers"]), steps


def test_failing_dataset_fails_alike(cluster, tmp_path, capsys):
    dataset = shutil.copytree(lerobot_dataset("h264_multi_file"), tmp_path / "ds")
    data_file = sorted((dataset / "data").rglob("*.parquet"))[-1]
    data_file.write_bytes(data_file.read_bytes()[: data_file.stat().st_size // 2])  # one data file cut short
    assert _dask_import(cluster, dataset, tmp_path / "dask") == 1
    dask_out = capsys.readouterr().out
    assert run_import(dataset, tmp_path / "direct") == 1
    direct_out = capsys.readouterr().out
    manifest = json.loads((tmp_path / "dask" / "manifest.json").read_text())
    assert manifest["status"] == "failed", manifest["status"]
    assert 0 < manifest["totals"]["episodes_files_imported"] < manifest["totals"]["episodes_files"]
    errors = (tmp_path / "dask" / "errors.jsonl").read_text().splitlines()
    assert errors and all(data_file.name in line for line in errors), errors
    assert_same_output(tmp_path / "dask", tmp_path / "direct")
    summary = [line for line in dask_out.splitlines() if " -> file://" in line]
    assert [line.replace("/dask", "/OUT") for line in summary] == [
        line.replace("/direct", "/OUT") for line in direct_out.splitlines() if " -> file://" in line]


@pytest.fixture(scope="module")
def many_files(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("many") / "ds", episodes=2 * FILES, frames=20, cameras=1,
                        episodes_per_meta_file=2, episodes_per_mp4=2, gop=2, state_dim=4, action_dim=4)


@pytest.fixture(scope="module")
def reference(many_files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "out"
    assert run_import(many_files, out) == 0
    return out


def _start(cluster, dataset: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipelines.import_lerobot", "--dataset", str(dataset),
                             "--output", str(out), "--runner", "DaskRunner", "--dask_client_address",
                             cluster[0].scheduler_address], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))


def _wait_for_commits(proc: subprocess.Popen, out: Path, n: int) -> None:
    """Until `n` episodes files of the run have committed (their journal records)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        journal = out / ".journal"
        if journal.exists() and len([p for p in journal.rglob("file-*")]) >= n:
            return
        time.sleep(0.01)
    assert proc.poll() is None, "the import ended before the test could act on it: " + proc.stdout.read()[-2000:]


def test_interrupted_run_resumes_like_a_local_one(cluster, many_files, reference, tmp_path, capsys):
    out = tmp_path / "out"
    proc = _start(cluster, many_files, out)
    _wait_for_commits(proc, out, 3)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    match = re.search(r"interrupted by SIGINT: (\d+) episodes files? committed before it kept and recorded, temporary "
                      r"files removed, lease released; run the same command again to import the rest$", stdout.strip())
    assert match, stdout
    kept = int(match.group(1))
    assert 3 <= kept < FILES, kept
    names = [p.name for p in out.rglob("*")]
    assert not [n for n in names if ".tmp-" in n], names  # the cluster's running tasks ended before the cleanup
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    recorded = [e for e in manifest["episodes_files"].values() if e["status"] == "imported"]
    assert len(recorded) == kept
    for entry in recorded:  # every part it lists is there, as recorded
        for part in entry["part_files"]:
            assert (out / part["path"]).stat().st_size == part["bytes"]
    capsys.readouterr()
    assert _dask_import(cluster, many_files, out) == 0
    summary = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(f"file://{many_files}:"))
    # The files the stopped run committed are redone when their MP4s' media_index/ shard had not been
    # committed yet: on the cluster the shard writer runs beside the part writers, not before them as on the
    # DirectRunner, so a stop can come between a file's commit and its shard's.
    if manifest.get("media_index"):  # the stopped run's manifest: its shards committed
        found = re.search(r"\((\d+) unchanged\)", summary)
        assert found and int(found.group(1)) >= kept, summary
    assert f"imported - {2 * FILES}/{2 * FILES} episodes, " in summary
    assert_same_episodes(out, reference)


def assert_same_episodes(out: Path, reference: Path) -> None:
    """The episodes and media_index/ files of a resumed run equal one uninterrupted run's."""
    got, want = output_files(out), output_files(reference)
    for name, data in want.items():
        if name.startswith(("episodes/", "media_index/")):
            assert got.get(name) == data, name
    assert sorted(n for n in got if n.startswith(("episodes/", "media_index/"))) == sorted(
        n for n in want if n.startswith(("episodes/", "media_index/")))


def test_worker_killed_mid_run(cluster, many_files, reference, tmp_path):
    """SIGKILL to one worker process while the files commit: the nanny restarts it and Dask runs its tasks
    again. The run then either equals a clean run or fails saying so: never exit 0 over a partial output."""
    out = tmp_path / "out"
    proc = _start(cluster, many_files, out)
    _wait_for_commits(proc, out, 2)
    pids = cluster[1].run(os.getpid)
    victim = sorted(pids)[0]
    os.kill(pids[victim], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    manifest = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else None
    if proc.returncode == 0:
        assert manifest["status"] == "imported"
        assert f"imported - {2 * FILES}/{2 * FILES} episodes, " in stdout
        assert_same_episodes(out, reference)
    else:  # a bundle whose results died with the worker is not run again over the changed output
        assert proc.returncode == 1, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        assert re.search(r"^error: step .*: a worker of the cluster was lost after this bundle had run.*; run the "
                         r"same command again to import the rest$", stderr.strip(), re.M), stderr[-3000:]
        assert manifest is None or manifest["status"] != "imported", manifest
    cluster[1].wait_for_workers(2, timeout=60)  # restarted by its nanny
    if proc.returncode:  # the same command again ends in the clean run's output
        assert _dask_import(cluster, many_files, out) == 0
        assert json.loads((out / "manifest.json").read_text())["status"] == "imported"
        assert_same_episodes(out, reference)


def test_a_beam_the_layer_does_not_know_is_refused(monkeypatch):
    import apache_beam

    from pipelines import dask_runner

    monkeypatch.setattr(apache_beam, "__version__", "2.78.0")
    with pytest.raises(SystemExit) as ex:
        run_import(SAMPLE, "/nonexistent/out", "--runner", "DaskRunner")
    assert str(ex.value) == ("error: --runner DaskRunner: this import's Dask support was written for apache-beam "
                             "2.77.x and this install has 2.78.0; install a supported apache-beam (pip install "
                             "'lerobot-beam-import[dask]') or run on another runner")
    assert dask_runner.SUPPORTED_BEAM == ("2.77.",)


def test_an_unreachable_scheduler_is_one_line(tmp_path):
    if distributed is None:
        pytest.skip("dask.distributed is not installed (pip install 'lerobot-beam-import[dask]')")
    with pytest.raises(SystemExit) as ex:
        run_import(SAMPLE, tmp_path / "out", "--runner", "DaskRunner", "--dask_client_address", "tcp://127.0.0.1:9",
                   "--dask_connection_timeout", "1")
    assert str(ex.value).startswith("error: --runner DaskRunner: cannot reach the Dask scheduler at "
                                    "tcp://127.0.0.1:9 (")
    assert str(ex.value).endswith("); start the cluster or correct --dask_client_address")
    assert not (tmp_path / "out" / ".lease.json").exists()  # released


class _WarnOnWorker(beam.DoFn):
    """A step that warns as the import's steps do, from whichever worker runs it."""

    def process(self, element):
        logging.getLogger("transforms.dask_probe").warning("element %s warned on process %d", element, os.getpid())
        yield element


def test_warnings_on_the_workers_reach_the_command(cluster, caplog):
    """A warning the import's steps log on a worker is the command's to print, as a local run prints it."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.dask_runner import DaskRunner

    caplog.set_level(logging.WARNING, logger="transforms")
    pipeline = beam.Pipeline(runner=DaskRunner(),
                             options=PipelineOptions(["--dask_client_address", cluster[0].scheduler_address]))
    _ = pipeline | beam.Create(["a", "b", "c"]) | beam.ParDo(_WarnOnWorker())
    pipeline.run().wait_until_finish()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = [r.getMessage() for r in caplog.records if r.name == "transforms.dask_probe"]
        if len(got) == 3:
            break
        time.sleep(0.1)
    assert sorted(m.split(" on process")[0] for m in got) == ["element a warned", "element b warned",
                                                               "element c warned"], got
    pids = {int(m.rsplit(" ", 1)[1]) for m in got}
    assert os.getpid() not in pids, pids  # logged by the workers, not by this process
