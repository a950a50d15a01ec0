"""Benchmark: importing straight from the Hugging Face Hub by range reads, against downloading the dataset.

    python tests/bench/bench_hub.py                      # 3 cameras, one ~100 MB MP4 each
    python tests/bench/bench_hub.py --mp4-mb 200 --cameras 2 --episodes 20

A dataset is generated as LeRobot lays it out: real H.264 MP4s (noise frames, moov at the end as
LeRobot's writer leaves it) made ~`--mp4-mb` MB each by a filler box before `mdat` (the bytes between
the head and the moov that an import never needs), one data file with a float32[64] state per frame.
It is served by the loopback Hub stand-in (tests/hub_standin.py), which counts the bytes it sends per
file, and then:
  * imported with `--dataset hf://datasets/bench/NAME` (pin, listings, metadata whole, data-file row
    groups, each MP4's head and moov): bytes and requests by kind, wall time;
  * fetched with `huggingface_hub.snapshot_download` (what a team does today before a local import):
    bytes and requests, wall time.
Printed: the dataset's size, both downloads, their ratio, and per MP4 the bytes read against its
head (64 KiB) + moov. Target: the import downloads about the Parquet files plus the moovs
(per MP4 <= 1.1 x (head + moov)), i.e. a small fraction of the dataset.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, when run as a script
from tests.dataset_factory import DatasetSpec, write_dataset  # noqa: E402
from tests.helpers import read_errors, run_import  # noqa: E402
from tests.hub_standin import HubStandIn  # noqa: E402
from tests.mp4_factory import Box, encode, parse_file, serialize_file  # noqa: E402

HEAD = 64 * 1024  # what the MediaIndex reader reads first of every MP4


def big_mp4(path: Path, *, frames: int, fps: int, size_mb: int, seed_dir: Path) -> Path:
    """A real H.264 MP4 of `frames` noise frames, padded to ~`size_mb` MB by a `free` box before mdat."""
    boxes = parse_file(encode(seed_dir / f"{path.stem}.small.mp4", frames=frames, fps=fps, noise=True).read_bytes())
    current = sum(len(b.serialize()) for b in boxes)
    boxes.insert(1, Box(b"free", payload=bytes(max(0, size_mb * 1_000_000 - current - 8))))
    path.write_bytes(serialize_file(boxes))
    return path


def make(root: Path, *, cameras: int, episodes: int, frames: int, fps: int, mp4_mb: int) -> Path:
    work = root.parent / "mp4s"
    work.mkdir(parents=True, exist_ok=True)
    keys = [f"observation.images.cam{i}" for i in range(cameras)]
    features = {"observation.state": {"dtype": "float32", "shape": [64], "names": None}}
    videos = {}
    for key in keys:
        features[key] = {"dtype": "video", "shape": [48, 64, 3], "names": ["height", "width", "channels"],
                         "info": {"video.codec": "h264", "video.fps": fps, "video.pix_fmt": "yuv420p"}}
        videos[key] = big_mp4(work / f"{key}.mp4", frames=episodes * frames, fps=fps, size_mb=mp4_mb, seed_dir=work)
    spec = DatasetSpec(lengths=(frames,) * episodes, features=features, fps=fps, video_files=videos,
                       video_codec="h264")
    return write_dataset(root, spec)


def summary(records) -> str:
    kinds = Counter(r.kind for r in records)
    return ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cameras", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--frames", type=int, default=60, help="frames per episode")
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--mp4-mb", type=int, default=100, help="size of each MP4, MB")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()

    from huggingface_hub import snapshot_download

    tmp = Path(tempfile.mkdtemp(prefix="bench-hub-"))
    try:
        t = time.perf_counter()
        root = make(tmp / "bench_ds", cameras=args.cameras, episodes=args.episodes, frames=args.frames,
                    fps=args.fps, mp4_mb=args.mp4_mb)
        files = {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}
        total = sum(files.values())
        parquet = sum(s for f, s in files.items() if f.endswith(".parquet"))
        mp4s = {f: s for f, s in files.items() if f.endswith(".mp4")}
        moovs = {f: len(next(b for b in parse_file((root / f).read_bytes()) if b.type == b"moov").serialize())
                 for f in mp4s}
        print(f"dataset: {len(files)} files, {total / 1e6:,.1f} MB ({len(mp4s)} MP4s of {args.mp4_mb} MB, "
              f"Parquet {parquet / 1e6:,.2f} MB, moovs {sum(moovs.values()) / 1e3:,.1f} KB); made in "
              f"{time.perf_counter() - t:.1f} s")

        with HubStandIn() as hub, hub.configure():
            hub.add_dataset("bench/bench_ds", root)
            hub.reset_counts()
            t = time.perf_counter()
            status = run_import("hf://datasets/bench/bench_ds", tmp / "out")
            import_s = time.perf_counter() - t
            errors = read_errors(tmp / "out")
            records = hub.requests
            sent = hub.bytes_by_file()
            ours = sum(sent.values())
            print(f"import from hf://: exit {status}, {len(errors)} errors, {import_s:.1f} s, "
                  f"{ours / 1e6:,.3f} MB downloaded in {len(records)} requests ({summary(records)})")
            for f in sorted(mp4s):
                budget = min(HEAD, mp4s[f]) + moovs[f]
                print(f"  {f}: read {sent.get(f, 0):,} B of {mp4s[f]:,} B; head + moov = {budget:,} B "
                      f"({sent.get(f, 0) / budget:.3f} x)")
            data = sum(v for f, v in sent.items() if f.endswith(".parquet"))
            print(f"  Parquet read {data / 1e6:,.3f} MB (files {parquet / 1e6:,.3f} MB; metadata is read by "
                  "several steps)")

            hub.reset_counts()
            t = time.perf_counter()
            snapshot_download("bench/bench_ds", repo_type="dataset", local_dir=tmp / "snapshot")
            snap_s = time.perf_counter() - t
            records = hub.requests
            snap = sum(hub.bytes_by_file().values())
            print(f"snapshot_download: {snap_s:.1f} s, {snap / 1e6:,.1f} MB downloaded in {len(records)} requests "
                  f"({summary(records)})")
        print(f"import downloads {ours / total:.4%} of the dataset's bytes and {ours / snap:.4%} of what "
              f"snapshot_download fetches ({snap / max(ours, 1):,.0f} x less)")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
