"""Hostile inputs: every broken dataset of tests/hostile_datasets.py, imported end to end.

For each case: the run exits 1; errors.jsonl has a row with the expected rule naming the file (and
the episode where there is one) with a clear message (no traceback, no bare exception class name);
the failed episodes files have no part and no `.tmp-` file is left; every other episodes file
still imports; the manifest adds up; nothing inside the dataset was written. A dataset-level failure
(info.json) is reported either once for the dataset, before its episodes files are listed, or for
every episodes file. `pytest -s` prints a table of case -> outcome at the end. The time and memory
each case costs are measured by tests/bench/bench_hostile_inputs.py.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.helpers import read_errors, read_manifest, run_import
from tests.hostile_datasets import ALL, CASES, HostileCase, build, corpus_dataset

#: A case that takes longer than this is a hang.
CASE_TIMEOUT_S = 90

_OUTCOMES: dict[str, tuple] = {}

# A message that is only a library exception, e.g. "ArrowInvalid", "KeyError: 'x'", "struct.error".
_BARE_EXCEPTION = re.compile(r"^[\w.]*(Error|Exception|Invalid|error)(: .{0,40})?$")


def _params():
    out = []
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=case.xfail)] if case.xfail else []
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


@pytest.fixture(scope="module", autouse=True)
def _outcome_table():
    yield
    if not _OUTCOMES:
        return
    width = max(len(n) for n in _OUTCOMES)
    lines = ["", f"{'case':<{width}}  exit  {'rules':<36} failed episodes files", "-" * (width + 100)]
    for name in sorted(_OUTCOMES):
        status, rules, failed, seconds = _OUTCOMES[name]
        lines.append(f"{name:<{width}}  {status!s:<4}  {','.join(rules) or '-':<36} "
                     f"{', '.join(f.replace('meta/episodes/', '') for f in failed) or '-'}  ({seconds:.1f}s)")
    print("\n".join(lines))


class _Timeout(Exception):
    pass


def _run_bounded(root: Path, out: Path, extra: tuple[str, ...]) -> int:
    def alarm(*_):
        raise _Timeout(f"the import did not finish within {CASE_TIMEOUT_S} s")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        return run_import(root, out, *extra)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def tree_state(root: Path) -> dict[str, tuple]:
    """(type, size, mtime) of everything under `root`, without opening anything (FIFOs, devices)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _message_body(message: str) -> str:
    """The message after its "[rule] where: " prefix."""
    body = re.sub(r"^\[\w+\] ", "", message)
    return body.split(": ", 1)[1] if body.startswith("dataset ") and ": " in body else body


def _assert_clear(message: str) -> None:
    assert "Traceback" not in message and 'File "' not in message, message
    body = _message_body(message)
    assert len(body) >= 15, f"message too short to act on: {message!r}"
    assert not _BARE_EXCEPTION.match(body.strip()), f"bare exception as message: {message!r}"
    assert "(internal:" not in message, f"a parser safety net fired instead of a check: {message!r}"
    assert not re.search(r"\bnp\.\w+\(", message), f"a numpy repr leaked into the message: {message!r}"
    assert not message.startswith("[internal]"), f"an unexpected exception: {message!r}"


@pytest.mark.parametrize("case", _params())
def test_hostile_dataset(case: HostileCase, tmp_path):
    if not corpus_dataset().exists() and case.base != "factory":
        pytest.skip(f"corpus not found at {corpus_dataset()}")
    root = build(case, tmp_path)
    out = tmp_path / "out"
    before = tree_state(root)
    started = time.monotonic()
    if case.kind == "refused":
        with pytest.raises(SystemExit) as raised:
            _run_bounded(root, out, case.extra_args)
        message = str(raised.value)
        assert message.startswith(f"error: [{case.expect.rules[0]}] ") and "\n" not in message, message
        assert all(word in message for word in case.expect.words), message
        assert not out.exists() and tree_state(root) == before
        _OUTCOMES[case.name] = (1, [case.expect.rules[0]], ["(refused before writing)"], time.monotonic() - started)
        return
    status = _run_bounded(root, out, case.extra_args)
    seconds = time.monotonic() - started
    assert tree_state(root) == before, "the import wrote inside the dataset"

    errors = read_errors(out)
    manifest = read_manifest(out)
    failed = sorted({e["episodes_file"] for e in errors if e["episodes_file"]})
    _OUTCOMES[case.name] = (status, sorted({e["rule"] for e in errors if e["rule"] != "file_failed"}), failed,
                            seconds)
    totals = manifest["totals"]
    assert totals["episodes"] == totals["episodes_written"] + totals["episodes_failed"], totals
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name], "a temporary file was left behind"
    for e in errors:
        _assert_clear(e["message"])

    if case.kind == "empty":
        _check_empty_episodes_file(case, out, status, errors, manifest)
        return
    if case.kind == "imports":
        assert status == 0 and errors == [], f"exit status {status}; errors: {errors}"
        assert manifest["status"] == "imported"
        assert {rel for rel, e in manifest["episodes_files"].items() if e["status"] == "imported"} == set(
            case.episodes_files)
        assert totals["episodes_written"] == 10 and totals["frames"] == 104, totals
        return

    expect = case.expect
    assert status == 1, f"exit status {status}; errors: {errors}"
    assert manifest["status"] == "failed"
    ours = [e for e in errors if e["rule"] in expect.rules]
    assert ours, f"no row with rule {expect.rules}: {errors}"
    if expect.file is not None:
        ours = [e for e in ours if e["file"] == expect.file]
        assert ours, f"no {expect.rules} row names file {expect.file}: {errors}"
    if expect.episode is not None:
        ours = [e for e in ours if e["episode_index"] == expect.episode]
        assert ours, f"no {expect.rules} row names episode {expect.episode}: {errors}"
        assert f"episode {expect.episode}" in ours[0]["message"]
    row = ours[0]
    assert row["dataset"] == "file://" + str(root)
    for word in expect.words:
        assert word in row["message"], (word, row["message"])
    if row["episodes_file"]:
        assert row["episodes_file"] in row["message"]
    if expect.file and expect.file != row["episodes_file"]:
        assert expect.file in row["message"], row["message"]

    all_files = set(case.episodes_files)
    expected_failed = all_files if expect.failed is ALL else set(expect.failed)
    if expect.failed is ALL and not failed:  # reported once for the dataset, before listing its files
        assert row["episodes_file"] is None and totals["episodes_written"] == 0, (row, totals)
        assert totals["episodes_files"] == 0, totals
    else:
        assert set(failed) == expected_failed, f"failed {failed}, expected {sorted(expected_failed)}"
    for rel in all_files:
        part = out / "episodes" / rel[len("meta/episodes/"):]
        entry = manifest["episodes_files"].get(rel)
        if rel in expected_failed:
            assert not part.exists(), f"a part was written for the failed {rel}"
            assert not list(part.parent.glob(part.stem + ".part-*")) if part.parent.exists() else True
            if entry is not None:
                assert entry["status"] == "failed", entry
        else:
            # one part, or ordered parts where a rewritten data file holds its episodes in one row group
            assert entry["status"] == "imported", entry
            assert entry["parts"] and all((out / p).exists() for p in entry["parts"]), f"{rel} did not import"


def _check_empty_episodes_file(case, out: Path, status: int, errors: list, manifest: dict) -> None:
    """An episodes file with no rows is an empty episodes file, not an error: it imports as an empty
    part (the schema of the dataset's episodes, zero rows), and the other files import as usual."""
    import pyarrow.parquet as pq
    (rel,) = case.expect.failed  # here: the emptied file
    assert status == 0, f"exit status {status}; errors: {errors}"
    assert errors == []
    assert manifest["status"] == "imported"
    entry = manifest["episodes_files"][rel]
    assert entry["status"] == "imported" and entry["episodes"] == 0 and entry["episodes_written"] == 0
    part = out / "episodes" / rel[len("meta/episodes/"):]
    assert part.exists(), "no part was written for the empty episodes file"
    empty = pq.read_table(part)
    full = pq.read_table(out / "episodes" / "chunk-000" / "file-000.parquet")
    assert empty.num_rows == 0 and empty.schema.names == full.schema.names
    assert manifest["totals"]["episodes"] == 8 and manifest["totals"]["episodes_written"] == 8
