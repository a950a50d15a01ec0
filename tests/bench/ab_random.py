"""Quick A/B of ImportedFrames' random-item path between checkouts (a script, not a test).

    python tests/bench/ab_random.py OUT --code . --code /path/to/other/checkout [--items 200 --rounds 3]
        [--windows] [--uint8] [--loader] [--profile]

Each round runs every checkout once, in turn (reversed every other round, so a busy moment of the machine
falls on both sides), each in its own interpreter (PYTHONPATH = the checkout, torch threads 1), timing
`ds[i]` over the same seeded random order after one untimed item; `--loader` times a
`DataLoader(num_workers=2, shuffle=True, batch_size=8)` instead. Prints items/s per round and the median.
`--profile` runs the first checkout once under cProfile and prints where a random item's time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
FPS = 30


def make(spec: dict):
    """The dataset a side reads: ImportedFrames, or one of bench_frames' baselines."""
    side = spec["side"]
    kw = {"camera_dtype": "uint8"} if spec["uint8"] else {}
    if side.startswith("lerobot:"):  # run by a LeRobot interpreter, none of the project's code imported
        import logging
        import warnings

        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        ds = LeRobotDataset("bench/local", root=spec["dataset"], video_backend=side.split(":", 1)[1])
        if not spec["windows"]:
            return ds
        cams = ds.meta.video_keys
        return LeRobotDataset("bench/local", root=spec["dataset"], video_backend=side.split(":", 1)[1],
                              delta_timestamps=_windows(cams))
    if side in ("pyav", "floor", "ceiling"):
        sys.path.insert(0, str(HERE.parents[2]))
        from tests.bench.bench_frames import DecodeFloor, LoaderCeiling, PyAVBaseline
        if side == "ceiling":
            ds = LoaderCeiling(spec["import"], **kw)
            return LoaderCeiling(spec["import"], _windows(ds.cameras), **kw) if spec["windows"] else ds
        if side == "floor":
            ds = DecodeFloor(spec["import"])
            return DecodeFloor(spec["import"], _windows(ds.cameras)) if spec["windows"] else ds
        ds = PyAVBaseline(spec["dataset"])
        return PyAVBaseline(spec["dataset"], _windows(ds.cameras)) if spec["windows"] else ds
    from transforms.reader import ImportedFrames
    ds = ImportedFrames(spec["import"], **kw)
    return ImportedFrames(spec["import"], delta_timestamps=_windows(ds.cameras), **kw) if spec["windows"] else ds


def _windows(cameras) -> dict:
    return {**{c: [-1 / FPS, 0.0] for c in cameras}, "action": [k / FPS for k in range(10)]}


def measure(spec: dict) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    ds = make(spec)
    order = np.random.default_rng(spec["seed"]).permutation(len(ds))[:spec["items"] + 1].tolist()
    if spec["loader"]:
        from torch.utils.data import DataLoader
        g = torch.Generator()
        g.manual_seed(spec["seed"])
        t0 = time.perf_counter()
        it = iter(DataLoader(ds, batch_size=8, num_workers=2, shuffle=True, generator=g))
        next(it)
        first = time.perf_counter() - t0
        n, t0 = 0, time.perf_counter()
        for batch in it:
            n += len(batch["index"])
            if n >= spec["items"]:
                break
        return {"items_per_s": n / (time.perf_counter() - t0), "first_batch_s": first}
    ds[order[0]]  # the decoders' modules imported, untimed
    if spec["warm"]:  # one item of every episode first (untimed): every file's index and episode read once
        for i in np.random.default_rng(spec["seed"] + 1).permutation(len(ds))[:spec["warm"]].tolist():
            ds[i]
    if spec["profile"]:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for i in order[1:]:
            ds[i]
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(35)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    t0 = time.perf_counter()
    for i in order[1:]:
        ds[i]
    return {"items_per_s": spec["items"] / (time.perf_counter() - t0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("import_root")
    ap.add_argument("--code", action="append", default=[], help="a checkout's root (repeat to compare)")
    ap.add_argument("--side", action="append", default=[],
                    help="also time pyav (per-item open+seek+decode), floor (DecodeFloor), ceiling (LoaderCeiling: "
                         "copies of one item, the loader's own cost) or lerobot:BACKEND")
    ap.add_argument("--lerobot-python", default=os.environ.get("LEROBOT_PYTHON", "lerobot-venv/bin/python"),
                    help="an interpreter with lerobot 0.4.x installed (for the lerobot:BACKEND sides)")
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--windows", action="store_true", help="2 frames per camera and 10 action steps")
    ap.add_argument("--uint8", action="store_true", help="camera_dtype='uint8'")
    ap.add_argument("--loader", action="store_true", help="DataLoader(num_workers=2, shuffle=True, batch_size=8)")
    ap.add_argument("--profile", action="store_true", help="cProfile the first checkout once")
    ap.add_argument("--warm", type=int, default=0, help="untimed random items first (another order)")
    args = ap.parse_args()
    spec = {"import": args.import_root, "items": args.items, "seed": args.seed, "windows": args.windows,
            "uint8": args.uint8, "loader": args.loader, "profile": False,
            "warm": args.warm}
    spec["dataset"] = json.loads((Path(args.import_root.removeprefix("file://")) / "manifest.json").read_text()) \
        .get("dataset", "").removeprefix("file://") if args.side else ""
    codes = [str(Path(c).resolve()) for c in args.code] + args.side

    def run(code: str, profile: bool = False) -> dict:
        env = dict(os.environ, PYTHONPATH=code, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
        python, side = sys.executable, "ours"
        if code in args.side:
            side, env["PYTHONPATH"] = code, str(HERE.parents[2])
            if code.startswith("lerobot:"):
                python, env["PYTHONPATH"] = args.lerobot_python, ""
        proc = subprocess.run([python, str(HERE), "--measure", json.dumps({**spec, "side": side,
                                                                           "profile": profile})],
                              capture_output=True, text=True, env=env, cwd="/tmp")
        if profile:
            print(proc.stderr)
        for line in proc.stdout.splitlines():
            if line.startswith("AB-RESULT "):
                return json.loads(line[len("AB-RESULT "):])
        raise SystemExit(f"{code} failed: {proc.stderr.strip()[-2000:]}")

    if args.profile:
        run(codes[0], profile=True)
        return
    got: dict = {c: [] for c in codes}
    for r in range(args.rounds):
        for code in (codes if r % 2 == 0 else codes[::-1]):
            res = run(code)
            got[code].append(res)
            print(f"round {r + 1} {code}: " + ", ".join(f"{k} {v:.2f}" for k, v in res.items())
                  + f" (load {os.getloadavg()[0]:.1f})", flush=True)
    base = statistics.median(x["items_per_s"] for x in got[codes[0]])
    for code in codes:
        med = statistics.median(x["items_per_s"] for x in got[code])
        print(f"median {code}: {med:.1f} items/s ({med / base:.2f}x the first)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        print("AB-RESULT " + json.dumps(measure(json.loads(sys.argv[2]))), flush=True)
    else:
        main()
