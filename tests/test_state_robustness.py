"""The output's state broken by a disk, a clock or a colleague: absurd leases, huge or deeply nested state
files, a damaged media_index shard, a full disk, an output that is a file. Each is named by its rule (or
repaired), through the CLI or the public API, without a traceback and in bounded time and memory."""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import plan, verify
from tests.helpers import imported_sample, read_manifest, run_import
from transforms.output import lease
from transforms.base.errors import LeRobotImportError

FRONT_SHARD = "media_index/videos/observation.images.front/chunk-000.parquet"


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> tuple[Path, Path]:
    return imported_sample(tmp_path_factory.mktemp("robust"))


@pytest.fixture
def case(imported, tmp_path) -> tuple[Path, Path]:
    dataset = Path(shutil.copytree(imported[0], tmp_path / "so101"))
    out = Path(shutil.copytree(imported[1], tmp_path / "out"))
    doc = json.loads((out / "manifest.json").read_text())
    doc["dataset"] = "file://" + str(dataset)
    (out / "manifest.json").write_text(json.dumps(doc))
    return dataset, out


def _lease_doc(**values) -> bytes:
    now = time.time()
    doc = {"run_id": "r", "host": "elsewhere", "pid": 1, "job": "", "started_at": now, "renewed_at": now,
           "expires_at": now + 60, **values}
    return json.dumps(doc).encode()  # json writes NaN and Infinity as Python reads them


@pytest.mark.parametrize("values, why", [
    ({"expires_at": float("nan")}, "records expires_at = nan, not a time"),
    ({"expires_at": float("inf")}, "records expires_at = inf, not a time"),
    ({"started_at": float("-inf")}, "records started_at = -inf, not a time"),
    ({"expires_at": 1e300}, "expires 1e+300 s from now"),
    ({"expires_at": -1e12}, "records expires_at = -1000000000000.0, not a time"),  # the year -29719
    ({"expires_at": 99_000_000_000.0}, "expires "),  # the year 5107: "further than any lease this importer takes"
    ({"pid": 2 ** 70}, "names the process id 1180591620717411303424, which no process has"),
])
def test_absurd_lease_is_refused_naming_the_file_to_delete(case, values, why, capsys):
    dataset, out = case
    (out / ".lease.json").write_bytes(_lease_doc(**values))
    assert run_import(dataset, out, "--force") == 1
    printed = capsys.readouterr().out
    path = f"file://{out}/.lease.json"
    assert f"error: [lease] file .lease.json: the lease file {path} {why}" in printed, printed
    if values.get("expires_at") == 99_000_000_000.0:
        assert "(at 5107-03-10T08:00:00+00:00), further than any lease this importer takes (168 h 0 min)" in printed
    assert f"If no import is running on file://{out}, delete {path} and run again" in printed
    assert plan.run(["--dataset", str(dataset), "--output", str(out)]) == 0
    assert f"lease: cannot read the lease: [lease] file .lease.json: the lease file {path} " in capsys.readouterr().out


def test_deeply_nested_or_truncated_lease_is_taken_over(case, capsys):
    dataset, out = case
    (out / ".lease.json").write_bytes(b"[" * 30_000 + b"]" * 30_000)  # deeper than json parses, under 64 KiB
    assert run_import(dataset, out, "--force") == 0
    assert "took over the expired lease on" in capsys.readouterr().out
    assert not (out / ".lease.json").exists()


def test_huge_state_files_are_read_bounded(case, capsys):
    dataset, out = case
    with open(out / ".lease.json", "wb") as f:
        f.truncate(1 << 30)  # 1 GiB, sparse: reading it whole would take a GiB of memory
    with open(out / "errors.jsonl", "ab") as f:
        f.truncate(256 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    assert run_import(dataset, out, "--force") == 1
    assert f"the lease file file://{out}/.lease.json is larger than 65,536 bytes" in capsys.readouterr().out
    (out / ".lease.json").unlink()
    report, = verify.verify(str(out))  # errors.jsonl counted block by block
    assert [(p.path, p.kind) for p in report.problems] == [("errors.jsonl", "errors")]
    assert report.problems[0].message == "holds 1 rows, the manifest counts 0 errors"
    with open(out / "manifest.json", "ab") as f:
        f.truncate(300 << 20)
    report, = verify.verify(str(out))
    assert [(p.path, p.kind) for p in report.problems] == [("manifest.json", "manifest")]
    assert "manifest manifest.json is 314,572,800 bytes; at most 67,108,864 bytes" in report.problems[0].message
    assert time.monotonic() - start < 300  # a hang never ends; a loaded machine is slow
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 200, f"peak RSS grew {grown_mib:.0f} MiB"


def test_deeply_nested_manifest_is_named_not_a_traceback(case, capsys):
    dataset, out = case
    (out / "manifest.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    report, = verify.verify(str(out))
    assert [(p.path, p.kind) for p in report.problems] == [("manifest.json", "manifest")]
    assert "is nested too deeply to read" in report.problems[0].message
    (out / "manifest.json").write_text(json.dumps({"episodes_files": {}, "x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[
        ]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}))
    report, = verify.verify(str(out))
    assert "nests deeper than 32 levels, which no import writes" in report.problems[0].message
    assert plan.run(["--dataset", str(dataset), "--output", str(out)]) == 0  # no manifest to carry: import all
    assert "1 episodes files to import" in capsys.readouterr().out


def test_damaged_shard_is_rebuilt(case):
    dataset, out = case
    good = (out / FRONT_SHARD).read_bytes()
    rows = pq.read_table(out / FRONT_SHARD, columns=["size", "index"]).to_pylist()
    (out / FRONT_SHARD).write_bytes(good[: len(good) // 2])  # truncated
    os.utime(dataset / "meta" / "info.json")  # the dataset changed since: the run is not skipped
    assert run_import(dataset, out) == 0
    # the MP4 read again, its row written again (under the URI of the dataset copy this case imports)
    assert pq.read_table(out / FRONT_SHARD, columns=["size", "index"]).to_pylist() == rows
    report, = verify.verify(str(out))
    assert report.ok, report.problems
    record = {r["path"]: r for r in read_manifest(out)["media_index_files"]}[FRONT_SHARD]
    assert record["bytes"] == (out / FRONT_SHARD).stat().st_size


def test_failed_lease_write_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(LeRobotImportError) as refused:
        lease.acquire(str(out), run_id="run-a")
    assert refused.value.rule == "disk_full"
    assert str(refused.value).startswith(f"[disk_full] writing file://{out}/.lease.json failed: the storage has no "
                                         "space left (No space left on device); free some space")
    assert sorted(p.name for p in out.iterdir()) == [".lease.json.lock"]


def test_full_disk_fails_parts_by_rule(case, monkeypatch):
    dataset, out = case
    from transforms.base import storage
    real = storage.write_tmp

    def full(final_uri, write):
        if "/episodes/" in final_uri:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(final_uri, write)

    monkeypatch.setattr(storage, "write_tmp", lambda uri, write: _named(full, uri, write))
    assert run_import(dataset, out, "--force") == 1
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert {e["rule"] for e in errors} == {"disk_full", "file_failed"}, errors
    assert not [p for p in out.rglob(".*.tmp-*")]


def _named(write_tmp, uri, write):
    from transforms.base import storage
    try:
        return write_tmp(uri, write)
    except OSError as ex:
        raise storage.write_error(ex, uri) from None


def test_output_that_is_a_file_is_refused(case, tmp_path, capsys):
    dataset, _ = case
    target = tmp_path / "a-file"
    target.write_bytes(b"not a folder")
    assert run_import(dataset, target) == 1
    assert f"error: [output_not_writable] file file://{target}: the output file://{target} is a file, not a " \
           "folder" in capsys.readouterr().out
    assert target.read_bytes() == b"not a folder"


@pytest.mark.parametrize("code, rule, cause", [
    (errno.ENOSPC, "disk_full", "the storage has no space left (No space left on device); free some space"),
    (errno.EROFS, "output_not_writable", "Read-only file system; give --output a folder this run may write"),
])
def test_manifest_write_on_a_full_or_read_only_disk_is_named(case, monkeypatch, capsys, code, rule, cause):
    from fsspec.implementations.local import LocalFileSystem
    dataset, out = case
    before = {p: p.read_bytes() for p in (out / "manifest.json", out / "errors.jsonl")}
    real = LocalFileSystem._open

    def refusing(self, path, mode="rb", *args, **kwargs):
        if "manifest.json" in str(path) and "w" in mode:
            raise OSError(code, os.strerror(code))
        return real(self, path, mode, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "_open", refusing)
    assert run_import(dataset, out, "--force") == 1
    text = capsys.readouterr().out
    assert f"FAILED - [{rule}] writing file://{out}/manifest.json failed: {cause}" in text, text
    assert "(manifest.json and errors.jsonl left as the last run wrote them)" in text
    assert "internal" not in text and "Traceback" not in text
    assert {p: p.read_bytes() for p in before} == before  # the last run's pair, whole
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]
    monkeypatch.setattr(LocalFileSystem, "_open", real)  # space freed: the rerun finishes the output
    assert run_import(dataset, out) == 0
    report, = verify.verify(str(out))
    assert report.ok, report.problems


def test_read_only_output_folder_is_named_and_nothing_is_written(case, tmp_path, monkeypatch, capsys):
    """A read-only --output (a read-only mount; root ignores a folder's mode bits, so the filesystem's
    answer is what the test gives): one line naming rule output_not_writable, nothing written there."""
    dataset, _ = case
    out = tmp_path / "ro"
    out.mkdir()
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if str(path).startswith(str(out)) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    assert run_import(dataset, out) == 1
    text = capsys.readouterr().out
    assert (f"error: [output_not_writable] writing file://{out}/.lease.json failed: Read-only file system; give "
            "--output a folder this run may write (not a read-only filesystem), or fix its permissions") in text, text
    assert "Traceback" not in text and "internal" not in text
    assert list(out.iterdir()) == []
