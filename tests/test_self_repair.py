"""Self-repair: an output damaged after its import (a media_index shard deleted, a part truncated, a part's
bytes changed at the same size) is found by the next run's up-to-date check and imported again, without
--force, with a note on the terminal and in the manifest; the repaired output equals the fresh import.
`verify` names the command that repairs what it finds. Locally and on the gs:// emulator.

The dataset is `h264_multi_file` (LeRobot's writer: five episodes files over nine MP4s of two cameras, five
media_index shards), so a repair is seen to re-import only the episodes files the damage concerns.
"""

from __future__ import annotations

import json
import shutil

import fsspec
import pytest

import storage_emulators
from pipelines import verify
from tests.helpers import lerobot_dataset, run_import
from tests.test_lease import _gcs
from transforms.output.lease import LEASE_NAME

SHARD = "media_index/videos/observation.images.top/chunk-002.parquet"  # MP4s of meta/episodes/chunk-002 only
TRUNCATED = "episodes/chunk-001/file-000.parquet"
REWRITTEN = "episodes/chunk-000/file-001.parquet"
BUCKET = "self-repair"


@pytest.fixture(scope="module", params=["local", "gs"])
def where(request, tmp_path_factory):
    """(dataset URI, output URI, fsspec filesystem, output path in it) with the dataset imported once."""
    source = lerobot_dataset("h264_multi_file")
    if request.param == "local":
        base = tmp_path_factory.mktemp("repair")
        shutil.copytree(source, base / "ds", ignore=shutil.ignore_patterns("expected_items", "language"))
        fs = fsspec.filesystem("file")
        yield f"file://{base}/ds", f"file://{base}/out", fs, f"{base}/out"
        return
    reason = storage_emulators.missing("gcp_storage_emulator.server", "gcsfs")
    if reason:
        pytest.skip(reason)
    with _gcs():
        fs = fsspec.filesystem("gs")
        fs.mkdir(BUCKET)
        for path in sorted(source.rglob("*")):
            rel = path.relative_to(source)
            if path.is_file() and rel.parts[0] in ("meta", "data", "videos"):
                fs.put_file(str(path), f"{BUCKET}/ds/{rel}")
        yield f"gs://{BUCKET}/ds", f"gs://{BUCKET}/out", fs, f"{BUCKET}/out"


@pytest.fixture(scope="module")
def fresh(where):
    """Every output file of the first import (bytes by path; the manifest's records of what it wrote)."""
    dataset, out, fs, base = where
    assert run_import(dataset, out) == 0
    return snapshot(fs, base)


def snapshot(fs, base: str) -> dict:
    fs.invalidate_cache()
    found = {}
    for path in sorted(fs.find(base)):
        rel = path[len(base) + 1:]
        if not rel.startswith(LEASE_NAME):
            found[rel] = fs.cat_file(path)
    doc = json.loads(found.pop("manifest.json"))
    found["records"] = json.dumps([{rel: (e["status"] in ("imported", "unchanged"), e["part_files"], e["source_digest"])
                                    for rel, e in doc["episodes_files"].items()},
                                   doc["media_index_files"], doc["video_versions"], doc["totals"]["errors"]],
                                  sort_keys=True).encode()
    return found


def rerun(where, capsys, *extra: str) -> tuple[int, list[str], dict]:
    dataset, out, fs, base = where
    capsys.readouterr()
    code = run_import(dataset, out, *extra)
    printed = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("metrics: ")]
    fs.invalidate_cache()
    return code, printed, json.loads(fs.cat_file(f"{base}/manifest.json"))


def imported_by_last_run(doc: dict) -> list[str]:
    return sorted(rel for rel, e in doc["episodes_files"].items() if e["status"] == "imported")


def test_deleted_shard_is_rebuilt_by_the_next_run(where, fresh, capsys):
    dataset, out, fs, base = where
    fs.rm_file(f"{base}/{SHARD}")
    code, printed, doc = rerun(where, capsys)
    note = (f"repair: the media_index shard {SHARD} is missing: it is rebuilt, its MP4s read again and the episodes "
            "files that use them imported again")
    assert code == 0
    assert printed == [f"{dataset}: imported - 10/10 episodes, 104 frames, 1/5 episodes files, 0 errors "
                       f"(4 unchanged) -> {out}", f"  note: {note}"]
    assert doc["notes"] == [note]
    assert imported_by_last_run(doc) == ["meta/episodes/chunk-002/file-000.parquet"]
    assert snapshot(fs, base) == fresh


def test_truncated_part_is_imported_again(where, fresh, capsys):
    dataset, out, fs, base = where
    data = fresh[TRUNCATED]
    fs.pipe_file(f"{base}/{TRUNCATED}", data[: len(data) // 2])
    code, printed, doc = rerun(where, capsys)
    note = (f"repair: the part {TRUNCATED} is {len(data) // 2} bytes, the manifest records {len(data)}: its episodes "
            "file meta/episodes/chunk-001/file-000.parquet is imported again")
    assert code == 0 and printed[1:] == [f"  note: {note}"] and "(4 unchanged)" in printed[0], printed
    assert doc["notes"] == [note]
    assert imported_by_last_run(doc) == ["meta/episodes/chunk-001/file-000.parquet"]
    assert snapshot(fs, base) == fresh


def test_same_size_damage_is_found_with_verify_output(where, fresh, capsys):
    dataset, out, fs, base = where
    data = bytearray(fresh[REWRITTEN])
    data[200] ^= 0xFF  # in the first column chunk: the footer still opens
    fs.pipe_file(f"{base}/{REWRITTEN}", bytes(data))
    code, printed, doc = rerun(where, capsys)  # sizes only: not seen
    assert code == 0 and printed == [f"{dataset}: skipped - unchanged since its import of {doc['finished_at']} "
                                     "(--force redoes it)"]

    report, = verify.verify(out)
    assert [(p.path, p.kind) for p in report.problems] == [(REWRITTEN, "checksum")]
    shown = dataset.removeprefix("file://")  # a local dataset is named by its path
    assert report.repair_command(out) == (
        f"repair: run `lerobot-import --dataset {shown} --output {out} --verify-output` again: it re-imports the "
        "damaged files (--verify-output: a damage of the same size shows only in the sha256)")

    code, printed, doc = rerun(where, capsys, "--verify-output")
    assert code == 0 and len(printed) == 2 and "(4 unchanged)" in printed[0], printed
    assert printed[1].startswith(f"  note: repair: the part {REWRITTEN} has sha256 ")
    recorded = json.loads(fresh["records"])[0]["meta/episodes/chunk-000/file-001.parquet"][1][0]["sha256"]
    assert printed[1].endswith(f", the manifest records {recorded[:16]}... (same size, other bytes): its episodes "
                               "file meta/episodes/chunk-000/file-001.parquet is imported again")
    assert doc["notes"] == [printed[1][len("  note: "):]]
    assert imported_by_last_run(doc) == ["meta/episodes/chunk-000/file-001.parquet"]
    assert snapshot(fs, base) == fresh
    assert verify.verify(out)[0].ok

    code, printed, doc = rerun(where, capsys, "--verify-output")  # repaired: nothing left to do
    assert code == 0 and printed[0].startswith(f"{dataset}: skipped - unchanged")


@pytest.mark.parametrize("where", ["local"], indirect=True)  # paths as a user types them: local ones
def test_verify_names_the_repair_command_with_the_users_paths(where, fresh, capsys, monkeypatch):
    dataset, out, fs, base = where
    work = dataset[len("file://"):].rsplit("/", 1)[0]
    monkeypatch.chdir(work)
    fs.rm_file(f"{base}/{SHARD}")
    fs.pipe_file(f"{base}/{TRUNCATED}", b"PAR1")
    assert verify.run(["out"]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"{out}: 3 problems"  # the shard missing; the part of another size, unreadable
    assert printed[-1] == ("  repair: run `lerobot-import --dataset ds --output out` again: it re-imports the "
                           "damaged files")
    # the command it names does repair them
    assert run_import("ds", "out") == 0
    assert snapshot(fs, base) == fresh
    assert verify.run(["out"]) == 0
