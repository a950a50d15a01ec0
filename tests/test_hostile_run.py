"""The output's journal and the run's own machinery under hostile states: a journal folder that is a link
or a file, forged and foreign journal records, a dead run's many records, a wildcard manifest key on an
object store, a finish phase past its deadline, a terminal that cannot be written, and the query helpers
on an import without parts or with a hostile view prefix. Nothing outside the output is touched, and each
case ends with the project's own words (no traceback, no rule `internal`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest

from tests.helpers import REPO, SAMPLE, copy_dataset, read_errors, read_manifest, run_import
from transforms.output import journal

FILE0 = "meta/episodes/chunk-000/file-000.parquet"


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture
def imported(tmp_path) -> tuple[Path, Path]:
    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    assert run_import(dataset, out) == 0
    return dataset, out


def _outside(tmp_path: Path) -> Path:
    """A folder outside the output holding files a link would expose: JSON files that are no records,
    names the journal writes, and temporaries of them."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "sub").mkdir(parents=True)
    (elsewhere / "notes.json").write_text('{"mine": true}')
    (elsewhere / "sub" / "settings.json").write_text("{}")
    run = elsewhere / "0123abcd"
    run.mkdir()
    (run / f"file-{'a' * 24}.json").write_text("{}")
    (run / f".file-{'a' * 24}.json.tmp-{'0' * 32}").write_text("{}")
    return elsewhere


# ---- the journal's folder ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["link", "link_to_file", "file"])
def test_a_journal_folder_that_is_a_link_or_a_file_is_refused_and_never_followed(imported, tmp_path, how, capsys):
    dataset, out = imported
    elsewhere = _outside(tmp_path)
    if how == "link":
        (out / ".journal").symlink_to(elsewhere, target_is_directory=True)
    elif how == "link_to_file":
        (out / ".journal").symlink_to(elsewhere / "notes.json")
    else:
        (out / ".journal").write_text("not a folder")
    before, outside_before = _tree(out), _tree(elsewhere)
    capsys.readouterr()
    assert run_import(dataset, out, "--force") == 1
    text = capsys.readouterr().out
    why = f"is a symlink (to {elsewhere}" if how.startswith("link") else "is a regular file, not a folder"
    assert f"error: [output_confinement] file .journal: .journal {why}" in text, text
    assert _tree(elsewhere) == outside_before  # nothing removed, changed or created outside
    assert sorted(p.name for p in elsewhere.rglob("*")) == sorted(
        ["sub", "notes.json", "settings.json", "0123abcd", f"file-{'a' * 24}.json", f".file-{'a' * 24}.json.tmp-"
         + "0" * 32])
    assert _tree(out) == before


def test_the_journal_removes_only_the_names_it_writes_and_never_through_a_link(tmp_path):
    out = tmp_path / "out"
    uri = f"file://{out}"
    options = {"one_part": False}
    journal.record_file(uri, run_id="r1", options=options, dataset="file:///d", episodes_file=FILE0,
                        entry={"status": "imported", "parts": ["episodes/chunk-000/file-000.parquet"]})
    run = out / ".journal" / "r1"
    (run / "README.json").write_text("someone's notes")  # not a name the journal writes
    (run / "file-0123.json").write_text("{}")
    elsewhere = _outside(tmp_path)
    (out / ".journal" / "linked").symlink_to(elsewhere, target_is_directory=True)
    (run / f"file-{'b' * 24}.json").symlink_to(elsewhere / "notes.json")
    uris = journal.record_uris(uri)
    assert [u.rsplit("/", 1)[-1] for u in uris] == [f"file-{journal._key(FILE0)}.json"]
    journal.clear(uri, uris)
    assert sorted(p.name for p in run.iterdir()) == ["README.json", "file-0123.json", f"file-{'b' * 24}.json"]
    assert (elsewhere / "notes.json").read_text() == '{"mine": true}'
    assert len(list(elsewhere.rglob("*"))) == 6


def test_a_journal_folder_linked_away_mid_run_is_never_written_through(tmp_path):
    from transforms.base.errors import LeRobotImportError

    out = tmp_path / "out"
    out.mkdir()
    elsewhere = _outside(tmp_path)
    (out / ".journal").symlink_to(elsewhere, target_is_directory=True)
    before = _tree(elsewhere)
    with pytest.raises(LeRobotImportError) as refused:
        journal.record_file(f"file://{out}", run_id="0123abcd", options={}, dataset="file:///d", episodes_file=FILE0,
                            entry={"status": "imported", "parts": ["episodes/chunk-000/file-000.parquet"]})
    assert refused.value.rule == "output_confinement" and ".journal" in str(refused.value)
    assert _tree(elsewhere) == before
    assert journal.leftover_temporaries(f"file://{out}") == []


# ---- forged and foreign records ------------------------------------------------------------------


def _forge(out: Path, doc: dict, name: str = "file-" + "c" * 24 + ".json", run: str = "deadrun") -> Path:
    folder = out / ".journal" / run
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))
    return folder / name


def _options(out: Path) -> dict:
    return read_manifest(out)["options"]


def test_a_record_whose_key_climbs_out_of_the_output_is_dropped_with_a_warning(imported, tmp_path, caplog):
    dataset, out = imported
    victim = tmp_path / "victim"
    victim.mkdir()
    tmp_named = victim / f".x.parquet.tmp-{'1' * 32}"
    tmp_named.write_bytes(b"someone else's file")
    key = "meta/episodes/../../../victim/x.parquet"
    entry = dict(read_manifest(out)["episodes_files"][FILE0], parts=["episodes/../../victim/x.parquet"])
    record = _forge(out, {"kind": "episodes_file", "run_id": "deadrun", "options": _options(out),
                          "dataset": f"file://{dataset}", "episodes_file": key, "entry": entry})
    with caplog.at_level(logging.WARNING, logger="transforms.episode.journal"):
        assert run_import(dataset, out) == 0
    assert tmp_named.read_bytes() == b"someone else's file"
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert dropped and ".journal/deadrun/" + record.name in dropped[0], dropped
    assert "is not an episodes file's name" in dropped[0], dropped
    manifest = read_manifest(out)
    assert list(manifest["episodes_files"]) == [FILE0] and manifest["status"] == "imported"
    assert not (out / ".journal").exists()  # the forged record went with the others: a name the journal writes


@pytest.mark.parametrize("forgery", ["parts_outside", "parts_of_another", "group_escape", "shard_outside",
                                     "shard_mismatch", "video_outside"])
def test_forged_records_never_reach_the_manifest_after_an_interrupt(imported, forgery, caplog):
    """What an interrupted run writes from its journal: only records that pass the manifest's checks."""
    from pipelines import run_control
    from transforms.output import safety

    dataset, out = imported
    root, options = f"file://{dataset}", _options(out)
    entry = read_manifest(out)["episodes_files"][FILE0]
    base = {"run_id": "deadrun", "options": options, "dataset": root}
    other = "meta/episodes/chunk-000/file-001.parquet"
    docs = {
        "parts_outside": dict(base, kind="episodes_file", episodes_file=other,
                              entry=dict(entry, parts=["episodes/../manifest.json"], part_files=None)),
        "parts_of_another": dict(base, kind="episodes_file", episodes_file=other,
                                 entry=dict(entry, part_files=None)),  # claims file-000's part
        "group_escape": dict(base, kind="episodes_file", episodes_file="meta/episodes.jsonl:../../x",
                             entry=dict(entry, parts=["episodes/../../x.parquet"], part_files=None)),
        "shard_outside": dict(base, kind="shard", shard="media_index/../../x.parquet", action="written",
                              record={"path": "media_index/../../x.parquet"}, versions={}),
        "shard_mismatch": dict(base, kind="shard", shard="media_index/a.parquet", action="written",
                               record={"path": "media_index/b.parquet"}, versions={}),
        "video_outside": dict(base, kind="shard", shard="media_index/a.parquet", action="emptied", record=None,
                              versions={"../../etc/passwd": "1"}),
    }
    name = ("shard-" if docs[forgery]["kind"] == "shard" else "file-") + "d" * 24 + ".json"
    _forge(out, docs[forgery], name)
    with caplog.at_level(logging.WARNING, logger="transforms.episode.journal"):
        assert run_control._keep_committed(root, f"file://{out}", options, "r", "SIGINT") == 0
    assert any(f".journal/deadrun/{name} dropped" in r.getMessage() for r in caplog.records), caplog.text
    # nothing was folded, so nothing was written: the output's manifest is as its import wrote it
    found = safety.read_manifest(f"file://{out}")
    assert found.problem is None and found.doc["status"] == "imported"
    assert run_import(dataset, out) == 0  # and the next run is not refused


def test_a_record_of_another_dataset_is_ignored_by_what_it_says(imported, tmp_path):
    """A record naming another dataset (same options, a key this dataset has, an entry whose digests
    match) is never folded: the dataset it names decides, not luck."""
    dataset, out = imported
    root, options = f"file://{dataset}", _options(out)
    entry = dict(read_manifest(out)["episodes_files"][FILE0])
    (out / "manifest.json").unlink()  # without the journal record, every file is imported again
    for name in ("errors.jsonl",):
        (out / name).unlink()
    _forge(out, {"kind": "episodes_file", "run_id": "deadrun", "options": options,
                 "dataset": f"file://{tmp_path}/another", "episodes_file": FILE0, "entry": entry})
    records, uris = journal.read_records(f"file://{out}", options, dataset=root)
    assert records == [] and len(uris) == 1
    _forge(out, {"kind": "episodes_file", "run_id": "deadrun", "options": options, "dataset": root,
                 "episodes_file": FILE0, "entry": entry}, name="file-" + "e" * 24 + ".json")
    records, _ = journal.read_records(f"file://{out}", options, dataset=root)
    assert [r["episodes_file"] for r in records] == [FILE0]
    records, _ = journal.read_records(f"file://{out}", options, dataset=f"file://{tmp_path}/another")
    assert [r["dataset"] for r in records] == [f"file://{tmp_path}/another"]


def test_a_dead_runs_many_records_go_in_one_sweep(imported):
    """Tens of thousands of records a dead run left (part records and claims it never folded, records of
    other options) are listed once and removed in one sweep: a few seconds, not minutes."""
    dataset, out = imported
    folder = out / ".journal" / "deadrun"
    folder.mkdir(parents=True)
    for i in range(20000):
        (folder / f"part-{i:024x}-000000.json").write_text('{"kind": "part"}')
    for i in range(5000):
        (folder / f"file-{i:024x}.json").write_text('{"kind": "episodes_file", "options": {"other": 1}}')
    (folder / "keep-me.txt").write_text("not the journal's")
    started = time.monotonic()
    assert run_import(dataset, out) == 0
    assert time.monotonic() - started < 60
    assert sorted(p.name for p in (out / ".journal").rglob("*")) == ["deadrun", "keep-me.txt"]


# ---- glob characters in a manifest key, on an object store --------------------------------------


def test_a_gone_wildcard_episodes_file_removes_only_its_own_part_on_an_object_store(tmp_path):
    from tests.bench.synth_dataset import make_dataset

    local = make_dataset(tmp_path / "ds", episodes=4, frames=10, cameras=0, episodes_per_meta_file=2,
                         state_dim=2, action_dim=2)
    episodes = local / "meta" / "episodes" / "chunk-000"
    (episodes / "file-001.parquet").rename(episodes / "*.parquet")
    fs = fsspec.filesystem("memory")
    fs.put(str(local) + "/", "/wild/ds", recursive=True)
    try:
        assert run_import("memory://wild/ds", "memory://wild/out") == 0
        assert fs.exists("/wild/out/episodes/chunk-000/*.parquet")
        kept = fs.cat_file("/wild/out/episodes/chunk-000/file-000.parquet")
        fs.rm_file("/wild/ds/meta/episodes/chunk-000/*.parquet")  # the wildcard file is gone from the dataset
        run_import("memory://wild/ds", "memory://wild/out")
        manifest = json.loads(fs.cat_file("/wild/out/manifest.json"))
        assert manifest["episodes_files"]["meta/episodes/chunk-000/*.parquet"]["status"] == "removed"
        assert not fs.exists("/wild/out/episodes/chunk-000/*.parquet")
        assert fs.cat_file("/wild/out/episodes/chunk-000/file-000.parquet") == kept
    finally:
        fs.rm("/wild", recursive=True)


def test_storage_removes_and_commits_wildcard_names_literally_on_an_object_store():
    from transforms.base import storage

    fs = fsspec.filesystem("memory")
    try:
        for name, data in (("a.parquet", b"1"), ("*.parquet", b"2"), ("[ab].parquet", b"3"), ("b.parquet", b"4")):
            fs.pipe(f"/lit/{name}", data)
        storage.remove("memory:///lit/*.parquet")
        storage.remove("memory:///lit/?.parquet")  # matches a.parquet and b.parquet as a pattern; names none
        storage.write_atomic("memory:///lit/[ab].parquet", b"new")
        assert {p.rsplit("/", 1)[-1]: fs.cat_file(p) for p in fs.find("/lit")} == {
            "a.parquet": b"1", "[ab].parquet": b"new", "b.parquet": b"4"}
    finally:
        fs.rm("/lit", recursive=True)


# ---- the finish phase past its deadline ----------------------------------------------------------


def test_a_finish_phase_past_its_deadline_is_the_deadline_refusal(tmp_path, capsys):
    """A deadline shorter than the finish step itself: the dataset fails with rule `deadline` (its manifest
    and errors.jsonl written whole, outside the deadline: they are the output's own bookkeeping)."""
    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    assert run_import(dataset, out, "--phase_deadline", "finish=0.001") == 1
    text = capsys.readouterr().out
    assert f"file://{dataset}: failed - " in text and "  deadline: 1 error" in text, text
    assert "internal" not in text and "Traceback" not in text
    errors = read_errors(out)
    assert [e["rule"] for e in errors] == ["deadline"]
    assert errors[0]["message"].startswith("[deadline] the finish phase (committing an episodes file or finishing "
                                           "a dataset) ran past its deadline of 0 s on dataset ")
    assert errors[0]["message"].endswith("--phase_deadline finish=SECONDS")
    assert read_manifest(out)["status"] == "failed"
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name] and not (out / ".journal").exists()
    assert run_import(dataset, out) == 0  # and the next run, with the default deadline, finishes
    assert read_manifest(out)["status"] == "imported"


# ---- a terminal that cannot be written -----------------------------------------------------------


def _command(args: list[str], **streams) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.import_lerobot", *args], cwd=REPO, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), **streams)


@pytest.mark.parametrize("where", ["stdout_full", "stderr_full", "both_closed"])
def test_an_import_whose_terminal_cannot_be_written_goes_on(tmp_path, where):
    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    args = ["--dataset", str(dataset), "--output", str(out), "--runner", "FnApiRunner"]
    log = tmp_path / "log.txt"
    with open("/dev/full", "w") as full, open(log, "w") as readable:
        if where == "stdout_full":
            proc = _command(args, stdout=full, stderr=readable)
        elif where == "stderr_full":  # -v: per-file lines go to stderr (by default nothing does on a clean run)
            proc = _command([*args, "-v"], stdout=readable, stderr=full)
        else:
            proc = _command(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: (os.close(1), os.close(2)))
    assert proc.returncode == 0
    assert read_manifest(out)["status"] == "imported"
    text = log.read_text()
    assert "Traceback" not in text, text
    if where != "both_closed":
        lost = "stdout" if where == "stdout_full" else "stderr"
        assert (f"warning: the command's output to {lost} ([Errno 28] No space left on device) was lost; the import "
                "went on regardless") in text, text


def test_a_failed_import_whose_terminal_is_full_still_exits_1(tmp_path):
    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    (dataset / "data" / "chunk-000" / "file-000.parquet").write_bytes(b"broken")
    with open("/dev/full", "w") as full:
        proc = _command(["--dataset", str(dataset), "--output", str(tmp_path / "out"), "--runner", "FnApiRunner"],
                        stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert read_errors(tmp_path / "out")


# ---- the query helpers ---------------------------------------------------------------------------


def test_the_query_helpers_on_an_import_without_parts_say_so(tmp_path):
    from transforms.reader import query
    from transforms.reader import ReaderError

    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    (dataset / "data" / "chunk-000" / "file-000.parquet").write_bytes(b"broken")
    out = tmp_path / "out"
    assert run_import(dataset, out) == 1
    assert query.part_files(str(out)) == []
    duckdb = pytest.importorskip("duckdb")
    calls = [lambda: query.read_episodes(str(out)), lambda: query.tensor_shapes(str(out)),
             lambda: query.duckdb_views(duckdb.connect(), str(out))]
    for call in calls:
        with pytest.raises(ReaderError) as raised:
            call()
        assert str(raised.value).startswith(f"the import at {out} holds no episode parts"), raised.value


@pytest.mark.parametrize("prefix", ['x"; DROP TABLE t; --', "a\x00b", "1abc", "a b", "é", "a" * 65, 7, None])
def test_a_hostile_view_prefix_is_refused_in_the_projects_words(imported, prefix):
    duckdb = pytest.importorskip("duckdb")
    from transforms.reader import query
    from transforms.reader import ReaderError

    _, out = imported
    con = duckdb.connect()
    with pytest.raises(ReaderError) as raised:
        query.duckdb_views(con, str(out), prefix=prefix)
    assert str(raised.value).startswith(f"the view prefix {prefix!r} is not the start of a plain SQL name")
    assert con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchone()[0] == 0
    assert query.duckdb_views(con, str(out), prefix="run_7_") == ["run_7_episodes", "run_7_frames", "run_7_clips"]


# ---- Ctrl-C at any moment ------------------------------------------------------------------------


def _sigint() -> None:
    os.kill(os.getpid(), __import__("signal").SIGINT)


def _interrupted_run(dataset: Path, out: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    import signal

    before = signal.getsignal(signal.SIGINT)
    status = run_import(dataset, out, *extra)
    assert signal.getsignal(signal.SIGINT) is before  # the command's handler is gone with the command
    lines = capsys.readouterr().out.strip().splitlines()
    assert len([x for x in lines if x.startswith("interrupted by")]) == 1, lines
    return status, lines


def test_ctrl_c_before_the_pipeline_starts_is_one_line_and_130(tmp_path, monkeypatch, capsys):
    from pipelines import run_control

    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    real = run_control.safe_targets

    def safe_targets(config):
        _sigint()
        return real(config)

    monkeypatch.setattr(run_control, "safe_targets", safe_targets)
    status, lines = _interrupted_run(dataset, out, capsys)
    assert status == 130
    assert lines[-1] == "interrupted by SIGINT before the import started: nothing was written and no lease taken"
    assert not out.exists()


def test_ctrl_c_as_the_lease_is_taken_releases_it(tmp_path, monkeypatch, capsys):
    from transforms.output import lease

    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    real = lease.acquire
    taken = []

    def acquire(output, **kwargs):
        got = real(output, **kwargs)
        taken.append(got)
        _sigint()  # the lease exists: the signal must not leave it behind
        return got

    monkeypatch.setattr(lease, "acquire", acquire)
    status, lines = _interrupted_run(dataset, out, capsys)
    assert status == 130 and taken
    assert lines[-1] == ("interrupted by SIGINT while taking the outputs' leases: nothing was imported, every lease "
                         "taken released; run the same command again to import")
    assert not (out / ".lease.json").exists()
    assert not (out / "manifest.json").exists() and not (out / "episodes").exists()


def test_ctrl_c_while_waiting_for_a_held_lease_ends_the_wait(tmp_path, monkeypatch, capsys):
    import threading

    from transforms.output import lease

    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    real = lease.acquire

    def acquire(output, **kwargs):  # the signal comes once the run waits for the held lease
        threading.Timer(1.0, _sigint).start()
        return real(output, **kwargs)

    with lease.holding(f"file://{out}", run_id="other", ttl_seconds=600):
        monkeypatch.setattr(lease, "acquire", acquire)
        started = time.monotonic()
        status, lines = _interrupted_run(dataset, out, capsys, "--wait-for-lease", "120")
        assert time.monotonic() - started < 30
        held = lease.read_lease(f"file://{out}")
        assert held is not None and held.run_id == "other"  # the other run's lease is left as it is
    assert status == 130
    assert lines[-1].startswith("interrupted by SIGINT while taking the outputs' leases"), lines


def test_ctrl_c_after_the_summary_is_one_line_and_130(tmp_path, monkeypatch, capsys):
    from pipelines import report

    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    real = report.summarize

    def summarize(*args, **kwargs):
        status = real(*args, **kwargs)
        _sigint()
        return status

    monkeypatch.setattr(report, "summarize", summarize)
    status, lines = _interrupted_run(dataset, out, capsys)
    assert status == 130
    assert any(x.startswith(f"file://{dataset}: imported - 4/4 episodes") for x in lines), lines
    assert lines[-1] == ("interrupted by SIGINT after the import ended: its outputs are as summarized above, lease "
                         "released")
    assert not (out / ".lease.json").exists()
    assert read_manifest(out)["status"] == "imported" and not (out / ".journal").exists()
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


def test_a_swallowed_ctrl_c_is_not_lost(tmp_path, monkeypatch, capsys):
    """A library that catches every exception on the way up does not make the run go on to exit 0."""
    from pipelines import run_control

    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    out = tmp_path / "out"
    real = run_control.safe_targets

    def safe_targets(config):
        try:
            _sigint()
        except BaseException:  # noqa: BLE001 - what a careless library does
            pass
        return real(config)

    monkeypatch.setattr(run_control, "safe_targets", safe_targets)
    status, lines = _interrupted_run(dataset, out, capsys)
    assert status == 130 and lines[-1].startswith("interrupted by SIGINT before the import started"), lines
    assert not (out / ".lease.json").exists() and not (out / "manifest.json").exists()


@pytest.mark.parametrize("module", ["pipelines.import_lerobot", "pipelines.cli"])
def test_ctrl_c_while_the_command_loads_is_one_line_and_130(tmp_path, module):
    """A signal while the command and Beam load (the first second or two of the command)."""
    import signal

    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    proc = subprocess.Popen([sys.executable, "-m", module, "--dataset", str(dataset), "--output",
                             str(tmp_path / "out"), "--runner", "FnApiRunner"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    # once the command's first step ran (its handler of SIGTERM is in the kernel's caught set: Python's
    # startup itself is before any command), while the rest of it and Beam load
    caught = 0
    while proc.poll() is None and not caught & (1 << (signal.SIGTERM - 1)):
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = int(next(x for x in status.splitlines() if x.startswith("SigCgt:")).split()[1], 16)
        time.sleep(0.005)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, (stdout, stderr[-2000:])
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-2000:]
    assert stdout.strip().splitlines()[-1].startswith("interrupted by SIGINT"), stdout
    assert not (tmp_path / "out" / ".lease.json").exists()


@pytest.mark.parametrize("which", ["stdout", "both"])
def test_an_import_run_in_process_with_a_full_log_goes_on(tmp_path, monkeypatch, which):
    """`import_lerobot.run` itself (the launcher's entry, tests) with stdout or stderr a writer whose every
    write fails with ENOSPC: the import finishes, its status is the import's."""
    import errno

    class Full:
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def isatty(self):
            return False

    dataset = copy_dataset(SAMPLE, tmp_path / "so101")
    broken = dataset / "meta" / "episodes" / "chunk-000" / "file-001.parquet"
    shutil.copy(dataset / "meta" / "episodes" / "chunk-000" / "file-000.parquet", broken)  # duplicates: fails
    out = tmp_path / "out"
    for name in ("stdout", "stderr") if which == "both" else (which,):
        monkeypatch.setattr(sys, name, Full())
    assert run_import(dataset, out) == 1
    assert read_manifest(out)["status"] == "failed" and read_errors(out)
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name] and not (out / ".lease.json").exists()
