"""Each phase of an import has a deadline (transforms/base/run_limits.py): a source that is slow on purpose or stuck
ends the phase's piece with rule `deadline`, naming the phase, the piece, what it waited on and the option
that raises the limit, in bounded time, and the output still gets its manifest; a read stuck inside one
request ends a local run. Through the CLI, against the loopback Hub stand-in and a local dataset."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from tests.helpers import SAMPLE, copy_dataset, read_errors, read_manifest, run_import
from transforms.base import run_limits


def _tree(root) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_deadline_option_is_parsed_and_checked():
    assert dict(run_limits.parse_deadlines("plan=5,write=7.5")) == {"check": 1800.0, "plan": 5.0, "write": 7.5,
                                                                     "finish": 1800.0}
    assert set(dict(run_limits.parse_deadlines("60")).values()) == {60.0}
    for bad, why in [("plan=0", "the deadline of plan must be a number of seconds above 0, not '0'"),
                     ("plan=nan", "the deadline of plan must be a number of seconds above 0, not 'nan'"),
                     ("listing=5", "'listing=5' is not PHASE=SECONDS with PHASE one of check, plan, write, finish"),
                     ("inf", "the deadline of every phase must be a number of seconds above 0, not 'inf'")]:
        with pytest.raises(ValueError, match=why):
            run_limits.parse_deadlines(bad)


def test_bad_deadline_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as refused:
        run_import(SAMPLE, tmp_path / "out", "--phase_deadline", "plan=-1")
    assert refused.value.code == 2
    assert str(refused.value) == ("error: --phase_deadline: the deadline of plan must be a number of seconds "
                                  "above 0, not '-1'")
    assert not (tmp_path / "out").exists()


def test_slow_hub_ends_the_phase_by_its_deadline(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub", reason="the Hub tests need huggingface_hub: pip install -e '.[test]'")
    from tests.hub_standin import HubStandIn
    from transforms.base import hub
    monkeypatch.setattr(hub, "BACKOFF_S", 0.01)
    root = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    with HubStandIn() as standin, standin.configure():
        standin.add_dataset("test/slow", root)
        sha = standin.head("test/slow")
        standin.hostile["slow_bytes"] = 0.05  # 20 bytes a second: every request succeeds, slowly
        start = time.monotonic()
        status = run_import(f"hf://datasets/test/slow@{sha}", out, "--phase_deadline", "2")
        seconds = time.monotonic() - start
    assert status == 1
    assert seconds < 120, seconds  # each piece gives up 2 s in: not the 300 s a read may take, nor the hours
    errors = read_errors(out)
    assert errors and {e["rule"] for e in errors} <= {"deadline", "file_failed"}, errors
    first = next(e["message"] for e in errors if e["rule"] == "deadline")
    assert "phase (" in first and "ran past its deadline of 2 s on " in first, first
    assert ", waiting on bytes " in first and "of meta/" in first, first
    assert first.endswith("the source is stuck or too slow to be waited for. Check the storage it reads (or the "
                          "Hub), then run again; a source this slow on purpose needs a larger limit: "
                          f"--phase_deadline {first.split('the ')[1].split(' phase')[0]}=SECONDS"), first
    assert read_manifest(out)["status"] == "failed"  # the output is finished all the same


def test_read_stuck_inside_one_request_stops_the_run(tmp_path, monkeypatch, capsys):
    from transforms.lerobot import episodes_files
    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    release = threading.Event()
    real = episodes_files.open_episodes_file

    def stuck(root, rel):
        release.wait(120)  # a request that never answers (no timeout reaches it)
        return real(root, rel)

    before = _tree(dataset)
    monkeypatch.setattr(episodes_files, "open_episodes_file", stuck)
    monkeypatch.setattr(run_limits, "STUCK_GRACE_S", 1.0)
    monkeypatch.setattr(run_limits.overdue, "__defaults__", (1.0,))
    start = time.monotonic()
    try:
        status = run_import(dataset, out, "--phase_deadline", "2")
    finally:
        seconds = time.monotonic() - start
        release.set()
    assert status == 1 and seconds < 60, (status, seconds)
    text = capsys.readouterr().out
    # the check reads the episodes file first (what changed since the last import): stuck there
    assert ("error: [deadline] the check phase (checking and listing a dataset) ran past its deadline of 2 s on "
            f"dataset file://{dataset}, waiting on a read of ") in text, text  # the last request it made
    assert ": the source is stuck or too slow to be waited for" in text
    assert text.count("--phase_deadline check=SECONDS; the run was stopped") == 1, text
    assert "; the run was stopped (0 episodes files committed before it kept and recorded, temporary files removed, " \
           "lease released)" in text, text
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]
    assert not (out / ".lease.json").exists()
    assert _tree(dataset) == before  # the dataset is read, never written


def test_read_rate_option_is_parsed_and_checked():
    assert run_limits.parse_read_rate(None) == (1024.0, 30.0)
    assert run_limits.parse_read_rate("2048") == (2048.0, 30.0)
    assert run_limits.parse_read_rate("512/5") == (512.0, 5.0)
    assert run_limits.parse_read_rate("0") == (0.0, 30.0)
    for bad in ("nan", "-1", "1/0", "1/inf", "fast", "1/x"):
        with pytest.raises(ValueError, match="--min_read_rate must be BYTES_PER_S or BYTES_PER_S/SECONDS"):
            run_limits.parse_read_rate(bad)


def test_read_pace_fails_a_trickle_and_keeps_an_honest_read():
    """Every window of `slow_read_s` seconds must bring `min_read_rate` bytes a second: a read that trickles
    fails when a window ends under the floor, naming what it read; a read that came fast and then slows
    down is judged by its latest window, not by its average since it started."""
    now = [0.0]
    limits = run_limits.RunLimits(min_read_rate=1024.0, slow_read_s=10.0)
    honest = run_limits.ReadPace("data file data/a.parquet", limits=limits, clock=lambda: now[0])
    for _ in range(100):
        now[0] += 1.0
        honest.add(64 << 10)
    trickle = run_limits.ReadPace("meta/info.json", limits=limits, clock=lambda: now[0])
    for _ in range(3):  # 1 byte every 3 s
        now[0] += 3.0
        trickle.add(1)
    now[0] += 3.0
    with pytest.raises(run_limits.SlowRead) as slow:
        trickle.add(1)
    assert slow.value.rule == "deadline"
    assert slow.value.message.startswith("reading meta/info.json got 4 bytes in 12 s, under the floor of 1,024 "
                                         "bytes/s for 10 s: the source is stuck or trickles its bytes.")
    assert slow.value.message.endswith("--min_read_rate BYTES_PER_S[/SECONDS] (0: no floor)")
    for _ in range(5):  # now it slows down: the first window under the floor fails, whatever came before
        now[0] += 3.0
        if now[0] - honest._mark_at >= 10:
            with pytest.raises(run_limits.SlowRead):
                honest.add(1)
            break
        honest.add(1)
    else:
        raise AssertionError("the slowed-down read was never refused")
    off = run_limits.ReadPace("x", limits=run_limits.RunLimits(min_read_rate=0.0), clock=lambda: now[0])
    now[0] += 1e6
    off.add(1)  # no floor


def test_a_source_found_trickling_fails_its_next_reads_at_once():
    """A dataset's pieces read many files of one source: once a read of it stayed under the floor, the run's
    next reads of that source (a Hub repository at a revision, a bucket) fail at once, naming the read that
    found it, instead of each waiting out its own window; another run, or another source, is read as usual."""
    now = [0.0]
    limits = run_limits.RunLimits(min_read_rate=1024.0, slow_read_s=10.0, run_id="run-a")
    first = run_limits.ReadPace("meta/info.json of the Hub dataset o/n", source="hf://datasets/o/n@abc",
                                limits=limits, clock=lambda: now[0])
    now[0] += 11.0
    with pytest.raises(run_limits.SlowRead):
        first.add(3)
    with pytest.raises(run_limits.SlowRead) as at_once:
        run_limits.ReadPace("meta/episodes/chunk-000/file-000.parquet", source="hf://datasets/o/n@abc",
                            limits=limits, clock=lambda: now[0])
    assert at_once.value.rule == "deadline"
    assert at_once.value.message.startswith(
        "reading meta/episodes/chunk-000/file-000.parquet not read: its source already trickled its bytes this run "
        "(reading meta/info.json of the Hub dataset o/n stayed under the floor of 1,024 bytes/s for 10 s)")
    run_limits.ReadPace("x", source="hf://datasets/o/other@abc", limits=limits)
    run_limits.ReadPace("x", source="hf://datasets/o/n@abc", limits=dataclasses.replace(limits, run_id="run-b"))
    assert run_limits.source_of("gs://bucket/a/b.parquet") == "gs://bucket"
    assert run_limits.source_of("/data/a.parquet") == run_limits.source_of("file:///data/a.parquet") == ""


def test_a_trickling_source_fails_with_deadline_naming_the_file(tmp_path, monkeypatch):
    """A Hub that sends a byte at a time, slowly (each within any timeout of a request), fails the dataset
    once a read stays under the floor rate for its window: rule `deadline`, naming the file; not the phase
    deadline's 30 minutes, nor the 300 s one ranged read may take."""
    pytest.importorskip("huggingface_hub", reason="the Hub tests need huggingface_hub: pip install -e '.[test]'")
    from tests.hub_standin import HubStandIn
    from transforms.base import hub
    monkeypatch.setattr(hub, "BACKOFF_S", 0.01)
    root = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    with HubStandIn() as standin, standin.configure():
        standin.add_dataset("test/trickle", root)
        sha = standin.head("test/trickle")
        standin.hostile["slow_bytes"] = 0.05  # 20 bytes a second
        start = time.monotonic()
        status = run_import(f"hf://datasets/test/trickle@{sha}", out, "--min_read_rate", "1024/1")
        seconds = time.monotonic() - start
    assert status == 1
    assert seconds < 120, seconds
    errors = read_errors(out)
    assert errors and {e["rule"] for e in errors} <= {"deadline", "file_failed"}, errors
    messages = [e["message"] for e in errors if e["rule"] == "deadline"]
    assert messages
    for m in messages:  # the read that found the trickle, or a later read of the dataset failed at once naming it
        assert "reading bytes 0.." in m and " of meta/" in m and " of the Hub dataset test/trickle " in m, m
        assert (" got " in m or "not read: its source already trickled its bytes this run (reading bytes 0.." in m), m
        assert "1,024 bytes/s for 1 s" in m and "the source is stuck or trickles its bytes" in m, m
        assert "--min_read_rate BYTES_PER_S[/SECONDS]" in m


def test_a_trickling_local_read_fails_with_deadline(tmp_path, monkeypatch):
    """The same floor on a local file read in chunks (a network mount that trickles)."""
    from transforms.base import storage
    path = tmp_path / "info.json"
    path.write_bytes(b"{}" * 10)
    now = [0.0]
    monkeypatch.setattr(run_limits.time, "monotonic", lambda: now[0])
    real_read = storage.os.read

    def one_byte_every_5_s(fd, n):
        now[0] += 5.0
        return real_read(fd, 1)
    monkeypatch.setattr(storage.os, "read", one_byte_every_5_s)
    run_limits.install(run_limits.RunLimits(min_read_rate=100.0, slow_read_s=10.0))
    try:
        with pytest.raises(run_limits.SlowRead) as slow:
            storage.read_bytes(str(path), what="info file", file="meta/info.json")
    finally:
        run_limits.install(run_limits.RunLimits())
    assert slow.value.message.startswith("reading info file meta/info.json got 2 bytes in 10 s, under the floor")
