"""Benchmark: peak memory of an import worker at 1x and 4x the episodes.

    python tests/bench/bench_memory.py                         # 8 vs 32 episodes of 3,000 frames, float32[128] x 2
    python tests/bench/bench_memory.py --episodes 4 --frames 600 --quick
    python tests/bench/bench_memory.py --layout single         # all episodes in ONE episodes file, in parts

Generates (tests/bench/synth_dataset.py) a dataset of EPISODES episodes x FRAMES frames (one h264
camera, state/action float32[DIM]) and one with 4x the episodes, same episode size. Layout "files"
(default) is LeRobot's: a new episodes file, data file and MP4 every --per-file episodes, so 4x the
episodes is 4x the files. Layout "single" puts every episode in one episodes file, one data file and one
MP4 and imports with --data-span-limit (one part per ~--per-file episodes).

Each import runs in a fresh subprocess, `python -m pipelines.import_lerobot ... --runner FnApiRunner`
(in-process runner: that process IS the worker); its peak RSS is `ru_maxrss` from os.wait4 of that
child, cross-checked by polling VmHWM of its process tree. Target: the peak is bounded by the largest
episode (or part), not by the dataset: peak(4x) <= 1.2 x peak(1x). Prints both peaks and the ratio;
exits 1 when the ratio is over --max-ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _tree_hwm_kb(root_pid: int) -> int:
    """Sum of VmHWM over the process tree of `root_pid` (0 when it is gone)."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                kids.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry))
            except (OSError, ValueError):
                continue
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def run_import(dataset: Path, out: Path, extra: list[str]) -> dict:
    """Import in a fresh child; returns wall seconds, exit status, ru_maxrss and polled tree peak (MiB)."""
    cmd = [sys.executable, "-m", "pipelines.import_lerobot", "--dataset", str(dataset), "--output", str(out),
           "--runner", "FnApiRunner", *extra]
    log = tempfile.TemporaryFile("w+")
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
    polled = [0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            polled[0] = max(polled[0], _tree_hwm_kb(proc.pid))
            done.wait(0.05)
    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    watcher.join()
    wall = time.perf_counter() - started
    log.seek(0)
    text = log.read()
    if proc.returncode != 0:
        print(text[-4000:], file=sys.stderr)
        raise SystemExit(f"import of {dataset} exited {proc.returncode}")
    manifest = json.loads((out / "manifest.json").read_text())
    return {"wall_s": wall, "maxrss_mb": usage.ru_maxrss / 1024, "polled_mb": polled[0] / 1024,
            "episodes": manifest["totals"]["episodes_written"], "frames": manifest["totals"]["frames"],
            "parts": sum(len(f["parts"]) for f in manifest["episodes_files"].values())}


def make(root: Path, episodes: int, args) -> Path:
    from tests.bench.synth_dataset import make_dataset
    per = args.per_file if args.layout == "files" else episodes
    return make_dataset(root, episodes=episodes, frames=args.frames, cameras=1, state_dim=args.dim,
                        action_dim=args.dim, episodes_per_meta_file=per, episodes_per_data_file=per,
                        episodes_per_mp4=per, clip_frames=min(args.frames, 30), overwrite=True)


def _dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=8, help="episodes of the 1x dataset (4x has 4 times as many)")
    ap.add_argument("--frames", type=int, default=3000, help="frames per episode")
    ap.add_argument("--dim", type=int, default=128, help="state and action dimension (float32)")
    ap.add_argument("--per-file", type=int, default=4, help="episodes per episodes file / data file / MP4")
    ap.add_argument("--layout", choices=("files", "single"), default="files")
    ap.add_argument("--max-ratio", type=float, default=1.2)
    ap.add_argument("--repeat", type=int, default=3, help="imports per dataset; the median peak is compared "
                    "(a single peak varies by +-20 MiB from run to run)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the datasets here (default: a temp folder)")
    ap.add_argument("--quick", action="store_true", help="fewer frames (a smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.frames = min(args.frames, 300)

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_memory_"))
    work.mkdir(parents=True, exist_ok=True)
    extra: list[str] = []
    results = {}
    try:
        for scale in (1, 4):
            n = args.episodes * scale
            ds = make(work / f"ds_{scale}x", n, args)
            if args.layout == "single":
                # One part per ~per-file episodes of data: the same part size at 1x and 4x.
                data = sorted((ds / "data").rglob("*.parquet"))
                limit = max(1, int(sum(p.stat().st_size for p in data) / n * args.per_file) + 1)
                extra = ["--data-span-limit", str(limit)]
            runs = []
            for i in range(max(1, args.repeat)):
                out = work / f"out_{scale}x_{i}"
                shutil.rmtree(out, ignore_errors=True)
                runs.append(run_import(ds, out, extra))
                shutil.rmtree(out, ignore_errors=True)
            runs.sort(key=lambda r: r["maxrss_mb"])
            r = dict(runs[len(runs) // 2])
            r["dataset_mb"] = _dir_mb(ds)
            results[scale] = r
            print(f"{scale}x: {n} episodes x {args.frames} frames ({r['dataset_mb']:.1f} MiB, {r['parts']} parts): "
                  f"median peak RSS {r['maxrss_mb']:.0f} MiB of {[round(x['maxrss_mb']) for x in runs]} "
                  f"(polled tree {r['polled_mb']:.0f} MiB), {r['wall_s']:.1f} s", flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    ratio = results[4]["maxrss_mb"] / results[1]["maxrss_mb"]
    polled_ratio = results[4]["polled_mb"] / max(1e-9, results[1]["polled_mb"])
    ok = ratio <= args.max_ratio
    print(f"peak 1x {results[1]['maxrss_mb']:.0f} MiB, peak 4x {results[4]['maxrss_mb']:.0f} MiB: ratio {ratio:.2f} "
          f"(polled {polled_ratio:.2f}); target <= {args.max_ratio:.2f}: {'OK' if ok else 'OVER'} "
          f"[layout {args.layout}]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
