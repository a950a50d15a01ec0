"""Quick A/B of ImportedFrames' random-item path between checkouts (a script, not a test).

    python tests/bench/ab_random.py OUT --code . --code /path/to/other/checkout [--items 200 --rounds 3]
        [--windows] [--uint8] [--loader] [--profile]
    python tests/bench/ab_random.py OUT --code . --side ours:uint8 --side pyav --side floor \
        --side lerobot:torchcodec --side lerobot:torchcodec:uint8 --side lerobot:pyav --side lerobot:pyav:uint8 \
        --lerobot-python /path/to/lerobot-venv/bin/python [--loader] [--windows]

Each round runs every checkout once, in turn (reversed every other round, so a busy moment of the machine
falls on both sides), each in its own interpreter (PYTHONPATH = the checkout, torch threads 1), timing
`ds[i]` over the same seeded random order after one untimed item; `--loader` times a
`DataLoader(num_workers=2, shuffle=True, batch_size=8)` instead (its sampler draws more than one epoch when
`--items` exceeds the dataset). Prints items/s (wall) and items per CPU-second (the process's, and its loader
workers') per round, and the medians. Sides beside the checkouts: `ours:uint8` (this checkout with
`camera_dtype="uint8"`; `ours:t2`, `ours:uint8:t2`: `decode_threads=2`; `ours:uint8:g0`: `cache_gops=0`),
`pyav` (a per-item PyAV open + seek + decode, float32), `floor` (each item's decode work alone; in the loader,
the same work in its workers), `ceiling` (the loader's own cost of moving items) and `lerobot:BACKEND[:uint8]`
(LeRobotDataset with that `video_backend`, `:uint8` = `return_uint8=True`, LeRobot >= 0.6's training mode), run
by `--lerobot-python`.
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
    kw = {}
    if side.startswith("ours"):  # ours[:uint8][:tN][:gN]: decode_threads=N, cache_gops=N
        words = side.split(":")
        for word in words[1:]:
            if word[:1] in ("t", "g") and word[1:].isdigit():
                kw["decode_threads" if word[0] == "t" else "cache_gops"] = int(word[1:])
        side = ":".join(w for w in words if not (w[:1] in ("t", "g") and w[1:].isdigit()))
    uint8 = spec["uint8"] or side.endswith(":uint8")
    side = side.removesuffix(":uint8")
    if uint8:
        kw["camera_dtype"] = "uint8"
    if side.startswith("lerobot:"):  # run by a LeRobot interpreter, none of the project's code imported
        import logging
        import warnings

        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        lkw = {"return_uint8": True} if uint8 else {}  # LeRobot >= 0.6 only
        ds = LeRobotDataset("bench/local", root=spec["dataset"], video_backend=side.split(":", 1)[1], **lkw)
        if not spec["windows"]:
            return ds
        cams = ds.meta.video_keys
        return LeRobotDataset("bench/local", root=spec["dataset"], video_backend=side.split(":", 1)[1],
                              delta_timestamps=_windows(cams, spec["fps"]), **lkw)
    if side in ("pyav", "floor", "ceiling"):
        sys.path.insert(0, str(HERE.parents[2]))
        from tests.bench.bench_frames import DecodeFloor, LoaderCeiling, PyAVBaseline
        if side == "ceiling":
            ds = LoaderCeiling(spec["import"], **kw)
            return LoaderCeiling(spec["import"], _windows(ds.cameras, spec["fps"]), **kw) if spec["windows"] else ds
        if side == "floor":
            ds = DecodeFloor(spec["import"])
            return DecodeFloor(spec["import"], _windows(ds.cameras, spec["fps"])) if spec["windows"] else ds
        ds = PyAVBaseline(spec["dataset"])
        return PyAVBaseline(spec["dataset"], _windows(ds.cameras, spec["fps"])) if spec["windows"] else ds
    from transforms.reader import ImportedFrames
    ds = ImportedFrames(spec["import"], **kw)
    if not spec["windows"]:
        return ds
    return ImportedFrames(spec["import"], delta_timestamps=_windows(ds.cameras, spec["fps"]), **kw)


def _windows(cameras, fps: int = FPS) -> dict:
    return {**{c: [-1 / fps, 0.0] for c in cameras}, "action": [k / fps for k in range(10)]}


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) `pid` has used."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def measure(spec: dict) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    ds = make(spec)
    rng = np.random.default_rng(spec["seed"])
    # more than one permutation when the dataset holds fewer items than a run times (small recorded datasets)
    order = np.concatenate([rng.permutation(len(ds)) for _ in range(spec["items"] // len(ds) + 1)])
    order = order[:spec["items"] + 1].tolist()
    if spec["loader"]:
        from torch.utils.data import DataLoader, RandomSampler
        g = torch.Generator()
        g.manual_seed(spec["seed"])
        t0 = time.perf_counter()
        # RandomSampler is what shuffle=True makes; num_samples lets a small dataset run past one epoch
        sampler = RandomSampler(ds, num_samples=max(len(ds), spec["items"] + 8), generator=g)
        it = iter(DataLoader(ds, batch_size=8, num_workers=2, sampler=sampler))
        next(it)
        first = time.perf_counter() - t0
        workers = [w.pid for w in getattr(it, "_workers", [])]
        n, t0 = 0, time.perf_counter()
        c0 = time.process_time() + sum(_cpu(w) for w in workers)
        for batch in it:
            n += len(batch["index"])
            if n >= spec["items"]:
                break
        cpu = time.process_time() + sum(_cpu(w) for w in workers) - c0
        return {"items_per_s": n / (time.perf_counter() - t0), "items_per_cpu_s": n / cpu if cpu > 0 else 0.0,
                "first_batch_s": first}
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
    t0, c0 = time.perf_counter(), time.process_time()
    for i in order[1:]:
        ds[i]
    return {"items_per_s": spec["items"] / (time.perf_counter() - t0),
            "items_per_cpu_s": spec["items"] / (time.process_time() - c0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("import_root")
    ap.add_argument("--code", action="append", default=[], help="a checkout's root (repeat to compare)")
    ap.add_argument("--side", action="append", default=[],
                    help="also time ours:uint8 (this checkout, camera_dtype='uint8'; ours[:uint8][:tN][:gN]: "
                         "decode_threads=N, cache_gops=N), pyav (per-item "
                         "open+seek+decode), floor (DecodeFloor), ceiling (LoaderCeiling: copies of one item, the "
                         "loader's own cost) or lerobot:BACKEND[:uint8] (return_uint8=True)")
    ap.add_argument("--lerobot-python", default=os.environ.get("LEROBOT_PYTHON", "lerobot-venv/bin/python"),
                    help="an interpreter with lerobot installed (0.4.x, or >= 0.6 for the :uint8 sides), for the "
                         "lerobot:BACKEND sides")
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
        .get("dataset", "").removeprefix("file://")
    info = Path(spec["dataset"]) / "meta" / "info.json"
    spec["fps"] = json.loads(info.read_text()).get("fps", FPS) if info.is_file() else FPS  # the windows' frame
    print(f"# {args.import_root}: {'loader' if args.loader else 'one process'}"
          f"{', windows' if args.windows else ''}{', uint8' if args.uint8 else ''}, {args.items} items, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    codes = [str(Path(c).resolve()) for c in args.code] + args.side

    def run(code: str, profile: bool = False) -> dict:
        env = dict(os.environ, PYTHONPATH=code, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
        python, side = sys.executable, "ours"
        if code.startswith("ours:"):
            side, env["PYTHONPATH"] = code, str(HERE.parents[2])
        elif code in args.side:
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
        # one side failing (a crash of a worker, say) is printed and that run left out, the other sides still run
        print(f"{code} failed: {proc.stderr.strip()[-1500:]}", flush=True)
        return None

    if args.profile:
        run(codes[0], profile=True)
        return
    got: dict = {c: [] for c in codes}
    for r in range(args.rounds):
        for code in (codes if r % 2 == 0 else codes[::-1]):
            res = run(code)
            if res is None:
                continue
            got[code].append(res)
            print(f"round {r + 1} {code}: " + ", ".join(f"{k} {v:.2f}" for k, v in res.items())
                  + f" (load {os.getloadavg()[0]:.1f})", flush=True)
    base = statistics.median(x["items_per_s"] for x in got[codes[0]]) if got[codes[0]] else float("nan")
    for code in codes:
        if not got[code]:
            print(f"median {code}: no run succeeded")
            continue
        med = statistics.median(x["items_per_s"] for x in got[code])
        cpu = statistics.median(x.get("items_per_cpu_s", 0.0) for x in got[code])
        print(f"median {code}: {med:.1f} items/s ({med / base:.2f}x the first), {cpu:.1f} items per CPU-s "
              f"(load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        print("AB-RESULT " + json.dumps(measure(json.loads(sys.argv[2]))), flush=True)
    else:
        main()
