"""What a run's summary reads of a large output stays bounded: the manifest is parsed as it is read, an episodes
file's entry at a time and without its source listings (a path per episode of a v2.x group), errors.jsonl a
piece at a time, and a v2.x dataset's parsed episodes.jsonl (kept per worker) holds each distinct task list once.

The memory figures are Python's own allocations (tracemalloc) while the file is read: a whole-file read holds
the file at least twice (bytes and text) beside its objects, a bounded one a piece and one entry."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from pipelines import report
from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import v2
from transforms.output import safety


def _entry(group: int, episodes: int) -> dict:
    """A v2.x group's manifest entry as an import writes it: its data files and both cameras' MP4s listed."""
    eps = range(group * episodes, (group + 1) * episodes)
    return {"status": "imported", "run_id": "r1", "source_digest": f"{group:064x}", "source_basis": "b",
            "source_data_files": [f"data/chunk-{group:03d}/episode_{e:06d}.parquet" for e in eps],
            "source_video_files": [f"videos/chunk-{group:03d}/observation.images.{cam}/episode_{e:06d}.mp4"
                                   for cam in ("side", "top") for e in eps],
            "parts": [f"episodes/chunk-{group:03d}.parquet"], "episodes": episodes, "episodes_written": 0,
            "episodes_failed": episodes, "frames": 0, "bytes": 100, "data_bytes": 0, "failures": 2 * episodes,
            "notes": ["é ✓ \u2028 \"quoted\""],
            "quality": {"checks": {}, "table": f"quality/chunk-{group:03d}.parquet"},
            "part_files": [{"bytes": 100, "path": f"episodes/chunk-{group:03d}.parquet", "rows": 0, "sha256": "0"}]}


def _manifest(groups: int, episodes: int) -> dict:
    return {"dataset": "file:///data/ds", "run_id": "r1", "status": "failed", "notes": ["a note"],
            "totals": {"episodes": groups * episodes, "errors": 2 * groups * episodes}, "media_index": [],
            "episodes_files": {f"meta/episodes.jsonl:chunk-{g:03d}": _entry(g, episodes) for g in range(groups)}}


def _without_listings(doc):
    if isinstance(doc, dict):
        return {k: _without_listings(v) for k, v in doc.items() if k not in safety.SOURCE_LISTINGS}
    if isinstance(doc, list):
        return [_without_listings(v) for v in doc]
    return doc


def _write(tmp_path: Path, name: str, data: bytes) -> str:
    out = tmp_path / name
    out.mkdir()
    (out / "manifest.json").write_bytes(data)
    return str(out)


def _peak(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_summary_s_manifest_read_holds_a_piece_and_an_entry_not_the_file(tmp_path):
    data = (json.dumps(_manifest(60, 1000), indent=2, sort_keys=True) + "\n").encode()
    assert len(data) > 10_000_000
    out = _write(tmp_path, "out", data)
    found, peak = _peak(lambda: safety.read_manifest(out, listings=False))
    assert found.problem is None
    assert found.doc == _without_listings(json.loads(data))
    assert found.doc["episodes_files"]["meta/episodes.jsonl:chunk-059"]["episodes_failed"] == 1000
    # a piece of text (1 MiB, as bytes and as text) and one entry's 3,000 paths, far below the file's 10 MB
    assert peak < 6_000_000, peak
    full, full_peak = _peak(lambda: safety.read_manifest(out))
    assert full.doc == json.loads(data) and full_peak > 2 * len(data)


@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
@pytest.mark.parametrize("case", ["indented", "compact", "bom", "utf16", "spaces", "duplicate_key", "nan"])
def test_the_streamed_manifest_read_reads_what_json_reads(tmp_path, monkeypatch, piece, case):
    """Cut anywhere (a piece of 1 byte splits every multi-byte character and number), in any encoding JSON
    allows, the streamed parse gives json.loads' document less the listings."""
    doc = _manifest(3, 4)
    data = {"indented": (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(),
            "compact": json.dumps(doc, ensure_ascii=False).encode(),
            "bom": b"\xef\xbb\xbf" + json.dumps(doc).encode(),
            "utf16": json.dumps(doc, ensure_ascii=False).encode("utf-16"),
            "spaces": b" \r\n\t " + json.dumps(doc, indent=1).replace(": ", " :\t").encode() + b"\n \n",
            "duplicate_key": b'{"episodes_files": {"a": {"parts": []}, "a": {"parts": [], "x": 12345}}, '
                             b'"episodes_files": {"b": {"source_data_files": [1], "y": -1.5e3}}, "z": 10}',
            "nan": b'{"episodes_files": {}, "x": NaN, "y": -Infinity, "z": 1234567890123456789012}'}[case]
    monkeypatch.setattr(safety, "MANIFEST_PIECE", piece)
    out = _write(tmp_path, "out", data)
    full, streamed = safety.read_manifest(out), safety.read_manifest(out, listings=False)
    assert full.problem is None and streamed.problem is None
    assert streamed.doc == _without_listings(full.doc)


@pytest.mark.parametrize("data, rule, words", [
    (b"", "manifest", "is not JSON"),
    (b'{"episodes_files": {}', "manifest", "is not JSON"),
    (b'{"episodes_files": {"a": {"parts": []}}} {}', "manifest", "is not JSON"),
    (b'{"episodes_files": {"a": {"parts": ["x"]}}, }', "manifest", "is not JSON"),
    (b'{"episodes_files": {1: {}}}', "manifest", "is not JSON"),
    (b'{"episodes_files": 12', "manifest", "is not JSON"),
    (b"[1, 2]", "manifest", "no `episodes_files` object"),
    (b"123", "manifest", "no `episodes_files` object"),
    (b'{"episodes_files": {}, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "manifest", "nested"),
    (b'{"episodes_files": {"../elsewhere": {}}}', "output_confinement", "not a clean relative path"),
    (b'{"episodes_files": {"a": {"parts": ["../../x.parquet"]}}}', "output_confinement", "x.parquet"),
    (b'{"episodes_files": {}, "x": "\xff"}', "manifest", "is not JSON"),
])
def test_the_streamed_manifest_read_refuses_what_the_full_read_refuses(tmp_path, monkeypatch, data, rule, words):
    monkeypatch.setattr(safety, "MANIFEST_PIECE", 5)
    out = _write(tmp_path, "out", data)
    full, streamed = safety.read_manifest(out), safety.read_manifest(out, listings=False)
    assert full.doc is None and streamed.doc is None
    assert (full.problem.rule, streamed.problem.rule) == (rule, rule)
    assert words in full.problem.message and words in streamed.problem.message, (full.problem, streamed.problem)


def test_the_streamed_manifest_read_stops_at_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(safety, "MAX_MANIFEST_BYTES", 1000)
    monkeypatch.setattr(safety, "MANIFEST_PIECE", 64)
    out = _write(tmp_path, "out", json.dumps(_manifest(1, 40)).encode())
    found = safety.read_manifest(out, listings=False)
    assert found.doc is None and found.problem.rule == "limit"
    assert found.problem.message.startswith("manifest manifest.json is more than 1,000 bytes; at most 1,000 bytes")


def test_the_streamed_manifest_read_refuses_a_link_or_a_fifo_without_waiting(tmp_path):
    real = _write(tmp_path, "real", json.dumps(_manifest(1, 2)).encode())
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "manifest.json").symlink_to(Path(real) / "manifest.json")
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "manifest.json")
    assert safety.read_manifest(str(linked), listings=False).problem.rule == "output_confinement"
    assert safety.read_manifest(str(fifo), listings=False).problem.rule == "not_a_file"
    missing = safety.read_manifest(str(tmp_path / "none"), listings=False)
    assert missing.doc is None and missing.problem is None


def _rows(n: int, start: int = 0) -> bytes:
    return b"".join(json.dumps({"rule": "file_missing", "episode_index": i, "file": f"data/e{i}.parquet",
                                "message": "x" * 200}).encode() + b"\n" for i in range(start, start + n))


def test_the_summary_reads_errors_a_piece_at_a_time(tmp_path):
    path = tmp_path / "errors.jsonl"
    path.write_bytes(_rows(60_000))
    assert path.stat().st_size > 15_000_000
    rows = report._read_errors(f"file://{path}")
    count, peak = _peak(lambda: sum(1 for _ in rows))
    assert count == 60_000 and rows.total is None
    assert peak < 4_000_000, peak  # a 1 MiB piece, its lines, one row: not the file's 15 MB


def test_errors_past_the_bound_are_counted_and_the_last_line_within_it_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "ERRORS_PIECE", 7)
    path = tmp_path / "errors.jsonl"
    whole = _rows(5)
    path.write_bytes(whole + b'{"rule": "last", "message": "no newline"}')  # the end of the file ends its row
    rows = report._read_errors(f"file://{path}")
    assert [r["rule"] for r in rows] == ["file_missing"] * 5 + ["last"] and rows.total is None
    # a bound in the middle of the third row: two rows parsed, every row of the file counted
    monkeypatch.setattr(report, "MAX_ERRORS_READ", len(_rows(2)) + 10)
    path.write_bytes(whole + _rows(3, 5))
    rows = report._read_errors(f"file://{path}")
    assert [r["episode_index"] for r in rows] == [0, 1] and rows.total == 8
    lines = report.findings_lines(rows, "ERRORS", rows_total=lambda: rows.total)
    assert lines[-1] == "  every row: ERRORS (8 rows; the lines above count its first 2)"


def test_errors_that_cannot_be_read_give_no_rows_and_no_wait(tmp_path):
    os.mkfifo(tmp_path / "fifo.jsonl")
    (tmp_path / "real.jsonl").write_bytes(_rows(2))
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "real.jsonl")
    for name in ("fifo.jsonl", "link.jsonl", "none.jsonl"):
        rows = report._read_errors(f"file://{tmp_path / name}")
        assert list(rows) == [] and rows.total is None
    with pytest.raises(LeRobotImportError, match="is a FIFO"):
        storage.open_state_file(f"file://{tmp_path / 'fifo.jsonl'}", what="errors file", file="errors.jsonl")
    assert storage.open_state_file(f"file://{tmp_path / 'none.jsonl'}", what="errors file", file="x") is None


def test_episodes_jsonl_holds_each_distinct_task_list_once(monkeypatch):
    monkeypatch.setattr(v2, "TASK_LISTS_SLICE", 3)  # the lists converted a slice at a time, shared across slices
    tasks = [["pick"], ["pick", "place"], ["pick"], [], ["pick", "place"], ["pick"], ["é"]]
    raw = b"".join(json.dumps({"episode_index": i, "tasks": t, "length": 1}).encode() + b"\n"
                   for i, t in enumerate(tasks))
    episodes = v2.parse_episodes_jsonl(raw)
    assert episodes.tasks == tuple(tuple(t) for t in tasks)
    assert episodes.tasks[0] is episodes.tasks[2] is episodes.tasks[5]
    assert episodes.tasks[1] is episodes.tasks[4]
    assert len({id(t) for t in episodes.tasks}) == 4
