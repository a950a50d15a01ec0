"""Benchmark: output size of the default layout against --inline-index, with large MP4s.

    python tests/bench/bench_output_size.py [--episodes 400] [--frames 250] [--cameras 2] [--samples-per-mp4 100000]

Generates (tests/bench/synth_dataset.py) a dataset whose MP4s hold >= 100,000 samples each (by default
400 episodes x 250 frames = 100,000 frames per camera, each camera in ONE MP4, 50 episodes per
episodes file), imports it twice (default layout, then --inline-index) and prints the bytes of each output:
episode parts, media_index/ files and the rest. The default layout stores each MP4's MediaIndex once;
--inline-index repeats it in every episode that points into the file.
Target: default output <= (data file bytes + the sum of the indexes) + 10%, the indexes being the
media_index/ files the default layout writes (the moov bytes are printed too, for scale).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.bench_scale import dataset_facts, import_cmd, loadavg, measure  # noqa: E402
from tests.bench.synth_dataset import make_dataset  # noqa: E402


def tree_bytes(root: Path, sub: str = "") -> int:
    base = root / sub if sub else root
    return sum(p.stat().st_size for p in base.rglob("*") if p.is_file()) if base.exists() else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=400)
    ap.add_argument("--frames", type=int, default=250)
    ap.add_argument("--cameras", type=int, default=2)
    ap.add_argument("--codec", default="h264", choices=("h264", "hevc", "av1"))
    ap.add_argument("--samples-per-mp4", type=int, default=100_000)
    ap.add_argument("--episodes-per-meta-file", type=int, default=50)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-outsize-"))
    work.mkdir(parents=True, exist_ok=True)
    load_start = loadavg()
    root = make_dataset(work / "ds", episodes=args.episodes, frames=args.frames, cameras=args.cameras,
                        codec=args.codec, samples_per_mp4=args.samples_per_mp4,
                        episodes_per_meta_file=args.episodes_per_meta_file, overwrite=True, verbose=True)
    facts = dataset_facts(root)
    samples = []
    for key_dir in sorted((root / "videos").iterdir()):
        for mp4 in sorted(key_dir.rglob("*.mp4")):
            samples.append(sample_count(mp4))
    outs = {}
    for tag, extra in (("default", ()), ("inline", ("--inline-index",))):
        out = work / f"out-{tag}"
        shutil.rmtree(out, ignore_errors=True)
        m = measure(import_cmd(root, out, 1, *extra), cwd=REPO)
        if m.rc != 0:
            raise SystemExit(f"import ({tag}) failed:\n{m.stdout[-3000:]}\n{m.stderr[-3000:]}")
        outs[tag] = {"wall": m.wall, "peak_mb": m.root_peak_mb, "total": tree_bytes(out),
                     "episodes": tree_bytes(out, "episodes"), "media_index": tree_bytes(out, "media_index"),
                     "manifest_bytes": json.loads((out / "manifest.json").read_text())["totals"].get("bytes")}
        outs[tag]["other"] = outs[tag]["total"] - outs[tag]["episodes"] - outs[tag]["media_index"]
    load_end = loadavg()

    d, i = outs["default"], outs["inline"]
    index_bytes = d["media_index"]
    bound = 1.1 * (facts["data_bytes"] + index_bytes)
    print(f"\n== dataset: {facts['episodes']} episodes x {args.frames} frames = {facts['frames']:,} frames, "
          f"{args.cameras} {args.codec} camera(s); MP4 samples per file: {samples}; "
          f"{facts['episodes_files']} episodes files -> {work}")
    print(f"  data files {facts['data_bytes']:,} B; MP4s {facts['mp4_bytes']:,} B; "
          f"moov boxes {facts['moov_bytes']:,} B")
    print(f"load average: before {load_start}, after {load_end}; {os.cpu_count()} CPUs")
    print("== output bytes            total        episode parts   media_index/     other     (import wall, peak RSS)")
    for tag, o in outs.items():
        print(f"  {tag:8s} {o['total']:>16,} {o['episodes']:>16,} {o['media_index']:>14,} {o['other']:>9,}"
              f"     ({o['wall']:.1f} s, {o['peak_mb']:.0f} MB)")
    print(f"  inline / default = {i['total'] / d['total']:.1f}x; inline episode parts / default episode parts = "
          f"{i['episodes'] / d['episodes']:.1f}x")
    print(f"  default / (data files + indexes) = {d['total']:,} / {facts['data_bytes'] + index_bytes:,} = "
          f"{d['total'] / (facts['data_bytes'] + index_bytes):.3f}x   (indexes = media_index/ {index_bytes:,} B; "
          f"vs moov bytes instead: {d['total'] / (facts['data_bytes'] + facts['moov_bytes']):.3f}x)")
    ok = d["total"] <= bound
    print(f"== target: default <= data bytes + indexes + 10% ({bound:,.0f} B): {'PASS' if ok else 'MISS'}")
    if min(samples, default=0) < 100_000:
        print(f"note: the smallest MP4 holds {min(samples)} samples (< 100,000): raise --episodes/--frames")
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


def sample_count(mp4: Path) -> int:
    import av

    with av.open(str(mp4)) as c:
        return c.streams.video[0].frames


if __name__ == "__main__":
    main()
