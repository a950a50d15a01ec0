"""An import interrupted halfway, and its rerun, against a full import: what resuming costs.

Each round runs, in a fresh process each, on FnApiRunner:
  full         a full import into an empty output;
  interrupted  an import into another empty output, sent SIGINT once about half its episodes files have
               committed (their records under OUT/.journal/, watched every 10 ms);
  rerun        the same command again on that output: it imports only the files not committed;
  unchanged    the full run's command again: nothing to import, what every run costs anyway (the floor).
Rounds alternate which of full and interrupted+rerun goes first. Printed per round and as medians: the full
run's wall and CPU time, the files committed at the interrupt, the rerun's wall and CPU time, and the rerun
as a share of the full run; the rerun's counters (parts written, MP4s read, data bytes read) and whether its
output (episodes/ and media_index/, byte for byte) equals the full run's.

    python tests/bench/bench_resume.py                       # bench_real_scale's dataset in /work/rs
    python tests/bench/bench_resume.py --dataset ROOT --rounds 3 --fraction 0.5
    python tests/bench/bench_resume.py --dataset /tmp/ds-8k --make 8000 --rounds 5   # four times the size
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"interrupted by SIGINT: (\d+) episodes files? committed before it kept")


def _command(dataset: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "pipelines.import_lerobot", "--dataset", dataset, "--output", str(out),
            "--runner", "FnApiRunner", "-v"]  # -v: the metrics line (logs go to stderr)


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO))


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(dataset: str, out: Path) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one import run to its end."""
    cpu, start = _cpu(), time.perf_counter()
    proc = subprocess.run(_command(dataset, out), cwd=REPO, env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"import failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return wall, _cpu() - cpu, proc.stdout


def _committed(out: Path) -> int:
    journal = out / ".journal"
    return sum(1 for p in journal.rglob("file-*.json")) if journal.exists() else 0


def _interrupt(dataset: str, out: Path, at: int) -> tuple[float, int]:
    """(wall s until the run ended, episodes files it says it kept) of an import sent SIGINT once `at`
    episodes files have committed."""
    start = time.perf_counter()
    proc = subprocess.Popen(_command(dataset, out), cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    while proc.poll() is None and _committed(out) < at:
        time.sleep(0.01)
    if proc.poll() is not None:
        raise SystemExit("the import ended before it could be interrupted")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    wall = time.perf_counter() - start
    if proc.returncode != 130:
        raise SystemExit(f"the interrupted run exited {proc.returncode}:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    match = LINE.search(stdout)
    if not match:
        raise SystemExit(f"no interrupt line:\n{stdout[-2000:]}")
    leftovers = [p for p in out.rglob("*") if ".tmp-" in p.name]
    if leftovers:
        raise SystemExit(f"temporary files left behind: {leftovers[:5]}")
    return wall, int(match.group(1))


def _outputs(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and str(p.relative_to(out)).startswith(("episodes/", "media_index/"))}


def _metrics(stdout: str) -> dict[str, int]:
    line = next((x for x in stdout.splitlines() if x.startswith("metrics: ")), "metrics: ")
    return {k: int(v) for k, v in (kv.split("=") for kv in line[len("metrics: "):].split(", ") if "=" in kv)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="/work/rs/ds-episode",
                        help="a LeRobot v3 dataset (read only); made first with --make when it does not exist")
    parser.add_argument("--make", type=int, default=None, metavar="EPISODES",
                        help="make --dataset with bench_real_scale's generator at this many episodes when it is "
                             "missing (2000: bench_real_scale's own; 8000: four times it, 5 data files of 100 MB)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fraction", type=float, default=0.5, help="share of episodes files committed at SIGINT")
    parser.add_argument("--workdir", default=None, help="where the outputs go (a temporary folder by default)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.bench.bench_real_scale import compile_project, make_real_scale
    if args.make and not (Path(args.dataset) / "meta" / "info.json").exists():
        make_real_scale(Path(args.dataset), episodes=args.make)
    compile_project(REPO)
    files = len(list(Path(args.dataset).glob("meta/episodes/*/*.parquet")))
    at = max(1, round(files * args.fraction))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_resume_"))
    print(f"dataset {args.dataset}: {files} episodes files; SIGINT once {at} have committed; "
          f"{args.rounds} rounds, alternating")
    rows = []
    for k in range(args.rounds):
        full_out, resumed_out = work / f"full-{k}", work / f"resumed-{k}"
        for path in (full_out, resumed_out):
            shutil.rmtree(path, ignore_errors=True)
        order = ("full", "resume") if k % 2 == 0 else ("resume", "full")
        row: dict = {}
        for step in order:
            if step == "full":
                row["full_wall"], row["full_cpu"], _ = _run(args.dataset, full_out)
                row["floor_wall"], row["floor_cpu"], _ = _run(args.dataset, full_out)
            else:
                row["interrupted_wall"], row["kept"] = _interrupt(args.dataset, resumed_out, at)
                row["rerun_wall"], row["rerun_cpu"], stdout = _run(args.dataset, resumed_out)
                row["metrics"] = _metrics(stdout)
        row["same"] = _outputs(full_out) == _outputs(resumed_out)
        rows.append(row)
        m = row["metrics"]
        print(f"round {k + 1} ({' then '.join(order)}): full {row['full_wall']:.2f} s wall / {row['full_cpu']:.2f} s "
              f"CPU; interrupted after {row['interrupted_wall']:.2f} s with {row['kept']}/{files} files committed; "
              f"rerun {row['rerun_wall']:.2f} s wall / {row['rerun_cpu']:.2f} s CPU = "
              f"{row['rerun_wall'] / row['full_wall']:.0%} wall, {row['rerun_cpu'] / row['full_cpu']:.0%} CPU of the "
              f"full run (parts_written={m.get('parts_written', 0)}, mp4_files read={m.get('mp4_files', 0)}, "
              f"data_bytes_read={m.get('data_bytes_read', 0)}); output equal to the full run's: {row['same']}; "
              f"unchanged run {row['floor_wall']:.2f} s wall / {row['floor_cpu']:.2f} s CPU")
        for path in (full_out, resumed_out):
            shutil.rmtree(path, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    print(f"median: full {med('full_wall'):.2f} s wall / {med('full_cpu'):.2f} s CPU; committed at the interrupt "
          f"{statistics.median(r['kept'] for r in rows):.0f}/{files}; rerun {med('rerun_wall'):.2f} s wall / "
          f"{med('rerun_cpu'):.2f} s CPU; rerun / full = {med('rerun_wall') / med('full_wall'):.0%} wall, "
          f"{med('rerun_cpu') / med('full_cpu'):.0%} CPU (target: <= 60%); an unchanged run (the floor) "
          f"{med('floor_wall'):.2f} s wall / {med('floor_cpu'):.2f} s CPU = {med('floor_wall') / med('full_wall'):.0%} "
          f"wall, {med('floor_cpu') / med('full_cpu'):.0%} CPU of the full run")
    ratios = sorted(r["rerun_wall"] / r["full_wall"] for r in rows)
    print(f"rerun / full per round, median {statistics.median(ratios):.0%} wall "
          f"(range {ratios[0]:.0%}-{ratios[-1]:.0%}), "
          f"{statistics.median(r['rerun_cpu'] / r['full_cpu'] for r in rows):.0%} CPU")
    if not all(r["same"] for r in rows):
        raise SystemExit("a resumed output differs from the full run's")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
