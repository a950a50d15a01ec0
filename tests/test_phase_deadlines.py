"""Each phase of an import has a deadline (transforms/base/run_limits.py): a source that is slow on purpose or stuck
ends the phase's piece with rule `deadline`, naming the phase, the piece, what it waited on and the option
that raises the limit, in bounded time, and the output still gets its manifest; a read stuck inside one
request ends a local run. Through the CLI, against the loopback Hub stand-in and a local dataset."""

from __future__ import annotations

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
