"""Benchmark: a dataset shaped like LeRobot's real output, imported with no options.

    python tests/bench/bench_real_scale.py                         # 2,000 episodes, ~600k frames
    python tests/bench/bench_real_scale.py --data-row-groups file  # LeRobot's first v3 writer: one row group a file
    python tests/bench/bench_real_scale.py --episodes-file-only    # only the 100,000-episode episodes file

The dataset (tests/bench/synth_dataset.py, `make_dataset`): 2,000 episodes of 150..450 frames (seeded,
~600k frames at 30 fps), state and action float32[16] and LeRobot's 5 default columns, data files rolled
at 100 MB (LeRobot's `data_files_size_in_mb`) with one row group per episode (its recording writer) or
one per file (`--data-row-groups file`), 2 AV1 cameras whose MP4s roll at 9,000 samples (~200 MB of
video at ~22 KB a sample: LeRobot's `video_files_size_in_mb`) with a keyframe every 2 frames (g=2; the
MP4s are sparse: real sample tables in the moov, an unwritten mdat, as the import never decodes), and
20 episodes files of 100 episodes with LeRobot's per-episode `stats/<feature>/<stat>` columns.

Measured in one run, the import and the floor alternating (`--rounds`), each in its own process with the
peak RSS of its process tree polled from /proc:
  * `lerobot-import --dataset DS --output OUT`: no options, the default runner;
  * the floor: pyarrow reads every data file (`pq.read_table`) and writes it once (zstd);
and, before the import, `plan` on the same command line. Printed: parts written, data bytes read / data
bytes, plan estimate / real output, wall time vs the floor, peak RSS.
Targets (issue 19): about one part per episodes file (at most 40), data bytes read <= 1.1x, plan within
25%, wall <= 3x the floor, peak RSS <= 1 GB.

Then the hostile case: ONE episodes file of 100,000 episodes with LeRobot's stats columns (9 features x
10 statistics), written at once (one row group, as conversion tools write it), read as the import reads
it (`read_episodes_file`: footer, then only the columns the import uses), in a fresh process: time and
peak RSS. Targets: <= 5 s, <= 500 MB. (The same file with LeRobot's row groups of 10 rows has a 160 MB
footer, which the import refuses unparsed: rule `limit`, over 64 MiB of footer.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.bench_scale import measure  # noqa: E402  (peak RSS of a process tree, from /proc)

#: LeRobot's defaults and the issue's shape.
EPISODES, FRAMES = 2000, (150, 450)
SAMPLES_PER_MP4 = 9000
SAMPLE_BYTES = 200e6 / SAMPLES_PER_MP4


def compile_project(root: Path) -> None:
    """The project's modules at `root` compiled to bytecode, as an installed package has them: with an editable
    install under PYTHONDONTWRITEBYTECODE (this workplace's default) every timed run would compile them again."""
    import compileall
    for package in ("pipelines", "transforms"):
        compileall.compile_dir(str(root / package), quiet=1)


def make_real_scale(root: Path, *, episodes: int = EPISODES, row_groups: str = "episode", seed: int = 0) -> Path:
    """The LeRobot-shaped dataset described above (episode lengths drawn from `seed`)."""
    from tests.bench.synth_dataset import make_dataset

    lengths = np.random.default_rng(seed).integers(FRAMES[0], FRAMES[1] + 1, episodes).tolist()
    return make_dataset(root, episodes=episodes, frames=lengths, cameras=2, codec="av1", gop=2, clip_frames=30,
                        episodes_per_meta_file=100, data_file_mb=100.0, samples_per_mp4=SAMPLES_PER_MP4,
                        synthetic_mp4s=True, sample_bytes=SAMPLE_BYTES, state_dim=16, action_dim=16,
                        data_row_groups=row_groups, overwrite=True, seed=seed, verbose=True)


def floor_job(root: str, out: str) -> None:
    """pyarrow reads every data file and writes it once: the least an importer of the frames must do."""
    import pyarrow.parquet as pq

    Path(out).mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(sorted(Path(root, "data").rglob("*.parquet"))):
        pq.write_table(pq.read_table(path), Path(out) / f"floor-{i}.parquet", compression="zstd")


def episodes_file_job(root: str) -> None:
    """Read the one episodes file of `root` as the import does; print rows and seconds."""
    from transforms.lerobot.dataset import read_info
    from transforms.lerobot.episodes_files import read_episodes_file

    t0 = time.perf_counter()
    info = read_info(root)
    rel = str(next(Path(root, "meta", "episodes").rglob("*.parquet")).relative_to(root))
    rows = read_episodes_file(root, rel, info)
    print(json.dumps({"rows": len(rows), "seconds": time.perf_counter() - t0}))


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def bench_import(work: Path, row_groups: str, rounds: int, reuse: bool = False) -> None:
    root = work / f"ds-{row_groups}"
    if not (reuse and (root / "meta" / "info.json").exists()):
        make_real_scale(root, row_groups=row_groups)
    data_files = sorted((root / "data").rglob("*.parquet"))
    data_bytes = sum(p.stat().st_size for p in data_files)
    mp4s = sorted((root / "videos").rglob("*.mp4"))
    import pyarrow.parquet as pq
    frames = sum(pq.ParquetFile(p).metadata.num_rows for p in data_files)
    groups = sum(pq.ParquetFile(p).metadata.num_row_groups for p in data_files)
    print(f"dataset: {EPISODES} episodes, {frames:,} frames; {len(data_files)} data files "
          f"({', '.join(_mb(p.stat().st_size) for p in data_files)}; {groups} row groups); {len(mp4s)} MP4s "
          f"(2 AV1 cameras, {SAMPLES_PER_MP4} samples max, g=2, sparse mdat); "
          f"{len(list((root / 'meta' / 'episodes').rglob('*.parquet')))} episodes files")

    compile_project(REPO)
    print(f"load average at the start: {os.getloadavg()[0]:.2f} (2 cores shared: wall figures are noisy)")
    from pipelines import plan
    t0 = time.perf_counter()
    (planned,) = [plan.plan_dataset(str(root), str(work / "out-plan"), plan.output_options(plan.PlanSettings()))]
    plan_s = time.perf_counter() - t0
    this = [sys.executable, str(Path(__file__).resolve())]
    imports, floors = [], []
    for i in range(rounds):
        out = work / f"out-{i}"
        shutil.rmtree(out, ignore_errors=True)
        m = measure([sys.executable, "-m", "pipelines.import_lerobot", "--dataset", str(root), "--output", str(out),
                     "-v"],  # -v: the metrics line
                    cwd=REPO)
        if m.rc != 0:
            raise SystemExit(f"the import failed ({m.rc}):\n{m.stdout[-3000:]}\n{m.stderr[-3000:]}")
        manifest = json.loads((out / "manifest.json").read_text())
        imports.append((m, manifest))
        shutil.rmtree(out, ignore_errors=True)
        floor_out = work / f"floor-{i}"
        f = measure(this + ["--_floor", str(root), str(floor_out)], cwd=REPO)
        if f.rc != 0:
            raise SystemExit(f"the floor failed:\n{f.stderr[-3000:]}")
        floors.append(f)
        shutil.rmtree(floor_out, ignore_errors=True)

    m, manifest = min(imports, key=lambda im: im[0].wall)
    floor = min(floors, key=lambda f: f.wall)
    metrics = m.metrics()
    totals = manifest["totals"]
    parts = sum(len(e["parts"]) for e in manifest["episodes_files"].values())
    peak = max(kb for _, kb in m.peaks.values()) / 1024
    tree_peak = sum(kb for _, kb in m.peaks.values()) / 1024
    oversized = [w for w in manifest["warnings"] if w["what"] == "oversized_episode"]
    print(f"plan: {planned.parts} parts, ~{_mb(planned.estimated_output_bytes)} out ({plan_s:.2f} s)")
    print(f"import (no options, default runner): {manifest['status']}, {totals['episodes_written']} episodes, "
          f"{totals['frames']:,} frames, {parts} parts for {len(manifest['episodes_files'])} episodes files "
          f"(target <= 40), {len(oversized)} oversized episodes")
    print(f"data bytes read / data bytes = {metrics['data_bytes_read']:,} / {data_bytes:,} = "
          f"{metrics['data_bytes_read'] / data_bytes:.3f}x (target <= 1.1x)")
    print(f"plan estimate / real output = {planned.estimated_output_bytes:,} / {totals['bytes']:,} = "
          f"{planned.estimated_output_bytes / totals['bytes']:.3f} (target within 25%)")
    print(f"wall: import {m.wall:.2f} s vs floor {floor.wall:.2f} s = {m.wall / floor.wall:.2f}x (target <= 3x); "
          f"rounds: import {', '.join(f'{i.wall:.2f}' for i, _ in imports)}, floor "
          f"{', '.join(f'{f.wall:.2f}' for f in floors)}")
    median_import = statistics.median(i.wall for i, _ in imports)
    median_floor = statistics.median(f.wall for f in floors)
    print(f"wall, medians: import {median_import:.2f} s vs floor {median_floor:.2f} s = "
          f"{median_import / median_floor:.2f}x")
    cpu_import, cpu_floor = min(i.cpu_total for i, _ in imports), min(f.cpu_total for f in floors)
    print(f"cpu (user + system, process tree): import {cpu_import:.2f} s vs floor {cpu_floor:.2f} s = "
          f"{cpu_import / cpu_floor:.2f}x; load average at the end {os.getloadavg()[0]:.2f}")
    print(f"peak RSS: import {peak:,.0f} MB (largest process; {tree_peak:,.0f} MB summed over its "
          f"{len(m.peaks)} processes), floor {max(kb for _, kb in floor.peaks.values()) / 1024:,.0f} MB "
          f"(target <= 1 GB)")


def make_big_episodes_file(root: Path, episodes: int = 100_000) -> Path:
    """A dataset whose ONE episodes file holds `episodes` one-frame episodes with LeRobot's stats columns."""
    from tests.bench.synth_dataset import make_dataset

    return make_dataset(root, episodes=episodes, frames=1, cameras=2, codec="av1", gop=2, clip_frames=1,
                        episodes_per_meta_file=episodes, synthetic_mp4s=True, state_dim=6, action_dim=6,
                        data_row_groups="file", meta_row_group_size=None, overwrite=True, verbose=True)


def bench_episodes_file(work: Path, rounds: int, reuse: bool = False) -> None:
    root = work / "ds-100k"
    if not (reuse and (root / "meta" / "info.json").exists()):
        make_big_episodes_file(root)
    (path,) = (root / "meta" / "episodes").rglob("*.parquet")
    import pyarrow.parquet as pq
    md = pq.ParquetFile(path).metadata
    stats = sum(1 for name in pq.ParquetFile(path).schema_arrow.names if name.startswith("stats/"))
    print(f"episodes file: {md.num_rows:,} episodes, {md.num_columns} columns ({stats} stats/*), "
          f"{md.num_row_groups:,} row groups, {_mb(path.stat().st_size)}")
    this = [sys.executable, str(Path(__file__).resolve())]
    runs = []
    for _ in range(rounds):
        m = measure(this + ["--_episodes_file", str(root)], cwd=REPO)
        if m.rc != 0:
            raise SystemExit(f"reading the episodes file failed:\n{m.stderr[-3000:]}")
        runs.append(m)
    best = min(runs, key=lambda r: r.wall)
    result = json.loads(best.stdout.strip().splitlines()[-1])
    print(f"read as the import does: {result['rows']:,} rows in {result['seconds']:.2f} s (process wall "
          f"{best.wall:.2f} s; target <= 5 s), peak RSS {best.root_peak_mb:,.0f} MB (target <= 500 MB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-row-groups", choices=("episode", "file"), default="episode")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of import and floor (best kept)")
    ap.add_argument("--episodes-file-only", action="store_true")
    ap.add_argument("--skip-episodes-file", action="store_true")
    ap.add_argument("--workdir", default=None, help="where datasets and outputs go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary work dir (a --workdir is always kept)")
    ap.add_argument("--reuse", action="store_true", help="reuse a dataset --keep left in --workdir")
    ap.add_argument("--_floor", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--_episodes_file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._floor:
        return floor_job(*args._floor)
    if args._episodes_file:
        return episodes_file_job(args._episodes_file)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-real-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if not args.episodes_file_only:
            bench_import(work, args.data_row_groups, args.rounds, args.reuse)
        if not args.skip_episodes_file:
            bench_episodes_file(work, args.rounds, args.reuse)
    finally:
        if not args.keep and not args.workdir:  # a folder the user named is theirs: only its outputs go
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
