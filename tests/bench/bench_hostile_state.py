"""Benchmark: what each hostile state of an output, and each hostile Hub, costs (wall time, peak RSS).

    python tests/bench/bench_hostile_state.py                  # every case
    python tests/bench/bench_hostile_state.py --cases lease_1gib,hub_ignored_range --timeout 120

Each case runs in a fresh subprocess of its own (`--case NAME`): it imports the sample dataset
(tests/data/lerobot/so101_av1: 4 episodes, 2 AV1 cameras) to a temporary output, damages the output (or
serves the dataset from the loopback Hub stand-in made hostile), then runs the command under test
(import, verify or plan) in-process. Its peak memory is `ru_maxrss` of that subprocess from os.wait4
(the set-up import and, for Hub cases, the stand-in server included: the first row, `baseline`, is
that cost without a hostile state). A case over --timeout seconds (a hang) is killed and reported.
Prints one row per case: seconds, peak MB, and the first line of what the command reported.

The phase-deadline cases run with `--phase_deadline 5`: a Hub sending 20 bytes a second
(slow_source_phase_deadline), a read that never returns (stuck_read_phase_deadline; the command's watch
stops the run 5 s past the deadline instead of the default 60 s). trickle_one_byte_a_second serves every
body a byte a second with no option given: the floor rate of a read (1 KiB/s over 30 s) ends it, not the
phase deadline (30 min). render_held_output renders into an
output another render's lease holds; manifest_disk_full fills the disk at the manifest's write.

The journal cases: `.journal` a link to a folder of 2,000 JSON files (journal_symlink), a forged record
whose key climbs out of the output (journal_forged_dotdot), 50,000 records a dead run left (half part
records, half records of another dataset) on an unchanged output and on a forced run. Then a gone
episodes file named `*.parquet` on a memory:// output, a finish phase past a 1 ms deadline, a stdout
that raises ENOSPC, Ctrl-C while waiting for a held lease, and the query helpers on an import without
parts and with a hostile view prefix.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _setup(work: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(REPO))
    from tests.helpers import SAMPLE, copy_dataset, run_import
    dataset = copy_dataset(SAMPLE, work / "so101")
    out = work / "out"
    assert run_import(dataset, out) == 0
    return dataset, out


def _import(dataset, out, *extra) -> str:
    import contextlib
    import io
    from tests.helpers import run_import
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            status = run_import(dataset, out, *extra)
        except SystemExit as ex:
            return f"exit: {ex}"
    text = buf.getvalue()
    errors = Path(out) / "errors.jsonl"
    first = next((line for line in text.splitlines() if "error" in line), text.splitlines()[0] if text else "")
    if errors.is_file() and status:
        rows = [json.loads(line) for line in errors.read_text().splitlines() if line.strip()]
        first = rows[0]["message"] if rows else first
    return f"exit {status}: {first}"


def _verify(out) -> str:
    from pipelines import verify
    report, = verify.verify(str(out))
    return "ok" if report.ok else str(report.problems[0])


def _hub(work: Path, hostile: dict, *, pad_mib: int = 0, deadline: float = 0.0, page_size: int = 1000,
         extra: tuple = ()) -> str:
    sys.path.insert(0, str(REPO))
    from tests.helpers import SAMPLE, copy_dataset
    from tests.hub_standin import HubStandIn
    from transforms.base import hub
    root = copy_dataset(SAMPLE, work / "so101")
    if pad_mib:
        mp4 = sorted(root.glob("videos/*/*/*.mp4"))[0]
        with open(mp4, "ab") as f:
            size = pad_mib << 20
            f.write(size.to_bytes(4, "big") + b"free")
            f.truncate(mp4.stat().st_size + size - 8)
    if deadline:
        hub.READ_DEADLINE_S = deadline
    hub.BACKOFF_S = 0.01
    with HubStandIn(tree_page_size=page_size) as standin, standin.configure(token="hf_bench_token_0123456789"):
        standin.add_token("hf_bench_token_0123456789")
        standin.add_dataset("bench/hostile", root)
        standin.hostile.update(hostile)
        result = _import("hf://datasets/bench/hostile", work / "out", *extra)
        sent = sum(r.bytes_sent for r in standin.requests)
        pages = standin.count("tree")
    return f"{result} [sent {sent / 2 ** 20:.1f} MiB, {pages} tree pages]"


def case_baseline(work: Path) -> str:
    dataset, out = _setup(work)
    return _verify(out)


def case_manifest_dotdot_key(work: Path) -> str:
    dataset, out = _setup(work)
    doc = json.loads((out / "manifest.json").read_text())
    doc["episodes_files"]["../../so101/meta/episodes/chunk-000/file-000.parquet"] = {
        "status": "imported", "parts": ["episodes/../../so101/meta/episodes/chunk-000/file-000.parquet"]}
    (out / "manifest.json").write_text(json.dumps(doc))
    return _import(dataset, out)


def case_symlinked_shard_folder(work: Path) -> str:
    dataset, out = _setup(work)
    folder = out / "media_index" / "videos" / "observation.images.front"
    shutil.move(str(folder), str(work / "elsewhere"))
    folder.symlink_to(work / "elsewhere", target_is_directory=True)
    return _import(dataset, out, "--force")


def case_fifo_lease(work: Path) -> str:
    dataset, out = _setup(work)
    (out / ".lease.json").unlink(missing_ok=True)
    os.mkfifo(out / ".lease.json")
    return _import(dataset, out, "--force")


def case_dev_zero_part(work: Path) -> str:
    _, out = _setup(work)
    part = out / "episodes" / "chunk-000" / "file-000.parquet"
    part.unlink()
    part.symlink_to("/dev/zero")
    return _verify(out)


def case_fifo_part(work: Path) -> str:
    _, out = _setup(work)
    part = out / "episodes" / "chunk-000" / "file-000.parquet"
    part.unlink()
    os.mkfifo(part)
    return _verify(out)


def case_lease_1gib(work: Path) -> str:
    dataset, out = _setup(work)
    with open(out / ".lease.json", "wb") as f:
        f.truncate(1 << 30)
    return _import(dataset, out, "--force")


def case_lease_nan(work: Path) -> str:
    dataset, out = _setup(work)
    (out / ".lease.json").write_text('{"run_id": "r", "host": "h", "pid": 1, "job": "", "started_at": 0, '
                                     '"renewed_at": 0, "expires_at": NaN}')
    return _import(dataset, out, "--force")


def case_lease_year_5138(work: Path) -> str:
    dataset, out = _setup(work)
    (out / ".lease.json").write_text(json.dumps({"run_id": "r", "host": "elsewhere", "pid": 1, "job": "",
                                                 "started_at": time.time(), "renewed_at": time.time(),
                                                 "expires_at": 99_000_000_000.0}))
    return _import(dataset, out, "--force")


def case_errors_1gib(work: Path) -> str:
    _, out = _setup(work)
    with open(out / "errors.jsonl", "ab") as f:
        f.truncate(1 << 30)
    return _verify(out)


def case_manifest_300mb(work: Path) -> str:
    _, out = _setup(work)
    with open(out / "manifest.json", "ab") as f:
        f.truncate(300 << 20)
    return _verify(out)


def case_manifest_nested_100k(work: Path) -> str:
    dataset, out = _setup(work)
    (out / "manifest.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    return _verify(out) + " | import: " + _import(dataset, out, "--force")


def case_damaged_shard(work: Path) -> str:
    dataset, out = _setup(work)
    shard = out / "media_index" / "videos" / "observation.images.front" / "chunk-000.parquet"
    shard.write_bytes(shard.read_bytes()[:100])
    os.utime(dataset / "meta" / "info.json")
    return _import(dataset, out) + " | verify: " + _verify(out)


def case_manifest_disk_full(work: Path) -> str:
    import errno
    from fsspec.implementations.local import LocalFileSystem
    dataset, out = _setup(work)
    real = LocalFileSystem._open

    def full(self, path, mode="rb", *args, **kwargs):
        if "manifest.json" in str(path) and "w" in mode:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, path, mode, *args, **kwargs)

    LocalFileSystem._open = full
    return _import(dataset, out, "--force")


def case_slow_source_phase_deadline(work: Path) -> str:
    return _hub(work, {"slow_bytes": 0.05}, extra=("--phase_deadline", "5"))


def case_trickle_one_byte_a_second(work: Path) -> str:
    # no option: the floor rate (1 KiB/s over 30 s) ends it, not the phase deadline's 30 minutes
    return _hub(work, {"slow_bytes": 1.0})


def case_stuck_read_phase_deadline(work: Path) -> str:
    import threading
    from transforms.base import run_limits
    from transforms.lerobot import episodes_files
    dataset, out = _setup(work)
    never = threading.Event()
    episodes_files.open_episodes_file = lambda root, rel: never.wait()  # a request that never answers
    run_limits.overdue.__defaults__ = (5.0,)  # the grace after the deadline (60 s by default)
    return _import(dataset, out, "--force", "--phase_deadline", "5")


def case_render_held_output(work: Path) -> str:
    import contextlib
    import io
    from pipelines import render_recipes
    from tests.helpers import lerobot_dataset, run_import
    from transforms.output import lease
    root = lerobot_dataset("language")
    assert run_import(root, work / "out") == 0
    held = lease.acquire(str(work / "samples"), run_id="another-render")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = render_recipes.run(["--recipe", str(root / "expected" / "recipes" / "subtask.yaml"), "--input",
                                     str(work / "out"), "--output", str(work / "samples"), "--runner", "FnApiRunner"])
    lease.release(held)
    return f"exit {status}: {err.getvalue().strip().splitlines()[-1]}"


def case_hub_ignored_range(work: Path) -> str:
    return _hub(work, {"ignore_range": True}, pad_mib=512)


def case_hub_foreign_link(work: Path) -> str:
    return _hub(work, {"tree_next": "foreign"}, page_size=2)


def case_hub_endless_pages(work: Path) -> str:
    return _hub(work, {"tree_next": "repeat"}, page_size=1000)


def case_hub_endless_fresh_pages(work: Path) -> str:
    return _hub(work, {"tree_next": "fresh"}, page_size=1000)


def case_hub_slow_bytes(work: Path) -> str:
    return _hub(work, {"slow_bytes": 0.05}, deadline=5.0)


def _outside(work: Path) -> Path:
    """A folder beside the output full of JSON files (and names the journal writes) that are not its own."""
    elsewhere = work / "elsewhere"
    run = elsewhere / "0123abcd"
    run.mkdir(parents=True)
    for i in range(1000):
        (elsewhere / f"notes-{i}.json").write_text("{}")
        (run / f"file-{i:024x}.json").write_text("{}")
    return elsewhere


def _count(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*"))


def case_journal_symlink(work: Path) -> str:
    dataset, out = _setup(work)
    elsewhere = _outside(work)
    (out / ".journal").symlink_to(elsewhere, target_is_directory=True)
    before = _count(elsewhere)
    line = _import(dataset, out, "--force")
    return f"{line} | outside: {_count(elsewhere)}/{before} files kept"


def case_journal_forged_dotdot(work: Path) -> str:
    dataset, out = _setup(work)
    victim = work / "victim"
    victim.mkdir()
    (victim / f".x.parquet.tmp-{'1' * 32}").write_bytes(b"not the output's")
    doc = json.loads((out / "manifest.json").read_text())
    entry = dict(doc["episodes_files"]["meta/episodes/chunk-000/file-000.parquet"],
                 parts=["episodes/../../victim/x.parquet"])
    run = out / ".journal" / "deadrun"
    run.mkdir(parents=True)
    (run / f"file-{'c' * 24}.json").write_text(json.dumps({
        "kind": "episodes_file", "run_id": "deadrun", "options": doc["options"], "dataset": f"file://{dataset}",
        "episodes_file": "meta/episodes/../../../victim/x.parquet", "entry": entry}))
    line = _import(dataset, out, "--force")
    return f"{line} | victim kept: {(victim / f'.x.parquet.tmp-{chr(49) * 32}').exists()}"


def _dead_run(out: Path, records: int, options: dict) -> Path:
    run = out / ".journal" / "deadrun"
    run.mkdir(parents=True)
    body = json.dumps({"kind": "episodes_file", "options": options, "dataset": "file:///another/dataset",
                       "episodes_file": "meta/episodes/chunk-000/file-000.parquet", "entry": {}})
    for i in range(records // 2):
        (run / f"part-{i:024x}-000000.json").write_text('{"kind": "part"}')
        (run / f"file-{i:024x}.json").write_text(body)
    return run


def case_journal_dead_run_50k_skipped(work: Path) -> str:
    dataset, out = _setup(work)
    _dead_run(out, 50_000, json.loads((out / "manifest.json").read_text())["options"])
    line = _import(dataset, out)
    return f"{line} | left in .journal: {_count(out / '.journal') if (out / '.journal').exists() else 0}"


def case_journal_dead_run_50k_forced(work: Path) -> str:
    dataset, out = _setup(work)
    _dead_run(out, 50_000, json.loads((out / "manifest.json").read_text())["options"])
    line = _import(dataset, out, "--force")
    return f"{line} | left in .journal: {_count(out / '.journal') if (out / '.journal').exists() else 0}"


def case_wildcard_key_gone_on_memory(work: Path) -> str:
    import fsspec
    from tests.bench.synth_dataset import make_dataset
    from tests.helpers import run_import
    local = make_dataset(work / "ds", episodes=4, frames=10, cameras=0, episodes_per_meta_file=2, state_dim=2,
                         action_dim=2)
    episodes = local / "meta" / "episodes" / "chunk-000"
    (episodes / "file-001.parquet").rename(episodes / "*.parquet")
    fs = fsspec.filesystem("memory")
    fs.put(str(local) + "/", "/wild/ds", recursive=True)
    assert run_import("memory://wild/ds", "memory://wild/out") == 0
    fs.rm_file("/wild/ds/meta/episodes/chunk-000/*.parquet")
    line = _import("memory://wild/ds", "memory://wild/out")
    return f"{line} | other part kept: {fs.exists('/wild/out/episodes/chunk-000/file-000.parquet')}"


def case_finish_phase_deadline_tiny(work: Path) -> str:
    dataset = _setup(work)[0]
    return _import(dataset, work / "fresh", "--phase_deadline", "finish=0.001")


def case_terminal_disk_full(work: Path) -> str:
    import errno
    from pipelines import cli
    from tests.helpers import SAMPLE, copy_dataset
    sys.path.insert(0, str(REPO))
    dataset = copy_dataset(SAMPLE, work / "so101")

    class Full:
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    saved = sys.stdout
    sys.stdout = Full()
    try:
        cli.main(["--dataset", str(dataset), "--output", str(work / "out"), "--runner", "FnApiRunner"])
    except SystemExit as ex:
        status = ex.code
    finally:
        sys.stdout = saved
    return f"exit {status}, manifest {json.loads((work / 'out' / 'manifest.json').read_text())['status']}"


def case_interrupt_waiting_for_lease(work: Path) -> str:
    import contextlib
    import io
    import threading
    from tests.helpers import SAMPLE, copy_dataset, run_import
    from transforms.output import lease
    sys.path.insert(0, str(REPO))
    dataset = copy_dataset(SAMPLE, work / "so101")
    out = work / "out"
    buf = io.StringIO()
    held = lease.acquire(f"file://{out}", run_id="other", ttl_seconds=600)
    real = lease.acquire

    def acquire(output, **kwargs):  # the signal comes once the run waits for the held lease
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        return real(output, **kwargs)

    lease.acquire = acquire
    with contextlib.redirect_stdout(buf):
        status = run_import(dataset, out, "--wait-for-lease", "120")
    lease.release(held)
    return f"exit {status}: {buf.getvalue().strip().splitlines()[-1]}"


def case_query_no_parts_and_hostile_prefix(work: Path) -> str:
    import duckdb
    from tests.helpers import SAMPLE, copy_dataset, run_import
    from transforms.reader import query
    from transforms.reader import ReaderError
    dataset = copy_dataset(SAMPLE, work / "so101")
    (dataset / "data" / "chunk-000" / "file-000.parquet").write_bytes(b"broken")
    run_import(dataset, work / "out")
    said = []
    for call in (lambda: query.duckdb_views(duckdb.connect(), str(work / "out")),
                 lambda: query.duckdb_views(duckdb.connect(), str(work / "out"), prefix='x"\x00; --')):
        try:
            call()
        except ReaderError as ex:
            said.append(str(ex)[:60])
    return " | ".join(said)


CASES = [name[len("case_"):] for name in sorted(globals()) if name.startswith("case_")]


def _run_case(name: str, timeout: float) -> tuple[str, float, float]:
    """(the case's last output line, wall seconds, peak RSS MB of its subprocess from os.wait4)."""
    work = Path(tempfile.mkdtemp(prefix=f"hostile-state-{name}-"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    log = work / "stdout.txt"
    start = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, __file__, "--case", name, "--work", str(work)], cwd=REPO, env=env,
                                stdout=f, stderr=subprocess.DEVNULL, start_new_session=True)
    rss, killed = 0.0, False
    while True:
        pid, _, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            rss = usage.ru_maxrss / 1024
            break
        if time.monotonic() - start > timeout:
            os.killpg(proc.pid, signal.SIGKILL)
            _, _, usage = os.wait4(proc.pid, 0)
            rss, killed = usage.ru_maxrss / 1024, True
            break
        time.sleep(0.05)
    proc.returncode = 0  # reaped above
    seconds = time.monotonic() - start
    text = log.read_text().strip()
    shutil.rmtree(work, ignore_errors=True)
    if killed:
        return f"KILLED after {timeout:.0f} s (a hang)", seconds, rss
    return (text.splitlines()[-1] if text else "(no output)"), seconds, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        import logging
        logging.disable(logging.CRITICAL)
        print(globals()[f"case_{args.case}"](Path(args.work)).replace("\n", " ")[:400])
        return
    print(f"{'case':28} {'seconds':>8} {'peak MB':>8}  result")
    for name in args.cases.split(","):
        line, seconds, rss = _run_case(name, args.timeout)
        print(f"{name:28} {seconds:8.1f} {rss:8.0f}  {line[:300]}", flush=True)


if __name__ == "__main__":
    main()
