"""Training-read figures: ImportedFrames vs LeRobotDataset, items/s per access order (a script, not a test).

    .venv/bin/python tests/bench/bench_frames.py [--lerobot-python /tmp/lerobot-venv/bin/python]
        [--episodes 20 --frames 200 --resolution 128x96 --gop 20 --codec av1] [--items 600 --seconds 15]

What it does:
* writes two local LeRobot v3 datasets with real MP4s (tests/bench/synth_dataset.py): the same episodes
  with 2 cameras and with none, and imports each (FnApiRunner, default layout);
* draws three item orders over the dataset, the same for every reader: (a) sequential (0, 1, 2, ...),
  (b) fully random (a permutation), (c) GOP-block-shuffled (`GopBlockSampler`, whole GOPs in a random
  order, items in order inside each);
* times `ds[i]` for the first `--items` items of each order (at most `--seconds` per run), single
  process, a fresh dataset object per run (cold decode cache), in `--repeat` rounds that run every
  reader in turn (so a busy moment of the machine does not fall on one side only), best round shown, for:
  - ours, local: `ImportedFrames(local import)`;
  - ours, gs://: the dataset uploaded to the GCS emulator, imported there, `ImportedFrames("gs://...")`;
  - LeRobot: `LeRobotDataset(root=local dataset)` with each `--lerobot-backends` decoder, run by
    `--lerobot-python` (a separate interpreter with lerobot installed: lerobot pins an older torch
    than the project's); the columns are skipped, saying why, when it is not given or cannot run;
* bytes: what ours fetched from the video files per item (`ds.bytes_read`), next to what the items
  need from the MediaIndex: the bytes of their whole GOPs (per item: one GOP per camera), of their
  decode closures (GOP start up to the frame), and of the distinct GOPs the order touches (the least
  any reader must fetch, each GOP once). LeRobot's column counts `rchar` (all bytes its process read
  through read(2), video and everything else) per item, for scale.

LeRobot's side is this same file run with `--lerobot-side` (it imports only numpy and lerobot there).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
MODES = ("sequential", "random", "gop-block")


# ------------------------------------------------------------------------------------------------
# LeRobot's side (runs in the lerobot interpreter)
# ------------------------------------------------------------------------------------------------

def _rchar() -> Optional[int]:
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def lerobot_side(root: str, orders_path: str, backend: str, items: int, seconds: float, threads: int,
                 repeat: int) -> None:
    """Time LeRobotDataset.__getitem__ over each order, best of `repeat` runs; print one JSON object."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import logging
    import warnings

    import torch

    torch.set_num_threads(threads)

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import lerobot
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    orders = np.load(orders_path)
    out = {"version": getattr(lerobot, "__version__", "?"), "backend": backend, "modes": {}}
    for rep in range(repeat):
        for mode in MODES:
            t0 = time.perf_counter()
            ds = LeRobotDataset("bench/local", root=root, video_backend=backend)
            open_s = time.perf_counter() - t0
            order = orders[mode][:items].tolist()
            r0, n = _rchar(), 0
            t0 = time.perf_counter()
            for i in order:
                ds[i]
                n += 1
                if time.perf_counter() - t0 > seconds:
                    break
            dt = time.perf_counter() - t0
            r1 = _rchar()
            got = {"items": n, "seconds": dt, "items_per_s": n / dt, "open_s": open_s,
                   "rchar_per_item": (r1 - r0) / n if r0 is not None and r1 is not None else None}
            best = out["modes"].get(mode)
            if best is None or got["items_per_s"] > best["items_per_s"]:
                out["modes"][mode] = got
            del ds
    print("LEROBOT-RESULT " + json.dumps(out))


def run_lerobot(python: Optional[str], root: Path, orders_path: Path, backend: str, items: int, seconds: float,
                threads: int, repeat: int) -> tuple[Optional[dict], str]:
    """LeRobot's figures, or None and why not."""
    if not python:
        return None, "no --lerobot-python given"
    if not Path(python).exists():
        return None, f"--lerobot-python {python} does not exist"
    cmd = [python, str(HERE), "--lerobot-side", str(root), str(orders_path), backend, str(items), str(seconds),
           str(threads), str(repeat)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/tmp", timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("LEROBOT-RESULT "):
            return json.loads(line[len("LEROBOT-RESULT "):]), ""
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return None, f"LeRobot ({backend}) failed: " + " | ".join(tail)


# ------------------------------------------------------------------------------------------------
# Our side
# ------------------------------------------------------------------------------------------------

def build(work: Path, cameras: int, args) -> tuple[Path, Path]:
    """A synthetic dataset and its local import."""
    sys.path.insert(0, str(REPO))
    from tests.bench.synth_dataset import make_dataset
    from tests.helpers import run_import

    width, height = (int(x) for x in args.resolution.lower().split("x"))
    root = make_dataset(work / f"ds_cam{cameras}", episodes=args.episodes, frames=args.frames, cameras=cameras,
                        codec=args.codec, width=width, height=height, gop=args.gop, clip_frames=args.clip_frames,
                        overwrite=True)
    out = work / f"out_cam{cameras}"
    if run_import(root, out) != 0:
        raise SystemExit(f"the import of {root} failed: see {out}/errors.jsonl")
    return root, out


def gop_bytes(out: str, n_items: int) -> dict[str, np.ndarray]:
    """What each item needs from the MediaIndex: per item and camera, its GOP's bytes and a key naming
    that GOP (camera, file, GOP number); per item, its decode closures' bytes summed over cameras."""
    from transforms.reader import ImportReader

    reader = ImportReader(out)
    keys, sizes, closure, file_ids = [], [], [], {}
    for e in sorted(reader.episode_indices().tolist()):
        ep = reader.episode(e)
        k_ep, s_ep, c_ep = [], [], np.zeros(ep.length, np.int64)
        for c, cam in enumerate(ep.cameras):
            v = ep.video(cam)
            tr = v.track
            samples = tr.order[v.locate(np.asarray(ep["timestamp"], np.float64))]
            g = np.searchsorted(tr.gop_start, samples, side="right") - 1
            csum = np.concatenate([[0], np.cumsum(tr.size)])
            ends = np.append(tr.gop_start[1:], tr.num_samples)
            s_ep.append(csum[ends[g]] - csum[tr.gop_start[g]])
            c_ep += csum[samples + 1] - csum[tr.gop_start[g]]
            k_ep.append((c * 1_000_000 + file_ids.setdefault(v.uri, len(file_ids))) * 10_000_000 + g)
        keys.append(np.stack(k_ep, 1))
        sizes.append(np.stack(s_ep, 1))
        closure.append(c_ep)
    key, size = np.concatenate(keys), np.concatenate(sizes)
    if len(key) != n_items:
        raise SystemExit(f"the import holds {len(key)} frames, ImportedFrames {n_items} items")
    return {"key": key, "size": size, "whole": size.sum(1), "closure": np.concatenate(closure)}


def distinct_gop_bytes(need: dict[str, np.ndarray], items: np.ndarray) -> int:
    """Bytes of the distinct GOPs (per camera and file) the `items` decode from."""
    key, size = need["key"][items].reshape(-1), need["size"][items].reshape(-1)
    _, first = np.unique(key, return_index=True)
    return int(size[first].sum())


def time_ours(uri: str, order: np.ndarray, seconds: float, repeat: int) -> dict:
    """The best of `repeat` runs, each with a fresh dataset (cold cache)."""
    from transforms.reader import ImportedFrames

    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        ds = ImportedFrames(uri)
        open_s = time.perf_counter() - t0
        b0, n = ds.bytes_read, 0
        t0 = time.perf_counter()
        for i in order.tolist():
            ds[i]
            n += 1
            if time.perf_counter() - t0 > seconds:
                break
        dt = time.perf_counter() - t0
        got = {"items": n, "seconds": dt, "items_per_s": n / dt, "open_s": open_s,
               "bytes_per_item": (ds.bytes_read - b0) / n, "done": order[:n],
               "decoded_per_item": ds.gop_cache.samples_decoded / n}
        if best is None or got["items_per_s"] > best["items_per_s"]:
            best = got
    return best


def _best(a: Optional[dict], b: dict) -> dict:
    return b if a is None or b["items_per_s"] > a["items_per_s"] else a


def orders_for(uri: str, seed: int) -> dict[str, np.ndarray]:
    """The three item orders over the whole dataset."""
    from transforms.reader import GopBlockSampler, ImportedFrames

    ds = ImportedFrames(uri)
    n = len(ds)
    rng = np.random.default_rng(seed)
    return {"sequential": np.arange(n, dtype=np.int64), "random": rng.permutation(n).astype(np.int64),
            "gop-block": GopBlockSampler(ds, seed=seed).order().astype(np.int64)}


def upload_and_import(root: Path, name: str) -> str:
    """The dataset uploaded to the (running) GCS emulator and imported there; the import's gs:// URI."""
    import fsspec

    from tests.helpers import run_import

    fs = fsspec.filesystem("gs")
    for bucket in ("bench-src", "bench-out"):
        if not fs.exists(bucket):
            fs.mkdir(bucket)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        fs.put_file(str(path), f"bench-src/{name}/{path.relative_to(root).as_posix()}")
    out = f"gs://bench-out/{name}"
    if run_import(f"gs://bench-src/{name}", out) != 0:
        raise SystemExit(f"the import of gs://bench-src/{name} failed")
    return out


# ------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------

def fmt(x: Optional[float], spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lerobot-python", default=None, help="an interpreter with lerobot 0.4.x installed")
    ap.add_argument("--lerobot-backends", default="torchcodec,pyav")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--frames", type=int, default=200, help="frames per episode")
    ap.add_argument("--resolution", default="128x96", help="WIDTHxHEIGHT")
    ap.add_argument("--gop", type=int, default=20)
    ap.add_argument("--clip-frames", type=int, default=40, help="frames of the synthetic base clip (a GOP multiple)")
    ap.add_argument("--codec", default="av1", choices=("h264", "hevc", "av1"))
    ap.add_argument("--items", type=int, default=600, help="items timed per order")
    ap.add_argument("--seconds", type=float, default=15.0, help="time cap per run")
    ap.add_argument("--cameras", default="2,0", help="camera counts to run")
    ap.add_argument("--no-gcs", action="store_true", help="skip the gs:// emulator column")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds (each runs every reader once, in turn); the best round is shown")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch intra-op threads on both sides (1, as in a DataLoader worker)")
    ap.add_argument("--workdir", default=None, help="keep the datasets here (default: a temporary folder)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    os.environ.setdefault("NO_GCE_CHECK", "true")
    backends = [b for b in args.lerobot_backends.split(",") if b]
    import torch

    torch.set_num_threads(args.torch_threads)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        rows, notes = [], []
        gcs = None
        if not args.no_gcs:
            from tests.storage_emulators import gcs_emulator, missing
            reason = missing("gcp_storage_emulator.server", "gcsfs")
            if reason:
                notes.append(f"gs:// column skipped: {reason}")
            else:
                gcs = gcs_emulator()
                gcs.__enter__()
        try:
            for cams in (int(c) for c in args.cameras.split(",")):
                t0 = time.perf_counter()
                root, out = build(work, cams, args)
                orders = orders_for(str(out), args.seed)
                n_items = len(orders["sequential"])
                orders_path = work / f"orders_cam{cams}.npz"
                np.savez(orders_path, **{m: o[:args.items] for m, o in orders.items()})
                need = gop_bytes(str(out), n_items) if cams else None
                gs_uri = upload_and_import(root, f"cam{cams}") if gcs is not None else None
                print(f"# {cams} camera(s): {args.episodes} episodes x {args.frames} frames = {n_items} items, "
                      f"{args.resolution} {args.codec} GOP {args.gop}; built, imported"
                      f"{' and uploaded' if gs_uri else ''} in {time.perf_counter() - t0:.1f} s", flush=True)
                # Rounds alternate the readers, so a busy moment of the machine does not land on one side
                # only; each figure is the best of its rounds.
                lerobot: dict = {b: None for b in backends}
                local: dict = {}
                remote: dict = {}
                for _ in range(args.repeat):
                    for b in backends:
                        res, why = run_lerobot(args.lerobot_python, root, orders_path, b, args.items, args.seconds,
                                               args.torch_threads, 1)
                        if res is None:
                            if why not in " ".join(notes):
                                notes.append(f"LeRobot {b} column skipped ({cams} cameras): {why}")
                            continue
                        if not any(n.startswith("LeRobot version") for n in notes):
                            notes.insert(0, f"LeRobot version {res['version']}")
                        lerobot[b] = lerobot[b] or res
                        for mode, got in res["modes"].items():
                            if got["items_per_s"] > lerobot[b]["modes"][mode]["items_per_s"]:
                                lerobot[b]["modes"][mode] = got
                    for mode in MODES:
                        order = orders[mode][:args.items]
                        local[mode] = _best(local.get(mode), time_ours(str(out), order, args.seconds, 1))
                        if gs_uri:
                            remote[mode] = _best(remote.get(mode), time_ours(gs_uri, order, args.seconds, 1))
                for mode in MODES:
                    row = {"cams": cams, "mode": mode, "local": local[mode], "gs": remote.get(mode),
                           "lerobot": {b: (r["modes"][mode] if r else None) for b, r in lerobot.items()}}
                    if need is not None:
                        done = local[mode]["done"]
                        row["whole"] = float(need["whole"][done].mean())
                        row["closure"] = float(need["closure"][done].mean())
                        row["distinct"] = distinct_gop_bytes(need, done) / len(done)
                    rows.append(row)
                    print(f"  {mode}: ours {local[mode]['items_per_s']:.1f} items/s"
                          + "".join(f", LeRobot {b} {fmt(r and r['modes'][mode]['items_per_s'], '.1f')}"
                                    for b, r in lerobot.items()), flush=True)
        finally:
            if gcs is not None:
                gcs.__exit__(None, None, None)

    head = (f"{'cams':>4} {'mode':<10} {'ours local':>10} {'ours gs://':>10} "
            + "".join(f"{'LR ' + b:>14}" for b in backends)
            + f" {'ours/best LR':>12} {'dec/item':>8} | {'B/item local':>12} {'B/item gs://':>12} {'GOP B/item':>10} "
              f"{'closure B':>10} {'distinct B':>11}" + "".join(f" {'LR rchar ' + b:>19}" for b in backends))
    print(f"\nitems/s, best of {args.repeat} alternating rounds (single process, ds[i] per item, torch threads "
          f"{args.torch_threads}; LR = LeRobotDataset; dec/item = samples ours fed its decoders per item) | "
          "bytes fetched from video files per item vs the MediaIndex's GOP bytes the items need")
    print(head)
    print("-" * len(head))
    for r in rows:
        lr = [r["lerobot"][b]["items_per_s"] if r["lerobot"].get(b) else None for b in backends]
        best = max((x for x in lr if x), default=None)
        ratio = r["local"]["items_per_s"] / best if best else None
        print(f"{r['cams']:>4} {r['mode']:<10} {r['local']['items_per_s']:>10.1f} "
              f"{fmt(r['gs'] and r['gs']['items_per_s'], '.1f'):>10} "
              + "".join(f"{fmt(x, '.1f'):>14}" for x in lr)
              + f" {fmt(ratio, '.2f'):>12} {r['local']['decoded_per_item']:>8.1f} | "
                f"{fmt(r['local']['bytes_per_item']):>12} "
                f"{fmt(r['gs'] and r['gs']['bytes_per_item']):>12} {fmt(r.get('whole')):>10} "
                f"{fmt(r.get('closure')):>10} {fmt(r.get('distinct')):>11}"
              + "".join(f" {fmt(r['lerobot'][b] and r['lerobot'][b]['rchar_per_item']):>19}" for b in backends))
    print("\nGOP B/item: mean bytes of the whole GOP of each item's frame, summed over cameras (what a reader "
          "decoding from the GOP start needs with no cache); closure B: GOP start up to the frame; distinct B: "
          "the distinct GOPs of the timed items / items (each GOP fetched once).")
    for note in notes:
        print("note: " + note)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--lerobot-side":
        r, o, b, n, s, t, k = sys.argv[2:9]
        lerobot_side(r, o, b, int(n), float(s), int(t), int(k))
    else:
        main()
