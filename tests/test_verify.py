"""`lerobot-import verify`: a real import of the sample, damaged one way per test, and each damage found
by the name of the file it hit."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import verify
from tests.helpers import imported_sample
from transforms.lerobot import sources

PART = "episodes/chunk-000/file-000.parquet"
EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"
INDEX = "media_index/videos/observation.images.front/chunk-000.parquet"  # one shard per folder of MP4s


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> tuple[Path, Path]:
    """(dataset copy, its output): one import of the sample for the whole module."""
    return imported_sample(tmp_path_factory.mktemp("verify"))


@pytest.fixture
def out(imported, tmp_path) -> Path:
    """A copy of the import to damage."""
    return Path(shutil.copytree(imported[1], tmp_path / "out"))


def _problems(out: Path, **kw) -> list[tuple[str, str]]:
    (report,) = verify.verify(str(out), **kw)
    return [(p.path, p.kind) for p in report.problems]


def _edit_manifest(out: Path, edit) -> None:
    path = out / "manifest.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def test_a_sound_import_verifies(out, capsys):
    (report,) = verify.verify(str(out))
    assert report.ok and report.parts == 1 and report.checksums == 1 and report.media_index_files == 2
    assert verify.run([str(out)]) == 0
    assert capsys.readouterr().out == f"file://{out}: ok - 1 parts (1 checksums), 2 media_index files\n"


def test_truncated_part(out, capsys):
    part = out / PART
    size = part.stat().st_size
    part.write_bytes(part.read_bytes()[: size // 2])
    assert _problems(out) == [(PART, "size"), (PART, "unreadable")]
    assert verify.run([str(out)]) == 1
    printed = capsys.readouterr().out
    assert f"{PART}: [size] {size // 2} bytes, the manifest records {size}: truncated or rewritten" in printed


def test_rewritten_part_of_the_same_size(out):
    part = out / PART
    data = bytearray(part.read_bytes())
    data[64] ^= 0xFF  # inside the first column chunk: the footer still opens
    part.write_bytes(bytes(data))
    (report,) = verify.verify(str(out))
    assert [(p.path, p.kind) for p in report.problems] == [(PART, "checksum")]
    assert "the content changed since the import" in report.problems[0].message


def test_deleted_part(out):
    (out / PART).unlink()
    (report,) = verify.verify(str(out))
    assert [str(p) for p in report.problems] == [f"{PART}: [missing] listed in the manifest but not in the output"]


def test_extra_part_and_leftover_temporary_files(out):
    shutil.copy(out / PART, out / "episodes/chunk-000/file-001.parquet")
    (out / "episodes/chunk-000/.file-000.parquet.tmp-0a1b").write_bytes(b"half a part")
    (out / ".manifest.json.tmp-99").write_bytes(b"{")
    assert _problems(out) == [(".manifest.json.tmp-99", "tmp"),
                              ("episodes/chunk-000/.file-000.parquet.tmp-0a1b", "tmp"),
                              ("episodes/chunk-000/file-001.parquet", "unlisted")]


def test_media_index_and_errors_file(out):
    (out / INDEX).unlink()
    with open(out / "errors.jsonl", "a") as f:
        f.write('{"rule": "io"}\n')
    assert _problems(out) == [("errors.jsonl", "errors"), (INDEX, "missing")]


def test_media_index_shard_against_its_record(out):
    """Shards are checked as parts are: size, sha256 and rows as the manifest records them."""
    shard = out / INDEX
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[: size - 10])
    (report,) = verify.verify(str(out))
    assert [(p.path, p.kind) for p in report.problems] == [(INDEX, "size"), (INDEX, "unreadable")]
    assert report.problems[0].message == (f"media_index shard: {size - 10} bytes, the manifest records {size}: "
                                          "truncated or rewritten since the import")
    table = pq.read_table(out / "media_index/videos/observation.images.wrist/chunk-000.parquet")
    pq.write_table(table, shard, row_group_size=1, compression="zstd", use_compliant_nested_type=False)
    _edit_manifest(out, lambda doc: [r.update(bytes=shard.stat().st_size, rows=table.num_rows)
                                     for r in doc["media_index_files"] if r["path"] == INDEX])
    (report,) = verify.verify(str(out))
    assert [(p.path, p.kind) for p in report.problems] == [(INDEX, "checksum")]
    assert "the content changed since the import" in report.problems[0].message


def test_row_count_against_the_record(out):
    _edit_manifest(out, lambda doc: doc["episodes_files"][EPISODES_FILE]["part_files"][0].update(rows=5))
    (report,) = verify.verify(str(out))
    assert [str(p) for p in report.problems] == [f"{PART}: [rows] holds 4 rows, the manifest records 5"]


def test_without_recorded_part_files_existence_readability_and_episodes(out):
    """A manifest from an import that recorded no per-part sizes and checksums."""
    _edit_manifest(out, lambda doc: doc["episodes_files"][EPISODES_FILE].pop("part_files"))
    (report,) = verify.verify(str(out))
    assert report.ok and report.checksums == 0
    assert "no checksums recorded" in report.summary()
    pq.write_table(pq.read_table(out / PART).slice(0, 3), out / PART)  # a readable part missing an episode
    assert _problems(out) == [(PART, "rows")]
    (out / PART).write_bytes(b"PAR1 not really")
    assert _problems(out) == [(PART, "unreadable")]


def test_lease_files_are_not_leftovers(out):
    (out / ".lease.json").write_text("{}")
    (out / ".lease.json.lock").write_text("")
    assert _problems(out) == []


def test_bulk_layout_verifies_every_dataset_output(imported, tmp_path, capsys):
    bulk = tmp_path / "bulk"
    for name in ("alpha", "beta"):
        shutil.copytree(imported[1], bulk / name)
    (bulk / "beta" / PART).unlink()
    reports = verify.verify(str(bulk))
    assert [(Path(r.output).name, r.ok) for r in reports] == [("alpha", True), ("beta", False)]
    assert verify.run([str(bulk)]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == "2 dataset outputs verified, 1 with problems"
    assert f"  {PART}: [missing] listed in the manifest but not in the output" in printed


def test_not_an_output(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (report,) = verify.verify(str(tmp_path / "empty"))
    assert [(p.path, p.kind) for p in report.problems] == [("manifest.json", "manifest")]
    (tmp_path / "empty" / "manifest.json").write_text("{trunc")
    assert _problems(tmp_path / "empty") == [("manifest.json", "manifest")]


def _record_sources(dataset: Path, out: Path) -> None:
    """Write into the manifest what an incremental import records per episodes file (the source digest)."""
    doc = json.loads((out / "manifest.json").read_text())
    scanned = sources.scan_dataset(str(dataset), doc["options"])
    doc["dataset"] = scanned.root
    for src in scanned.files:
        doc["episodes_files"][src.episodes_file].update(src.to_manifest())
    (out / "manifest.json").write_text(json.dumps(doc))


def test_sources_stale_against_the_dataset(imported, tmp_path, capsys):
    dataset = Path(shutil.copytree(imported[0], tmp_path / "so101"))
    out = Path(shutil.copytree(imported[1], tmp_path / "out"))
    assert _problems(out, check_sources=True) == []  # the import recorded its sources
    _record_sources(dataset, out)
    (report,) = verify.verify(str(out), check_sources=True)
    assert report.ok and report.summary().endswith("sources current")
    data = dataset / "data/chunk-000/file-000.parquet"
    os.utime(data, ns=(data.stat().st_atime_ns, data.stat().st_mtime_ns + 10**9))
    shutil.copy(dataset / EPISODES_FILE, dataset / "meta/episodes/chunk-000/file-001.parquet")
    assert verify.run([str(out), "--sources"]) == 1
    printed = capsys.readouterr().out
    assert (f"  {EPISODES_FILE}: [stale] its sources changed since it was imported (info.json, the episodes file, "
            "or a data file or MP4 it references)") in printed
    assert "  meta/episodes/chunk-000/file-001.parquet: [stale] a new episodes file of the dataset" in printed


def test_sources_failed_and_gone_episodes_files(imported, tmp_path):
    dataset = Path(shutil.copytree(imported[0], tmp_path / "so101"))
    out = Path(shutil.copytree(imported[1], tmp_path / "out"))
    _record_sources(dataset, out)

    def fail_and_add_gone(doc):
        doc["episodes_files"][EPISODES_FILE]["status"] = "failed"
        doc["episodes_files"]["meta/episodes/chunk-000/file-009.parquet"] = {"status": "imported", "parts": []}
    _edit_manifest(out, fail_and_add_gone)
    (report,) = verify.verify(str(out), check_sources=True)
    assert [(p.path, p.kind, p.message.split(";")[0].split(" (")[0]) for p in report.problems] == [
        (EPISODES_FILE, "stale", "its last import failed"),
        ("meta/episodes/chunk-000/file-009.parquet", "stale", "no longer in the dataset")]


def test_part_with_a_parquet_footer_but_other_rows(out):
    table = pq.read_table(out / PART)
    pq.write_table(pa.concat_tables([table, table]), out / PART)
    kinds = _problems(out)
    assert kinds == [(PART, "rows"), (PART, "size")]
