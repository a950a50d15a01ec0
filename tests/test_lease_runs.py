"""Overlapping import runs: the output lease taken by `run()`. Two processes on one output (exactly one
imports, the other exits 1 naming the holder), a dead run's expired lease taken over, --wait-for-lease
waiting for a release, and bulk runs sharing the work per dataset output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import fsspec
import pytest

import storage_emulators
from tests.dataset_factory import DatasetSpec, write_dataset
from tests.helpers import SAMPLE, output_files, read_manifest, run_import
from tests.test_lease import _gcs
from transforms.output import lease
from transforms.output.lease import LEASE_NAME

REPO = Path(__file__).resolve().parent.parent


def _command(output: Path) -> list[str]:
    return [sys.executable, "-m", "pipelines.import_lerobot", "--dataset", str(SAMPLE), "--output", str(output),
            "--runner", "FnApiRunner"]


def _same_output(output: Path) -> dict[str, bytes]:
    """`output_files`, with the run ids recorded per episodes file blanked too (each run has its own)."""
    files = output_files(output)
    doc = json.loads(files["manifest.json"])
    for entry in doc.get("episodes_files", {}).values():
        entry.pop("run_id", None)
    files["manifest.json"] = json.dumps(doc, sort_keys=True).encode()
    return files


def _race_two_runs(out: str) -> tuple[str, str]:
    """Start two import processes on `out` together; returns the winner's and the loser's output."""
    env = dict(os.environ, PYTHONPATH=str(REPO), FSSPEC_GCS_TOKEN="anon", FSSPEC_GCS_PROJECT="test")
    procs = [subprocess.Popen(_command(out), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    assert sorted(code for code, _, _ in results) == [0, 1], results
    winner = next(r[1] for r in results if r[0] == 0)
    loser = next(r[1] for r in results if r[0] == 1)
    assert "imported - 4/4 episodes, 46 frames" in winner
    assert "lease expires at 20" in loser
    assert "every output is being imported by another run" in loser
    return winner, loser


def test_two_runs_started_together_one_imports_the_other_exits_naming_the_holder(tmp_path):
    out, alone = tmp_path / "out", tmp_path / "alone"
    _, loser = _race_two_runs(str(out))
    run_id = read_manifest(out)["run_id"]
    assert f"skipped - being imported by run {run_id} on host " in loser
    assert not (out / LEASE_NAME).exists()  # released at the end

    assert run_import(SAMPLE, alone) == 0
    assert _same_output(out) == _same_output(alone)


def test_lease_left_by_a_killed_run_is_taken_over_and_said(tmp_path, capsys):
    out = tmp_path / "out"
    dead = lease.acquire(str(out), run_id="dead-run-7", ttl_seconds=60, clock=lambda: time.time() - 3600)
    assert dead.record.expired(time.time())
    assert run_import(SAMPLE, out) == 0
    printed = capsys.readouterr().out
    assert "took over the expired lease on" in printed and "of run dead-run-7 (host " in printed
    assert "that run is presumed dead" in printed
    assert read_manifest(out)["status"] == "imported"
    assert lease.read_lease(str(out)) is None


def test_held_lease_without_waiting_exits_1_and_imports_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    other = lease.acquire(str(out), run_id="other-run", ttl_seconds=600)
    assert run_import(SAMPLE, out) == 1
    printed = capsys.readouterr().out
    assert f"skipped - being imported by run other-run on host {other.record.host} (pid {os.getpid()})" in printed
    assert not (out / "manifest.json").exists()
    assert lease.read_lease(str(out)) == other.record  # the holder's lease is untouched


def test_wait_for_lease_waits_for_a_held_lease_that_is_released(tmp_path, capsys):
    out = tmp_path / "out"
    other = lease.acquire(str(out), run_id="other-run", ttl_seconds=600)
    timer = threading.Timer(2.0, lease.release, args=(other,))
    timer.start()
    started = time.monotonic()
    try:
        assert run_import(SAMPLE, out, "--wait-for-lease", "60") == 0
    finally:
        timer.cancel()
    assert time.monotonic() - started >= 2.0
    assert read_manifest(out)["status"] == "imported"
    assert "skipped" not in capsys.readouterr().out
    assert lease.read_lease(str(out)) is None


def test_bulk_runs_share_work_a_held_dataset_output_is_skipped(tmp_path, capsys):
    base = tmp_path / "datasets"
    for i, name in enumerate(("alpha", "beta")):
        write_dataset(base / name, DatasetSpec(lengths=(3 + i, 4), seed=i))
    out = tmp_path / "out"
    other = lease.acquire(str(out / "beta"), run_id="bulk-run-b", ttl_seconds=600)
    assert run_import([], out, "--datasets", str(base / "*")) == 0
    printed = capsys.readouterr().out
    assert "beta: skipped - being imported by run bulk-run-b on host " in printed
    assert read_manifest(out / "alpha")["status"] == "imported"
    assert not (out / "beta" / "manifest.json").exists()
    assert lease.read_lease(str(out / "alpha")) is None
    lease.release(other)


def test_help_shows_wait_for_lease(capsys):
    from pipelines.command_line import check_arguments, import_help
    text = import_help()
    assert "--wait_for_lease SECONDS, --wait-for-lease SECONDS" in text
    assert "Default: 0" in text.split("--wait-for-lease SECONDS", 1)[1]
    check_arguments(["--dataset", "d", "--output", "o", "--wait-for-lease", "5"])  # known: not refused


def test_memory_output_held_then_released(capsys):
    out = "memory://lease-runs/out"
    other = lease.acquire(out, run_id="other-run", ttl_seconds=600)
    assert run_import(SAMPLE, out) == 1
    assert "skipped - being imported by run other-run on host " in capsys.readouterr().out
    assert lease.release(other)
    assert run_import(SAMPLE, out) == 0
    assert "imported - 4/4 episodes, 46 frames" in capsys.readouterr().out
    assert lease.read_lease(out) is None


def test_gs_emulator_output_held_then_taken_over_after_expiry(capsys):
    reason = storage_emulators.missing("gcp_storage_emulator.server", "gcsfs")
    if reason:
        pytest.skip(reason)
    with _gcs():
        fsspec.filesystem("gs").mkdir("lease-runs")
        out = "gs://lease-runs/out"
        other = lease.acquire(out, run_id="other-run", ttl_seconds=600)
        assert run_import(SAMPLE, out) == 1
        assert "skipped - being imported by run other-run on host " in capsys.readouterr().out
        assert lease.release(other)
        lease.acquire(out, run_id="dead-run-9", ttl_seconds=60, clock=lambda: time.time() - 3600)
        assert run_import(SAMPLE, out) == 0
        printed = capsys.readouterr().out
        assert "of run dead-run-9 (host " in printed and "that run is presumed dead" in printed
        assert "imported - 4/4 episodes, 46 frames" in printed
        assert lease.read_lease(out) is None


def test_two_runs_started_together_on_the_gs_emulator(tmp_path, capsys):
    reason = storage_emulators.missing("gcp_storage_emulator.server", "gcsfs")
    if reason:
        pytest.skip(reason)
    with _gcs():
        fsspec.filesystem("gs").mkdir("lease-race")
        out = "gs://lease-race/out"
        _, loser = _race_two_runs(out)
        gs = fsspec.filesystem("gs")
        run_id = json.loads(gs.cat("lease-race/out/manifest.json"))["run_id"]
        assert f"skipped - being imported by run {run_id} on host " in loser
        assert lease.read_lease(out) is None
        raced = {p[len("lease-race/out/"):]: gs.cat(p) for p in gs.find("lease-race/out")}
    # the output is what one run alone makes: every part byte for byte, the same parts in the manifest
    alone = tmp_path / "alone"
    assert run_import(SAMPLE, alone) == 0
    expected = _same_output(alone)
    assert sorted(raced) == sorted(expected)
    for name in expected:
        if name != "manifest.json":
            assert raced[name] == expected[name], name
    parts = lambda doc: {rel: e["parts"] for rel, e in doc["episodes_files"].items()}  # noqa: E731
    assert parts(json.loads(raced["manifest.json"])) == parts(json.loads(expected["manifest.json"]))
