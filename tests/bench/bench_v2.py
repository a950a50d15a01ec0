"""Benchmark: a LeRobot v2.1 dataset imported as it is vs the same data in v3.0.

    python tests/bench/bench_v2.py [--episodes 2000] [--frames 150] [--cameras 2] [--gop 2] [--rounds 2]
                                   [--samples-per-mp4 10000] [--workdir DIR]
    python tests/bench/bench_v2.py --plan-episodes 100000     planning alone, from episodes.jsonl

The v3.0 dataset is generated (`synth_dataset.make_dataset`: real encoded h264, every episode starting on
a keyframe, `--samples-per-mp4` samples per MP4, one data file per 100 MB, episodes files of 50 episodes),
then repacked into v2.1 layout by `tests/v21_repack.py` (one data file and one MP4 per camera per episode,
MP4s cut by stream copy: the same samples, the same frame values), so both hold the same data. Each round
imports both (alternating, FnApiRunner, default options) and prints wall time and what the pipeline's
counters say was read: data-file bytes and requests, MP4 bytes and requests (head + moov), plus the
metadata files (episodes files / episodes.jsonl) by size.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.synth_dataset import make_dataset  # noqa: E402
from tests.v21_repack import repack_v21  # noqa: E402


def make_v21_dataset(root: Path, **shape) -> tuple[Path, Path]:
    """(v3.0 dataset, its v2.1 repack) of the given shape (`make_dataset`'s keywords): the v2.1 generator."""
    v30 = make_dataset(root / "v30", **shape)
    return v30, repack_v21(v30, root / "v21")


def _import(root: Path, out: Path) -> tuple[float, dict]:
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions
    from pipelines.import_lerobot import build_pipeline, config_from_options
    from pipelines.options import ImportOptions
    opts = PipelineOptions(["--dataset", str(root), "--output", str(out), "--runner", "FnApiRunner"])
    t0 = time.perf_counter()
    result = build_pipeline(opts, config_from_options(opts.view_as(ImportOptions)), "bench").run()
    result.wait_until_finish()
    elapsed = time.perf_counter() - t0
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(MetricsFilter())["counters"]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "imported", manifest.get("status")
    return elapsed, counters


def plan_scale(episodes: int, work: Path) -> None:
    """Planning a v2.1 dataset of `episodes` episodes from its metadata alone (info.json and episodes.jsonl,
    two cameras, 150 frames each): the parse, the grouping, and every group's rows as the plan step makes
    them (a worker makes only its own groups' rows; the check step digests them all once)."""
    from transforms.lerobot import v2
    from transforms.lerobot.info import parse_info
    info = json.loads((REPO / "tests" / "data" / "so101_av1" / "meta" / "info.json").read_text())
    info.update(codebase_version="v2.1", data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
                video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4")
    raw = "".join(json.dumps({"episode_index": i, "tasks": ["pick the cube"], "length": 150}) + "\n"
                  for i in range(episodes)).encode()
    parsed_info = parse_info(json.dumps(info).encode())
    t0 = time.perf_counter()
    parsed = v2.parse_episodes_jsonl(raw)
    t1 = time.perf_counter()
    groups = parsed.groups(parsed_info.chunks_size)
    rows = sum(len(v2.group_rows(parsed, parsed_info, name, positions)) for name, positions in groups.items())
    t2 = time.perf_counter()
    digests = [v2.group_digest(parsed, positions) for positions in groups.values()]
    t3 = time.perf_counter()
    print(f"plan scale: {episodes:,} episodes, episodes.jsonl {len(raw):,} B -> {len(groups)} groups; parse "
          f"{t1 - t0:.2f} s, rows of every group {t2 - t1:.2f} s ({rows:,} rows, "
          f"{(t2 - t1) / max(len(groups), 1) * 1000:.0f} ms per group), digests {t3 - t2:.2f} s ({len(digests)})")


def _size(paths) -> int:
    return sum(p.stat().st_size for p in paths)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--cameras", type=int, default=2)
    ap.add_argument("--gop", type=int, default=2)
    ap.add_argument("--samples-per-mp4", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir")
    ap.add_argument("--plan-episodes", type=int, help="only time planning a v2.1 dataset of this many episodes")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-v2-"))
    if args.plan_episodes:
        plan_scale(args.plan_episodes, work)
        return
    t0 = time.perf_counter()
    v30, v21 = make_v21_dataset(work, episodes=args.episodes, frames=args.frames, cameras=args.cameras,
                                gop=args.gop, samples_per_mp4=args.samples_per_mp4)
    print(f"generated and repacked in {time.perf_counter() - t0:.0f} s under {work}")
    for name, root in (("v3.0", v30), ("v2.1", v21)):
        data, mp4s = sorted((root / "data").rglob("*.parquet")), sorted((root / "videos").rglob("*.mp4"))
        meta = sorted((root / "meta").rglob("episodes*"))
        meta = [p for p in meta if p.is_file()] + sorted((root / "meta" / "episodes").rglob("*.parquet"))
        print(f"{name}: {len(data)} data files ({_size(data):,} B), {len(mp4s)} MP4s ({_size(mp4s):,} B), "
              f"episodes metadata {_size(meta):,} B")
    results: dict[str, list] = {"v3.0": [], "v2.1": []}
    for r in range(args.rounds):
        for name, root in (("v3.0", v30), ("v2.1", v21)) if r % 2 == 0 else (("v2.1", v21), ("v3.0", v30)):
            elapsed, c = _import(root, work / f"out-{name}-{r}")
            results[name].append((elapsed, c))
            print(f"round {r} {name}: {elapsed:6.1f} s  data {c.get('data_bytes_read', 0):,} B in "
                  f"{c.get('data_read_requests', 0):,} requests; MP4 {c.get('mp4_bytes_read', 0):,} B in "
                  f"{c.get('mp4_read_requests', 0):,} requests ({c.get('mp4_files', 0):,} files); "
                  f"{c.get('episodes', 0):,} episodes, {c.get('frames', 0):,} frames, "
                  f"{c.get('parts_written', 0)} parts")
    best = {k: min(e for e, _ in v) for k, v in results.items()}
    print(f"best: v3.0 {best['v3.0']:.1f} s, v2.1 {best['v2.1']:.1f} s = {best['v2.1'] / best['v3.0']:.2f}x")


if __name__ == "__main__":
    main()
