"""Ctrl-C (SIGINT) or SIGTERM in the middle of an import, end to end through the command in a subprocess:
one line, exit status 130 / 143, no temporary file, the lease released, and every episodes file committed
before the signal kept and recorded in the manifest, so the next run imports only the rest and ends with
the same output as one uninterrupted run. On local storage and on the gs:// emulator.

An episodes file commits as soon as its last part is written (by the part's writer), so the signal is sent
while most files have no part yet, and the rerun writes only the parts of the files not committed and
reads no MP4 again (their rows are in the media_index/ shards the stopped run wrote). Files of several
parts (`--data-span-limit 1`: a part per episode) commit through their part records and claim."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import fsspec
import pytest

import storage_emulators
from tests.bench.synth_dataset import make_dataset
from tests.helpers import REPO, run_import
from tests.test_lease import _gcs
from transforms.output import lease

FILES = 40  # episodes files of the dataset (2 episodes each, one MP4 per 2 episodes): commits take a while
LINE = re.compile(r"interrupted by (SIGINT|SIGTERM): (\d+) episodes files? committed before it kept and recorded, "
                  r"temporary files removed, lease released; run the same command again to import the rest")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("interrupt") / "ds", episodes=2 * FILES, frames=20, cameras=1,
                        episodes_per_meta_file=2, episodes_per_mp4=2, gop=2, state_dim=4, action_dim=4)


def _interrupt(dataset: Path, out: str, fs: fsspec.AbstractFileSystem, out_path: str, sig: int,
               env: dict, extra: tuple = ()) -> tuple[subprocess.CompletedProcess, int]:
    """Start the import and send `sig` once three episodes files have committed; also returns how many
    episodes files had any part (written or temporary) at that moment."""
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.import_lerobot", "--dataset", str(dataset),
                             "--output", out, "--runner", "FnApiRunner", *extra], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO), **env))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        fs.invalidate_cache()
        if len([p for p in (fs.find(f"{out_path}/.journal") if fs.exists(f"{out_path}/.journal") else [])
                if p.rsplit("/", 1)[-1].startswith("file-")]) >= 3:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the import ended before it could be interrupted"
    proc.send_signal(sig)
    fs.invalidate_cache()
    started = {re.sub(r"^\.|\.(part-\d+\.)?parquet.*$", "", p.rsplit("/", 1)[-1])
               for p in (fs.find(f"{out_path}/episodes") if fs.exists(f"{out_path}/episodes") else [])}
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), len(started)


def _check_interrupted(proc, sig: int, fs, out_path: str, started: int) -> int:
    # committed while most files had no part at all: a file commits as its own last part lands, not
    # once every part of the run is written
    assert started < FILES // 2, started
    assert proc.returncode == 128 + sig, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    match = LINE.fullmatch(lines[-1])
    assert match and match.group(1) == signal.Signals(sig).name, lines
    kept = int(match.group(2))
    assert 3 <= kept < FILES, kept
    fs.invalidate_cache()
    names = [p.rsplit("/", 1)[-1] for p in fs.find(out_path)]
    assert not [n for n in names if ".tmp-" in n], names
    assert ".lease.json" not in names
    manifest = json.loads(fs.cat_file(f"{out_path}/manifest.json"))
    assert manifest["status"] == "interrupted"
    recorded = {rel: e for rel, e in manifest["episodes_files"].items() if e["status"] == "imported"}
    assert len(recorded) == kept and manifest["totals"]["episodes_written"] == 2 * kept
    for entry in recorded.values():  # every part it lists is there, as recorded
        for part in entry["part_files"]:
            assert fs.info(f"{out_path}/{part['path']}")["size"] == part["bytes"]
    return kept


def _outputs(fs, out_path: str) -> dict[str, bytes]:
    fs.invalidate_cache()
    return {p[len(out_path) + 1:]: fs.cat_file(p) for p in fs.find(out_path)
            if p[len(out_path) + 1:].startswith(("episodes/", "media_index/"))}


def _resume_and_compare(dataset: Path, out: str, fs, out_path: str, kept: int, reference: dict, capsys,
                        extra: tuple = ()) -> None:
    fs.invalidate_cache()
    before = {p: fs.info(p).get("mtime") or fs.info(p).get("updated") for p in fs.find(f"{out_path}/episodes")}
    capsys.readouterr()  # what ran before (the reference run)
    assert run_import(dataset, out, *extra) == 0
    out_text = capsys.readouterr().out
    summary = next(x for x in out_text.splitlines() if x.startswith(f"file://{dataset}:"))
    unchanged = int(re.search(r"\((\d+) unchanged\)", summary).group(1))
    assert unchanged >= kept  # a file committed while the run stopped is kept too
    assert f"imported - {2 * FILES}/{2 * FILES} episodes, " in summary
    assert f", {FILES - unchanged}/{FILES} episodes files, 0 errors" in summary
    manifest = json.loads(fs.cat_file(f"{out_path}/manifest.json"))
    assert manifest["status"] == "imported"
    statuses = [e["status"] for e in manifest["episodes_files"].values()]
    assert statuses.count("unchanged") == unchanged and statuses.count("imported") == FILES - unchanged
    # only the rest is done again: its parts written, each committed by its last part's writer, no MP4 read
    # (the stopped run's shards hold their rows), no episodes file of the kept ones planned
    metrics = dict(kv.split("=") for kv in re.search(r"^metrics: (.*)$", out_text, re.M).group(1).split(", "))
    again = [e for e in manifest["episodes_files"].values() if e["status"] == "imported"]
    assert int(metrics["parts_written"]) == sum(len(e["parts"]) for e in again)
    assert int(metrics["files_committed_early"]) == len(again)
    assert int(metrics["episodes"]) == 2 * (FILES - unchanged) and "mp4_files" not in metrics, metrics
    fs.invalidate_cache()
    for rel, entry in manifest["episodes_files"].items():  # the kept files were not written again
        if entry["status"] == "unchanged":
            for part in entry["parts"]:
                path = f"{out_path}/{part}"
                assert (fs.info(path).get("mtime") or fs.info(path).get("updated")) == before[path], part
    assert not fs.exists(f"{out_path}/.journal")
    assert _outputs(fs, out_path) == reference


@pytest.fixture(scope="module")
def references(dataset, tmp_path_factory):
    """The output of one uninterrupted run, per extra options (made once each)."""
    made: dict[tuple, dict[str, bytes]] = {}

    def reference(extra: tuple = ()) -> dict[str, bytes]:
        if extra not in made:
            out = tmp_path_factory.mktemp("reference") / "out"
            assert run_import(dataset, out, *extra) == 0
            made[extra] = _outputs(fsspec.filesystem("file"), str(out))
        return made[extra]
    return reference


@pytest.mark.parametrize("sig, extra", [(signal.SIGINT, ()), (signal.SIGTERM, ("--data-span-limit", "1"))],
                         ids=["sigint", "sigterm-parts"])
def test_interrupt_keeps_committed_files_and_resumes(dataset, references, tmp_path, sig, extra, capsys):
    fs = fsspec.filesystem("file")
    out = tmp_path / "out"
    scratch = tmp_path / "tmp"  # the run's TMPDIR: Beam's local temporary folder goes there
    scratch.mkdir()
    proc, started = _interrupt(dataset, str(out), fs, str(out), sig, {"TMPDIR": str(scratch)}, extra)
    kept = _check_interrupted(proc, sig, fs, str(out), started)
    assert list(scratch.iterdir()) == []  # nothing left behind outside the output either
    reference = references(extra)
    if extra:  # every file of two parts (an episode each)
        assert {k for k in reference if k.startswith("episodes/")} == {
            f"episodes/chunk-000/file-{i:03d}.part-{p:04d}.parquet" for i in range(FILES) for p in (0, 1)}
    _resume_and_compare(dataset, str(out), fs, str(out), kept, reference, capsys, extra)


def test_interrupt_on_gcs_keeps_committed_files_and_resumes(dataset, references, capsys):
    reason = storage_emulators.missing("gcp_storage_emulator.server", "gcsfs")
    if reason:
        pytest.skip(reason)
    with _gcs() as url:
        fs = fsspec.filesystem("gs")
        fs.mkdir("interrupts")
        env = {"STORAGE_EMULATOR_HOST": url, "FSSPEC_GCS_TOKEN": "anon", "FSSPEC_GCS_PROJECT": "test"}
        extra = ("--data-span-limit", "1")
        proc, started = _interrupt(dataset, "gs://interrupts/out", fs, "interrupts/out", signal.SIGINT, env, extra)
        kept = _check_interrupted(proc, signal.SIGINT, fs, "interrupts/out", started)
        _resume_and_compare(dataset, "gs://interrupts/out", fs, "interrupts/out", kept, references(extra), capsys,
                            extra)


def test_a_stopped_run_finishes_the_output_work_in_progress_and_starts_none():
    """What the command does on a signal before it cleans up (`stopping.stop`): the part or commit in
    progress ends, a step reaching new output work waits there for good (also past a later run's reset)."""
    from transforms.base import stopping

    done: list[str] = []

    def work(name: str, seconds: float) -> None:
        with stopping.output_work():
            time.sleep(seconds)
            done.append(name)

    stopping.reset()
    busy = threading.Thread(target=work, args=("in progress", 0.3), daemon=True)
    busy.start()
    time.sleep(0.05)
    assert stopping.stop(10) is True and done == ["in progress"]
    late = threading.Thread(target=work, args=("started after the stop", 0), daemon=True)
    late.start()
    late.join(0.3)
    stopping.reset()
    late.join(0.3)
    assert late.is_alive() and done == ["in progress"]
    work("a new run's", 0)
    assert done == ["in progress", "a new run's"]


def test_part_records_and_claims_are_never_folded(tmp_path):
    """A part recorded but not committed (its file's other parts not written yet) is no commit: the next
    run's fold sees only committed files and shards; clearing removes every record."""
    from transforms.output import journal

    out, options = f"file://{tmp_path}/out", {"one_part": False}
    journal.record_part(out, run_id="r", episodes_file="meta/episodes/chunk-000/file-000.parquet", part=0,
                        result={"part": 0, "tmp_uri": f"{out}/episodes/chunk-000/.file-000.part-0000.parquet.tmp-x"})
    journal.record_part(out, run_id="r", episodes_file="meta/episodes/chunk-000/file-001.parquet", part=1,
                        result={"part": 1})
    assert lease.create_once(journal.commit_claim_uri(out, "r", "meta/episodes/chunk-000/file-001.parquet"), b"{}")
    journal.record_file(out, run_id="r", options=options, dataset="file:///d",
                        episodes_file="meta/episodes/chunk-000/file-002.parquet",
                        entry={"status": "imported", "parts": ["episodes/chunk-000/file-002.parquet"]})
    assert sorted(journal.recorded_parts(out, "r", "meta/episodes/chunk-000/file-001.parquet")) == [1]
    records, uris = journal.read_records(out, options, dataset="file:///d")
    assert [r["episodes_file"] for r in records] == ["meta/episodes/chunk-000/file-002.parquet"]
    assert len(uris) == 4
    folded = journal.fold(None, records, dataset="file:///d", options=options)
    assert list(folded["episodes_files"]) == ["meta/episodes/chunk-000/file-002.parquet"]
    journal.clear(out, uris)
    assert not (tmp_path / "out" / ".journal").exists()


def test_the_manifest_an_interrupted_run_writes_is_redacted(tmp_path, monkeypatch):
    """The manifest a stopped run writes from its journal passes the output's one redaction, as the
    finished run's does: a token that ended up in a dataset's own strings is written as ***."""
    from pipelines import run_control
    from transforms.output import journal

    token = "hf_abcdefgh12345678"
    monkeypatch.setenv("HF_TOKEN", token)
    out, options = f"file://{tmp_path}/out", {"one_part": False}
    journal.record_file(out, run_id="r", options=options, dataset=f"hf://datasets/o/n?token={token}",
                        episodes_file="meta/episodes/chunk-000/file-000.parquet",
                        entry={"status": "imported", "parts": ["episodes/chunk-000/file-000.parquet"]})
    assert run_control._keep_committed(f"hf://datasets/o/n?token={token}", out, options, "r", "SIGINT") == 1
    text = (tmp_path / "out" / "manifest.json").read_text()
    assert token not in text and '"dataset": "hf://datasets/o/n?token=***"' in text
    assert json.loads(text)["episodes_files"]["meta/episodes/chunk-000/file-000.parquet"]["status"] == "imported"


def test_a_killed_run_leaves_its_journal_and_the_next_run_imports_only_the_rest(dataset, references, tmp_path,
                                                                                 capsys):
    """SIGKILL: no cleanup at all. The next run takes the dead run's lease over, folds its journal (the
    files it committed are kept, its part records and claims are not commits), removes its temporaries
    and ends with the output of one uninterrupted run."""
    fs = fsspec.filesystem("file")
    out = tmp_path / "out"
    extra = ("--data-span-limit", "1")
    proc, started = _interrupt(dataset, str(out), fs, str(out), signal.SIGKILL, {}, extra)
    assert proc.returncode == -signal.SIGKILL and started < FILES // 2
    committed = len(list((out / ".journal").rglob("file-*.json")))
    assert 3 <= committed < FILES
    reference = references(extra)
    capsys.readouterr()
    assert run_import(dataset, out, *extra) == 0
    text = capsys.readouterr().out
    assert re.search(rf"^file://{dataset}: took over the expired lease on file://{out} of run \w+ .*that run is "
                     "presumed dead$", text, re.M), text
    summary = next(x for x in text.splitlines() if x.startswith(f"file://{dataset}: imported - "))
    assert int(re.search(r"\((\d+) unchanged\)", summary).group(1)) >= committed
    names = [p.name for p in out.rglob("*")]
    assert not [n for n in names if ".tmp-" in n] and not (out / ".journal").exists()
    assert _outputs(fs, str(out)) == reference


def test_an_interrupted_manifest_counts_its_entries_as_a_finished_one_does():
    """The totals of a manifest are counted by one function whichever path writes it: a v2.x file imported
    without two of its episodes counts them as failed after an interrupt too (episodes read = written +
    failed), and a file the previous run removed is not counted again as removed by this one."""
    from transforms.episode.outcomes import FileOutcome
    from transforms.output import journal, writes

    v2 = "meta/episodes.jsonl:chunk-000"
    imported = FileOutcome(dataset="file:///d", episodes_file=v2, status="imported", parts=("episodes/p.parquet",),
                           episodes=5, episodes_written=3, episodes_failed=2, frames=30, bytes=700)
    finished = writes.manifest("file:///d", None, [imported], started_at="s", finished_at="f")
    assert finished["totals"]["episodes_failed"] == 2

    previous = {"options": {}, "warnings": [], "totals": {"errors": 0},
                "episodes_files": {"meta/episodes.jsonl:chunk-001": {"status": "removed", "parts": []}}}
    record = {"kind": "episodes_file", "episodes_file": v2, "entry": finished["episodes_files"][v2]}
    folded = journal.fold(previous, [record], dataset="file:///d", options={}, run_id="r")
    assert folded["totals"] == finished["totals"]
    assert folded["totals"]["episodes"] == folded["totals"]["episodes_written"] + folded["totals"]["episodes_failed"]
    assert folded["totals"]["episodes_files_removed"] == 0
    assert list(folded["episodes_files"]) == [v2]
