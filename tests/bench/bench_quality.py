"""What the quality checks cost an import: wall time with and without them, on a LeRobot-shaped dataset.

    python tests/bench/bench_quality.py [--episodes 2000] [--rounds 3] [--keep DIR]

The dataset is bench_real_scale.py's (`make_real_scale`, from tests/bench/synth_dataset.py): 2,000 episodes of
150..450 frames (~600k frames at 30 fps), state and action float32[24] and LeRobot's 5 default columns, data
files rolled at 100 MB with one row group per episode, 2 AV1 cameras whose MP4s roll at 9,000 samples with a
keyframe every 2 frames (sparse MP4s: real sample tables in the moov), 20 episodes files of 100 episodes.

Rounds alternate (with, without, without, with, ...), each import in a fresh process into a fresh output
(`--runner FnApiRunner`, one worker); wall and CPU time (user + system of that process) are printed, CPU
time being the steadier figure on a shared machine. "Without" replaces the two hooks the checks add (the part writer's
`check_part` and the MP4 step's sample windows) by no-ops; everything else (quality tables, manifest summary)
still runs. Also printed: `lerobot-import check` on the same dataset (the checks alone, reading only what
they need).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the repo root, when run as a script


def job(root: str, out: str, checks: bool) -> None:
    """One import in this process (the bench runs it in a fresh one), the checks' hooks no-ops unless `checks`."""
    import logging
    logging.disable(logging.WARNING)
    if not checks:
        from transforms import quality
        from transforms.work import mp4_facts
        quality.check_part = lambda *a, **k: []
        mp4_facts.part_samples = lambda rel, index, uses: {u.part: None for u in uses}
    from pipelines.import_lerobot import run
    status = run(["--dataset", root, "--output", out, "--runner", "FnApiRunner", "--direct_num_workers", "1"])
    assert status == 0, f"import of {root} failed"


def _timed_import(root: Path, out: Path, checks: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the import's process) of one import in a fresh process."""
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from tests.bench.bench_quality import job; "
            f"job({str(root)!r}, {str(out)!r}, {checks!r})")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, env=dict(
        os.environ, PYTHONPATH=str(REPO)))
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="generate the dataset here (reused when present)")
    args = ap.parse_args()

    from tests.bench.bench_real_scale import make_real_scale
    tmp = Path(tempfile.mkdtemp(prefix="bench_quality_"))
    root = args.keep or tmp / "ds"
    if not (root / "meta/info.json").exists():
        t = time.perf_counter()
        make_real_scale(root, episodes=args.episodes)
        print(f"generated in {time.perf_counter() - t:.1f} s")
    data = sorted((root / "data").rglob("*.parquet"))
    data_mb = sum(p.stat().st_size for p in data) / 1e6
    mp4s = sorted((root / "videos").rglob("*.mp4"))
    info = json.loads((root / "meta/info.json").read_text())
    print(f"dataset: {info['total_episodes']} episodes, {info['total_frames']:,} frames, {len(data)} data files "
          f"({data_mb:.0f} MB), {len(mp4s)} AV1 MP4s (<= 9,000 samples, g=2) over 2 cameras, "
          f"{len(list((root / 'meta/episodes').rglob('*.parquet')))} episodes files")

    times: dict[str, list[tuple[float, float]]] = {"with checks": [], "without": []}
    order = []
    for r in range(args.rounds):
        order += [True, False] if r % 2 == 0 else [False, True]
    for i, checks in enumerate(order):
        name = "with checks" if checks else "without"
        times[name].append(_timed_import(root, tmp / f"out-{i}", checks))
        shutil.rmtree(tmp / f"out-{i}", ignore_errors=True)
        wall, cpu = times[name][-1]
        print(f"import {i + 1}: {name:12s} wall {wall:7.2f} s, CPU {cpu:7.2f} s", flush=True)
    for k, what in ((0, "wall time"), (1, "CPU time (user + system; the machine may be shared)")):
        with_ = statistics.median(t[k] for t in times["with checks"])
        without = statistics.median(t[k] for t in times["without"])
        print(f"import {what}, median of {args.rounds}: with checks {with_:.2f} s, without {without:.2f} s: the "
              f"checks add {100 * (with_ - without) / without:+.1f}% (target <= +10%)")

    from transforms.quality.dataset import check_dataset_quality
    t = time.perf_counter()
    report = check_dataset_quality(str(root))
    print(f"lerobot-import check (the checks alone, reading what they need): {time.perf_counter() - t:.2f} s, "
          f"{len(report.findings)} findings, {report.bytes_read / 1e6:.0f} MB read of {data_mb:.0f} MB of data files")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
