"""Ctrl-C (SIGINT) or SIGTERM in the middle of an import, end to end through the command in a subprocess:
one line, exit status 130 / 143, no temporary file, the lease released, and every episodes file committed
before the signal kept and recorded in the manifest, so the next run imports only the rest and ends with
the same output as one uninterrupted run. On local storage and on the gs:// emulator."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest

import storage_emulators
from tests.bench.synth_dataset import make_dataset
from tests.helpers import REPO, run_import
from tests.test_lease import _gcs

FILES = 40  # episodes files of the dataset (2 episodes each, one MP4 per 2 episodes): commits take a while
LINE = re.compile(r"interrupted by (SIGINT|SIGTERM): (\d+) episodes files? committed before it kept and recorded, "
                  r"temporary files removed, lease released; run the same command again to import the rest")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("interrupt") / "ds", episodes=2 * FILES, frames=20, cameras=1,
                        episodes_per_meta_file=2, episodes_per_mp4=2, gop=2, state_dim=4, action_dim=4)


def _interrupt(dataset: Path, out: str, fs: fsspec.AbstractFileSystem, out_path: str, sig: int,
               env: dict) -> subprocess.CompletedProcess:
    """Start the import and send `sig` once three episodes files have committed."""
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.import_lerobot", "--dataset", str(dataset),
                             "--output", out, "--runner", "FnApiRunner"], cwd=REPO, stdout=subprocess.PIPE,
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
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _check_interrupted(proc, sig: int, fs, out_path: str) -> int:
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


def _resume_and_compare(dataset: Path, out: str, fs, out_path: str, kept: int, reference: dict, capsys) -> None:
    fs.invalidate_cache()
    before = {p: fs.info(p).get("mtime") or fs.info(p).get("updated") for p in fs.find(f"{out_path}/episodes")}
    assert run_import(dataset, out) == 0
    summary = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(f"file://{dataset}:"))
    unchanged = int(re.search(r"\((\d+) unchanged\)", summary).group(1))
    assert unchanged >= kept  # a file committed while the run stopped is kept too
    assert f"imported - {2 * FILES}/{2 * FILES} episodes, " in summary
    assert f", {FILES - unchanged}/{FILES} episodes files, 0 errors" in summary
    manifest = json.loads(fs.cat_file(f"{out_path}/manifest.json"))
    assert manifest["status"] == "imported"
    statuses = [e["status"] for e in manifest["episodes_files"].values()]
    assert statuses.count("unchanged") == unchanged and statuses.count("imported") == FILES - unchanged
    fs.invalidate_cache()
    for rel, entry in manifest["episodes_files"].items():  # the kept files were not written again
        if entry["status"] == "unchanged":
            for part in entry["parts"]:
                path = f"{out_path}/{part}"
                assert (fs.info(path).get("mtime") or fs.info(path).get("updated")) == before[path], part
    assert not fs.exists(f"{out_path}/.journal")
    assert _outputs(fs, out_path) == reference


@pytest.fixture(scope="module")
def reference(dataset, tmp_path_factory) -> dict[str, bytes]:
    """The output of one uninterrupted run."""
    out = tmp_path_factory.mktemp("reference") / "out"
    assert run_import(dataset, out) == 0
    return _outputs(fsspec.filesystem("file"), str(out))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_keeps_committed_files_and_resumes(dataset, reference, tmp_path, sig, capsys):
    fs = fsspec.filesystem("file")
    out = tmp_path / "out"
    proc = _interrupt(dataset, str(out), fs, str(out), sig, {})
    kept = _check_interrupted(proc, sig, fs, str(out))
    _resume_and_compare(dataset, str(out), fs, str(out), kept, reference, capsys)


def test_interrupt_on_gcs_keeps_committed_files_and_resumes(dataset, reference, capsys):
    reason = storage_emulators.missing("gcp_storage_emulator.server", "gcsfs")
    if reason:
        pytest.skip(reason)
    with _gcs() as url:
        fs = fsspec.filesystem("gs")
        fs.mkdir("interrupts")
        env = {"STORAGE_EMULATOR_HOST": url, "FSSPEC_GCS_TOKEN": "anon", "FSSPEC_GCS_PROJECT": "test"}
        proc = _interrupt(dataset, "gs://interrupts/out", fs, "interrupts/out", signal.SIGINT, env)
        kept = _check_interrupted(proc, signal.SIGINT, fs, "interrupts/out")
        _resume_and_compare(dataset, "gs://interrupts/out", fs, "interrupts/out", kept, reference, capsys)
