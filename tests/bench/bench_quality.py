"""What the quality checks cost an import: wall time with and without them, on a LeRobot-shaped dataset.

    python tests/bench/bench_quality.py [--episodes 400] [--frames 250] [--cameras 3] [--rounds 3] [--keep DIR]

The dataset comes from tests/bench/synth_dataset.py (LeRobot's writer layout): 30 fps, state and action of
14 float32 each, `--cameras` h264 cameras with a keyframe every 2 frames, MP4s rolling over at 10,000
samples, one data file (LeRobot's 100 MB roll-over is not reached), 50 episodes per episodes file.

Rounds alternate (with, without, with, ...) in one process, each import into a fresh output, FnApiRunner
with one worker. "Without" replaces the two hooks the checks add (the part writer's `check_part` and the
MP4 step's sample windows) by no-ops; everything else (quality tables, manifest summary) still runs. Also
printed: `lerobot-import check` on the same dataset (the checks alone, reading only what they need).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, when run as a script

from tests.bench.synth_dataset import make_dataset  # noqa: E402


def _import(root: Path, out: Path) -> float:
    from pipelines.import_lerobot import run
    t = time.perf_counter()
    status = run(["--dataset", str(root), "--output", str(out), "--runner", "FnApiRunner",
                  "--direct_num_workers", "1"])
    elapsed = time.perf_counter() - t
    assert status == 0, f"import of {root} failed"
    return elapsed


class _ChecksOff:
    """The import without its quality checks: the two hooks made no-ops for the duration."""

    def __enter__(self):
        from transforms import media_files, quality
        self._saved = (quality.check_part, media_files.part_samples)
        quality.check_part = lambda *a, **k: []
        media_files.part_samples = lambda rel, index, uses: {u.part: None for u in uses}
        return self

    def __exit__(self, *exc):
        from transforms import media_files, quality
        quality.check_part, media_files.part_samples = self._saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=400)
    ap.add_argument("--frames", type=int, default=250)
    ap.add_argument("--cameras", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="generate the dataset here (reused when present)")
    args = ap.parse_args()

    import logging
    logging.disable(logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="bench_quality_"))
    root = args.keep or tmp / "ds"
    if not (root / "meta/info.json").exists():
        t = time.perf_counter()
        make_dataset(root, episodes=args.episodes, frames=args.frames, cameras=args.cameras, codec="h264", gop=2,
                     samples_per_mp4=10_000, episodes_per_meta_file=50, overwrite=True)
        print(f"generated in {time.perf_counter() - t:.1f} s")
    data_mb = sum(p.stat().st_size for p in (root / "data").rglob("*.parquet")) / 1e6
    mp4s = sorted((root / "videos").rglob("*.mp4"))
    print(f"dataset: {args.episodes} episodes x {args.frames} frames = {args.episodes * args.frames:,} frames, "
          f"{args.cameras} h264 cameras (g=2), {len(mp4s)} MP4s of <= 10,000 samples, "
          f"{len(list((root / 'data').rglob('*.parquet')))} data file(s) of {data_mb:.1f} MB, "
          f"{len(list((root / 'meta/episodes').rglob('*.parquet')))} episodes files")

    times = {"with checks": [], "without": []}
    for r in range(args.rounds):
        for name in (("with checks", "without") if r % 2 == 0 else ("without", "with checks")):
            out = tmp / f"out-{name.replace(' ', '_')}-{r}"
            if name == "without":
                with _ChecksOff():
                    times[name].append(_import(root, out))
            else:
                times[name].append(_import(root, out))
            print(f"round {r + 1}: {name:12s} {times[name][-1]:7.2f} s")
    with_, without = statistics.median(times["with checks"]), statistics.median(times["without"])
    print(f"import wall time (median of {args.rounds}): with checks {with_:.2f} s, without {without:.2f} s: "
          f"the checks add {100 * (with_ - without) / without:+.1f}%")

    from transforms.quality.dataset import check_dataset_quality
    t = time.perf_counter()
    report = check_dataset_quality(str(root))
    print(f"lerobot-import check (the checks alone, reading what they need): {time.perf_counter() - t:.2f} s, "
          f"{len(report.findings)} findings, {report.bytes_read / 1e6:.1f} MB of data files read of {data_mb:.1f}")


if __name__ == "__main__":
    main()
