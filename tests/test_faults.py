"""Faults: transient storage errors are retried, a retried write leaves no duplicate, a killed
run rerun gives the same output, and no file outside a dataset root is ever opened."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests import flaky_fs
from tests.arrow_compare import rows
from tests.helpers import REPO, corpus_path, output_files, read_errors, run_import
from tests.dataset_factory import DatasetSpec, edit_info, write_dataset
from transforms.base import storage
from transforms.output import writes
from transforms.episode.outcomes import PartResult


@pytest.fixture()
def flaky():
    flaky_fs.register()
    yield flaky_fs.FlakyFileSystem
    flaky_fs.FlakyFileSystem.configure(0.0)


def _strip(value, old: str, new: str):
    if isinstance(value, dict):
        return {k: _strip(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip(v, old, new) for v in value]
    if isinstance(value, str) and value.startswith(old):
        return new + value[len(old):]
    return value


def test_transient_faults_are_retried_and_output_is_identical(tmp_path, flaky):
    root = corpus_path("lerobot", "h264_multi_file")
    clean = tmp_path / "clean"
    assert run_import(root, clean) == 0
    flaky.configure(rate=0.05, seed=7)
    faulty = tmp_path / "faulty"
    assert run_import(f"flaky://{root}", f"flaky://{faulty}") == 0, read_errors(faulty)
    survived = flaky.injected
    flaky.configure(0.0)
    assert survived >= 5, "the test must really inject faults"
    print(f"injected faults survived: {survived}")
    a, b = output_files(clean), output_files(faulty)
    assert sorted(a) == sorted(b)
    for name in a:
        if name.endswith(".parquet"):
            ours = _strip(rows(pq.read_table(faulty / name)), "flaky://", "file://")
            assert ours == rows(pq.read_table(clean / name)), name
        elif name == "manifest.json":
            continue  # holds the dataset URI, which differs by scheme
        else:
            assert a[name] == b[name], name


def test_with_retries_is_bounded_and_skips_permanent_errors():
    calls = []

    def always_failing():
        calls.append(1)
        raise ConnectionResetError("down")

    with pytest.raises(ConnectionResetError):
        storage.with_retries(always_failing, attempts=3)
    assert len(calls) == 3
    calls.clear()

    def missing():
        calls.append(1)
        raise FileNotFoundError("gone")

    with pytest.raises(FileNotFoundError):
        storage.with_retries(missing)
    assert len(calls) == 1


def test_a_retried_part_write_leaves_no_duplicate_or_partial_part(tmp_path):
    """Beam retries a failed bundle: the first attempt's temporary part is orphaned; the commit moves the
    successful attempt's part into place and removes the orphan."""
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4)))
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    final = out / "episodes" / "chunk-000" / "file-000.parquet"
    good = final.read_bytes()
    final.unlink()
    orphan = storage.write_tmp(storage.join("file://" + str(out), "episodes/chunk-000/file-000.parquet"),
                               lambda f: f.write(good[: len(good) // 2]))  # the attempt that died mid-write
    retried = storage.write_tmp(storage.join("file://" + str(out), "episodes/chunk-000/file-000.parquet"),
                                lambda f: f.write(good))
    result = PartResult(dataset="d", episodes_file="meta/episodes/chunk-000/file-000.parquet", part=0, num_parts=1,
                        episode_indices=(0, 1), tmp_uri=retried, frames=7, bytes=len(good))
    outcome = writes.commit_episodes_file("file://" + str(out), "d", "meta/episodes/chunk-000/file-000.parquet",
                                        [result])
    assert outcome.status == "imported"
    assert final.read_bytes() == good
    assert not Path(orphan[len("file://"):]).exists()
    assert [p.name for p in final.parent.iterdir()] == ["file-000.parquet"]


def test_killed_run_rerun_gives_identical_output(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(40,) * 240, episodes_per_meta_file=6, features={
        "observation.state": {"dtype": "float32", "shape": [64], "names": None}}))
    clean = tmp_path / "clean"
    assert run_import(root, clean) == 0
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "pipelines.import_lerobot", "--dataset", str(root), "--output", str(out),
           "--runner", "FnApiRunner"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    parts = out / "episodes" / "chunk-000"
    while time.time() < deadline and not (parts.exists() and any(parts.iterdir())):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists(), "the kill must land before the run finished"
    # an episodes file is committed (and journaled) as its last part lands: what the killed run finished
    # stays, marked unchanged by the rerun, which imports only the rest
    committed = len(list((out / ".journal").rglob("file-*.json")))
    assert run_import(root, out) == 0
    resumed, fresh = output_files(out), output_files(clean)
    doc = json.loads(resumed.pop("manifest.json"))
    assert doc["totals"]["episodes_files_unchanged"] == committed
    assert [e["status"] for e in doc["episodes_files"].values()].count("unchanged") == committed
    doc["totals"]["episodes_files_unchanged"] = 0
    doc["totals"]["episodes_files_imported"] += committed
    for entry in doc["episodes_files"].values():
        entry["status"] = "imported"
    assert doc == json.loads(fresh.pop("manifest.json"))
    assert resumed == fresh


def test_no_file_outside_the_root_is_opened(tmp_path):
    """A data file symlinked to a file outside the root is refused before it is read."""
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4)))
    outside = tmp_path / "outside" / "secret.parquet"
    outside.parent.mkdir()
    data = root / "data" / "chunk-000" / "file-000.parquet"
    data.rename(outside)
    data.symlink_to(outside)
    before = outside.stat().st_atime_ns
    os.utime(outside, ns=(before - 10**9, outside.stat().st_mtime_ns))
    sentinel_atime = outside.stat().st_atime_ns
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    errors = read_errors(out)
    assert errors[0]["rule"] == "path_outside_root" and "outside the dataset root" in errors[0]["message"]
    assert outside.stat().st_atime_ns == sentinel_atime, "the file outside the root was read"


def test_templates_leaving_the_root_are_refused_before_any_read(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3,)))
    for template in ("../x/{chunk_index}.parquet", "/etc/{file_index}.parquet", "gs://b/{file_index}.parquet",
                     "data/{chunk_index}/../../../{file_index}.parquet"):
        edit_info(root, lambda info: info.update(data_path=template))
        out = tmp_path / f"out{abs(hash(template))}"
        assert run_import(root, out) == 1
        assert read_errors(out)[0]["rule"] == "path_template", template


def test_an_unexpected_bug_fails_one_episodes_file_not_the_run(tmp_path, monkeypatch):
    """The safety net: an exception no rule foresaw fails its element as rule `internal`; the rest imports."""
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(3, 4, 5, 2), episodes_per_meta_file=2))
    real = writes.part_table

    def buggy(info, rows, *args, **kwargs):
        if rows[0].episode_index == 2:
            raise RuntimeError("simulated bug")
        return real(info, rows, *args, **kwargs)

    monkeypatch.setattr(writes, "part_table", buggy)
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    errors = read_errors(out)
    internal = [e for e in errors if e["rule"] == "internal"]
    assert internal and internal[0]["episodes_file"] == "meta/episodes/chunk-000/file-001.parquet"
    assert "simulated bug" in internal[0]["message"]
    assert {e["episode_index"] for e in errors if e["rule"] == "file_failed"} == {2, 3}
    assert (out / "episodes" / "chunk-000" / "file-000.parquet").exists()
    assert not (out / "episodes" / "chunk-000" / "file-001.parquet").exists()
