"""Training reads with a depth camera: ImportedFrames items/s, float32 and uint8 (a script, not a test).

    .venv/bin/python tests/bench/bench_depth.py [--rounds 5] [--passes 4] [--workers 2]

The data: the datasets LeRobot 0.6.1 wrote in tests/data/lerobot061 (one RGB camera and one depth camera,
LeRobot's default encoders: RGB AV1 g=2 crf 30, depth HEVC Main 12 gray12le lossless; 4 episodes, 99 frames,
128x96, 15 fps), as video (`depth_video`) and as images in the data files (`depth_image`: RGB PNG, depth 16-bit
TIFF). Each is imported once (FnApiRunner, default layout) into a temporary folder.

What is timed, per dataset and mode (float32 = LeRobot's default items, uint8 = `camera_dtype="uint8"`, LeRobot's
`return_uint8=True`; depth is float32 millimetres in both):
* one process: `ds[i]` over `--passes` random permutations of the items, a fresh dataset per round (cold
  decode cache), depth decode and de-quantization included;
* loader: `DataLoader(ds, batch_size=8, shuffle=True, num_workers=--workers)` over `--passes` epochs, workers
  started inside the timing.
Rounds alternate the modes (float32, uint8, float32, ...) so a busy moment of the machine does not fall on one
side only; the median round is printed, with `uptime` before and after. LeRobot 0.6.1's own figures need its
Python >= 3.12 / CUDA torch install, which this project does not carry: the script prints ours only.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.helpers import lerobot061_dataset, run_import  # noqa: E402
from transforms.reader.frames import ImportedFrames  # noqa: E402

MODES = {"float32": {}, "uint8": {"camera_dtype": "uint8"}}


def one_process(out: str, kwargs: dict, passes: int, seed: int) -> float:
    ds = ImportedFrames(out, decode_threads=1, **kwargs)
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(ds)) for _ in range(passes)])
    t0 = time.perf_counter()
    for i in order.tolist():
        ds[i]
    return len(order) / (time.perf_counter() - t0)


def loader(out: str, kwargs: dict, passes: int, workers: int) -> float:
    import torch
    from torch.utils.data import DataLoader

    ds = ImportedFrames(out, **kwargs)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    n = 0
    dl = DataLoader(ds, batch_size=8, shuffle=True, num_workers=workers, persistent_workers=workers > 0)
    for _ in range(passes):
        for batch in dl:
            n += len(batch["index"])
    return n / (time.perf_counter() - t0)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "(uptime not available)"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--passes", type=int, default=4, help="random passes over the items per round")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (0: no loader row)")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    print("load before:", uptime())
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        for name in ("depth_video", "depth_image"):
            out = Path(tmp) / name
            assert run_import(lerobot061_dataset(name), out) == 0
            outs[name] = str(out)
        rows = []
        for name, out in outs.items():
            ds = ImportedFrames(out)
            shapes = {k: tuple(v.shape) for k, v in ds[0].items() if hasattr(v, "shape") and len(v.shape) >= 3}
            for kind in ("one process", "loader") if args.workers else ("one process",):
                got: dict[str, list] = {m: [] for m in MODES}
                for r in range(args.rounds):
                    for mode in (MODES if r % 2 == 0 else reversed(list(MODES))):
                        kw = MODES[mode]
                        rate = one_process(out, kw, args.passes, r) if kind == "one process" else \
                            loader(out, kw, args.passes, args.workers)
                        got[mode].append(rate)
                rows.append((name, kind, {m: statistics.median(v) for m, v in got.items()}, shapes))
        print(f"\n{len(ds)} items per pass, {args.passes} passes per round, {args.rounds} rounds (median), "
              f"torch threads 1, loader workers {args.workers}")
        print(f"{'dataset':<12} {'access':<12} {'float32 items/s':>16} {'uint8 items/s':>14}  camera shapes")
        for name, kind, rates, shapes in rows:
            print(f"{name:<12} {kind:<12} {rates['float32']:>16,.0f} {rates['uint8']:>14,.0f}  {shapes}")
    print("load after:", uptime())


if __name__ == "__main__":
    main()
