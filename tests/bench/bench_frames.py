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
    ap.add_argument("--gop", type=int, default=2, help="frames per GOP (LeRobot's writer: g=2)")
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
    ap.add_argument("--layouts", action="store_true",
                    help="the MP4-layout benchmark: SHAPES, random / windows / DataLoader / uint8 / first batch / "
                         "memory, ours vs --compare-with vs a per-item PyAV open+seek+decode")
    ap.add_argument("--shapes", default="",
                    help="with --layouts: only shapes whose name holds one of these (;-separated)")
    ap.add_argument("--floor", action="store_true",
                    help="with --layouts: also time DecodeFloor (each item's decode work alone, files in memory)")
    ap.add_argument("--compare-with", default=None,
                    help="with --layouts: another checkout's root (e.g. main) to time too")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    if args.layouts:
        if args.items == 600:
            args.items = 300
        return layouts_main(args)
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


# ------------------------------------------------------------------------------------------------
# --layouts: LeRobot-shaped MP4 layouts, random access, DataLoader, first batch, memory
# ------------------------------------------------------------------------------------------------

#: name -> the synthetic dataset (tests/bench/synth_dataset.py): g=2 AV1, LeRobot's defaults otherwise.
SHAPES = {
    "30/mp4 2cam 320x240": dict(episodes=200, frames=300, cameras=2, width=320, height=240, episodes_per_mp4=30),
    "1/mp4 2cam 320x240": dict(episodes=200, frames=300, cameras=2, width=320, height=240, episodes_per_mp4=1),
    "30/mp4 3cam 640x480": dict(episodes=90, frames=300, cameras=3, width=640, height=480, episodes_per_mp4=30),
    "1/mp4 3cam 640x480": dict(episodes=90, frames=300, cameras=3, width=640, height=480, episodes_per_mp4=1),
    "2000 eps 150k/mp4 2cam 320x240": dict(episodes=2000, frames=75, cameras=2, width=320, height=240,
                                           samples_per_mp4=150_000),
}
#: The windows of the "windows" rows: 2 camera frames and 10 action steps (fps 30).
FPS = 30


def _windows(cameras: list[str]) -> dict:
    return {**{c: [-1 / FPS, 0.0] for c in cameras}, "action": [k / FPS for k in range(10)]}


class PyAVBaseline:
    """LeRobot's pyav access pattern as a map-style dataset: every item opens each camera's MP4, seeks to the
    keyframe before the frame and decodes up to it (and on to the window's last frame), converts to RGB and
    float32 C x H x W / 255; numeric columns from the data files, loaded whole up front (cheaper than
    LeRobot's Hugging Face dataset rows, so the baseline is, if anything, flattered)."""

    def __init__(self, root: str, delta_timestamps: Optional[dict] = None, tolerance_s: float = 1e-4) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.root = Path(root)
        info = json.loads((self.root / "meta" / "info.json").read_text())
        self.fps, self.video_path = info["fps"], info["video_path"]
        self.cameras = [k for k, f in info["features"].items() if f["dtype"] == "video"]
        eps = pa.concat_tables([pq.read_table(p) for p in sorted((self.root / "meta" / "episodes").rglob("*.parquet"))])
        self.ep_from = eps.column("dataset_from_index").to_numpy()
        self.ep_to = eps.column("dataset_to_index").to_numpy()
        self.video = {c: tuple(eps.column(f"videos/{c}/{k}").to_numpy()
                               for k in ("chunk_index", "file_index", "from_timestamp")) for c in self.cameras}
        data = pa.concat_tables([pq.read_table(p) for p in sorted((self.root / "data").rglob("*.parquet"))])
        self.cols = {}
        for name in data.column_names:
            col = data.column(name).combine_chunks()
            if pa.types.is_fixed_size_list(col.type):
                self.cols[name] = col.flatten().to_numpy().reshape(len(col), -1).astype(np.float32)
            else:
                self.cols[name] = col.to_numpy().astype(np.float32 if pa.types.is_floating(col.type) else np.int64)
        self.delta = {k: np.round(np.asarray(v) * self.fps).astype(np.int64)
                      for k, v in (delta_timestamps or {}).items()}
        self.tolerance_s = tolerance_s

    def __len__(self) -> int:
        return int(self.ep_to[-1])

    def _frames(self, cam: str, ep: int, ts: np.ndarray):
        import av
        import torch

        chunk, file, start = (x[ep] for x in self.video[cam])
        path = self.root / self.video_path.format(video_key=cam, chunk_index=int(chunk), file_index=int(file))
        want = start + ts
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_count = 1
            tb = float(stream.time_base)
            container.seek(int(want.min() / tb), stream=stream, backward=True, any_frame=False)
            got, times = [], []
            for frame in container.decode(stream):
                t = frame.pts * tb
                got.append(frame)
                times.append(t)
                if t >= want.max() - self.tolerance_s:
                    break
        times = np.asarray(times)
        pick = np.abs(times[None, :] - want[:, None]).argmin(1)
        # as LeRobot's pyav path hands frames over: each RGB frame channels-first, stacked, then float / 255
        frames = [torch.from_numpy(got[k].to_ndarray(format="rgb24")).permute(2, 0, 1) for k in pick]
        return torch.stack(frames).type(torch.float32) / 255

    def __getitem__(self, i: int) -> dict:
        import torch

        ep = int(np.searchsorted(self.ep_to, i, side="right"))
        lo, hi = int(self.ep_from[ep]), int(self.ep_to[ep])
        item = {}
        for name, col in self.cols.items():
            if name in self.delta:
                at = i + self.delta[name]
                item[name] = torch.from_numpy(col[np.clip(at, lo, hi - 1)])
                item[f"{name}_is_pad"] = torch.from_numpy((at < lo) | (at >= hi))
            else:
                item[name] = torch.from_numpy(np.array(col[i]))
        for cam in self.cameras:
            rows = np.clip(i + self.delta[cam], lo, hi - 1) if cam in self.delta else np.array([i])
            frames = self._frames(cam, ep, self.cols["timestamp"][rows].astype(np.float64))
            item[cam] = frames if cam in self.delta else frames[0]
            if cam in self.delta:
                item[f"{cam}_is_pad"] = torch.from_numpy((i + self.delta[cam] < lo) | (i + self.delta[cam] >= hi))
        return item


class DecodeFloor:
    """The decode work of each item alone, as a lower bound for any reader that decodes the same frames: per
    camera, the packets from the frame's decode closure start up to its last frame, read with one os.pread
    on a descriptor kept open per file, fed to one codec context per camera kept across items (flushed), no
    RGB conversion, no other key of the item. Located with ImportedFrames' own tables."""

    def __init__(self, out: str, delta_timestamps: Optional[dict] = None) -> None:
        from transforms.reader import ImportedFrames

        self.ds = ImportedFrames(out, delta_timestamps=delta_timestamps)
        self.cameras = self.ds.cameras
        self._data: dict = {}
        self._ctx: dict = {}

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> dict:
        from fractions import Fraction

        import av

        from transforms.reader.frames import closure_starts
        from transforms.reader.seek import _codec_context

        ds = self.ds
        e, pos = ds._locate(int(i))
        prep = ds._episode(e)
        deltas = ds.delta_indices or {}
        decoded = 0
        for cam in ds.cameras:
            rows = np.clip(pos + np.asarray(deltas[cam]), 0, prep.length - 1) if cam in deltas else np.array([pos])
            h = ds._handle(prep, cam)
            samples = ds._samples(prep, cam)[rows]
            tr = h.track
            fd = self._data.get(h.uri)
            if fd is None:
                fd = self._data[h.uri] = os.open(h.uri.removeprefix("file://"), os.O_RDONLY)
            first, last = int(closure_starts(tr, samples).min()), int(samples.max())
            base = int(tr.offset[first])
            data = os.pread(fd, int(tr.offset[last] + tr.size[last]) - base, base)
            ctx = self._ctx.get(cam)
            if ctx is None:
                ctx = self._ctx[cam] = _codec_context(tr, 1)
            else:
                ctx.flush_buffers()
            tb = Fraction(1, tr.timescale)
            for s in range(first, last + 1):
                off = int(tr.offset[s]) - base
                pkt = av.Packet(data[off:off + int(tr.size[s])])
                pkt.pts, pkt.dts, pkt.time_base = int(tr.pts[s]), int(tr.dts[s]), tb
                decoded += len(ctx.decode(pkt))
            decoded += len(ctx.decode(None))
        return {"index": int(i), "decoded": decoded}  # `index`: what a loader benchmark counts


class LoaderCeiling:
    """What a DataLoader costs to move items alone: every item is a copy of ImportedFrames' item 0 (the same
    keys, dtypes and shapes, windows included), made without reading or decoding anything. A reader whose items
    have these tensors cannot go faster through the same loader, whatever its decoding costs."""

    def __init__(self, out: str, delta_timestamps: Optional[dict] = None, camera_dtype: str = "float32") -> None:
        from transforms.reader import ImportedFrames

        self.ds = ImportedFrames(out, delta_timestamps=delta_timestamps, camera_dtype=camera_dtype)
        self.cameras = self.ds.cameras
        self._item = self.ds[0]

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> dict:
        return {k: v.clone() if hasattr(v, "clone") else v for k, v in self._item.items()}


def _proc_memory(pid: int) -> dict:
    """Resident (RSS), peak resident (HWM) and private (USS: not shared with any other process) MB of `pid`."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
        private = 0
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                private += int(line.split()[1])
        out["USS"] = private / 1024
    except OSError:
        pass
    return out


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) `pid` has used."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def measure_side(spec: dict) -> dict:
    """One side's figures over one dataset (runs in its own interpreter, PYTHONPATH choosing the code)."""
    import torch
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    orders = np.load(spec["orders"])
    items, seconds = spec["items"], spec["seconds"]

    def make(windows: bool, **kw):
        if spec["side"] == "pyav":
            ds = PyAVBaseline(spec["dataset"])
            return PyAVBaseline(spec["dataset"], _windows(ds.cameras) if windows else None)
        if spec["side"] == "floor":
            ds = DecodeFloor(spec["import"])
            return DecodeFloor(spec["import"], _windows(ds.cameras)) if windows else ds
        if spec["side"].startswith("lerobot:"):  # run by --lerobot-python, LeRobot's own loader
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import logging
            import warnings

            warnings.filterwarnings("ignore")
            logging.disable(logging.WARNING)
            from lerobot.datasets.lerobot_dataset import LeRobotDataset
            backend = spec["side"].split(":", 1)[1]
            ds = LeRobotDataset("bench/local", root=spec["dataset"], video_backend=backend)
            return LeRobotDataset("bench/local", root=spec["dataset"], video_backend=backend,
                                  delta_timestamps=_windows(ds.meta.video_keys)) if windows else ds
        from transforms.reader import ImportedFrames
        ds = ImportedFrames(spec["import"], **kw)
        return ImportedFrames(spec["import"], delta_timestamps=_windows(ds.cameras), **kw) if windows else ds

    def timed(ds, order) -> dict:
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        for i in order[:items].tolist():
            ds[i]
            n += 1
            if time.perf_counter() - t0 > seconds:
                break
        return {"items_per_s": n / (time.perf_counter() - t0), "items_per_cpu_s": n / (time.process_time() - c0)}

    make(False)[0]  # untimed: the first item of a process imports the decoders' modules
    out: dict = {}
    runs = [("random", "random", False, {}), ("random windows", "random", True, {})]
    if spec["side"] == "ours":
        runs += [("random warm", "random", False, {}), ("sequential", "sequential", False, {}),
                 ("gop-block", "gop-block", False, {})]
        import inspect

        from transforms.reader import ImportedFrames
        if "camera_dtype" in inspect.signature(ImportedFrames).parameters:
            runs += [("random uint8", "random", False, {"camera_dtype": "uint8"}),
                     ("random windows uint8", "random", True, {"camera_dtype": "uint8"})]
    for name, order, windows, kw in runs:
        t0 = time.perf_counter()
        ds = make(windows, **kw)
        opened = time.perf_counter() - t0
        if name.endswith("warm"):  # every file's index and every episode group read once, untimed
            t0 = time.perf_counter()
            for a, _ in ds.episode_bounds:
                ds[a]
                if time.perf_counter() - t0 > 3 * seconds:
                    break
            else:
                out[name] = {**timed(ds, orders[order][items:]), "open_s": opened}
            continue
        out[name] = {**timed(ds, orders[order]), "open_s": opened}
    loaders = [] if spec["side"] == "floor" else [("loader", False, {}), ("loader windows", True, {})] + (
        [("loader windows uint8", True, {"camera_dtype": "uint8"})] if "random uint8" in out else [])
    for name, windows, kw in loaders:
        if spec["side"].startswith("lerobot:"):
            # LeRobot's torchcodec decoders are cached per process; forked into the workers after this process
            # used them, they share its file positions and fail ("Invalid data found"): a training process
            # forks before reading items, as the loader here then does
            from lerobot.datasets import video_utils
            cache = getattr(video_utils, "_default_decoder_cache", None)
            if cache is not None:
                cache.clear()
        t0 = time.perf_counter()
        ds = make(windows, **kw)
        g = torch.Generator()
        g.manual_seed(0)
        it = iter(DataLoader(ds, batch_size=8, num_workers=2, shuffle=True, generator=g))
        next(it)
        first = time.perf_counter() - t0
        workers = [w.pid for w in getattr(it, "_workers", [])]
        cpu0 = time.process_time() + sum(_proc_cpu(w) for w in workers)
        n, t1 = 0, time.perf_counter()
        for batch in it:
            n += len(batch["index"])
            if n >= items or time.perf_counter() - t1 > seconds:
                break
        rate = n / (time.perf_counter() - t1)
        cpu = time.process_time() + sum(_proc_cpu(w) for w in workers) - cpu0
        mem = [_proc_memory(w) for w in workers]
        del it
        out[name] = {"items_per_s": rate, "items_per_cpu_s": n / cpu if cpu > 0 else None, "first_batch_s": first,
                     "worker_rss_mb": max((m.get("VmRSS", 0) for m in mem), default=None),
                     "worker_hwm_mb": max((m.get("VmHWM", 0) for m in mem), default=None),
                     "worker_uss_mb": max((m.get("USS", 0) for m in mem), default=None)}
    return out


def run_side(side: str, code: Optional[str], dataset: Path, out: Path, orders: Path, args) -> Optional[dict]:
    spec = {"side": side, "dataset": str(dataset), "import": str(out), "orders": str(orders), "items": args.items,
            "seconds": args.seconds}
    python = sys.executable
    env = dict(os.environ, PYTHONPATH=code or str(REPO), OMP_NUM_THREADS="1")
    if side.startswith("lerobot:"):  # LeRobot's interpreter, none of this project's code on its path
        python, env["PYTHONPATH"] = args.lerobot_python, ""
    proc = subprocess.run([python, str(HERE), "--measure", json.dumps(spec)], capture_output=True, text=True,
                          env=env, cwd="/tmp", timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("MEASURE-RESULT "):
            return json.loads(line[len("MEASURE-RESULT "):])
    print(f"  {side} failed: " + " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:]), flush=True)
    return None


def _print_table(table: list, metric: str) -> None:
    cols = ["random", "random warm", "random windows", "loader", "loader windows", "random uint8",
            "loader windows uint8", "sequential", "gop-block"]
    print("| shape | side | " + " | ".join(cols) + " | first batch s | worker RSS / USS MB |")
    print("|---|---|" + "---|" * (len(cols) + 2))

    def get(m: dict, c: str):
        return m.get(c, {}).get(metric)

    for shape, med in table:
        for side, m in med.items():
            lw = m.get("loader windows", {})
            print(f"| {shape} | {side} | " + " | ".join(fmt(get(m, c), ".1f") for c in cols)
                  + f" | {fmt(m.get('loader', {}).get('first_batch_s'), '.2f')}"
                  f" | {fmt(lw.get('worker_rss_mb'))} / {fmt(lw.get('worker_uss_mb'))} |")
        for other in ["pyav", "main", "floor"] + [s for s in med if s.startswith("lerobot")]:
            if other in med and "ours" in med:
                ratio = [fmt(get(med["ours"], c) / get(med[other], c), ".2f")
                         if get(med[other], c) and get(med["ours"], c) else "-" for c in cols]
                print(f"| {shape} | ours/{other} | " + " | ".join(ratio) + " | | |")


def layouts_main(args) -> None:
    """Build (or reuse) each shape, then run the sides in alternating rounds; print medians."""
    import statistics

    from tests.bench.synth_dataset import make_dataset
    from tests.helpers import run_import

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_frames_"))
    work.mkdir(parents=True, exist_ok=True)
    sides = [("ours", None)] + ([("main", args.compare_with)] if args.compare_with else []) + [("pyav", None)] + \
        ([("floor", None)] if args.floor else [])
    lerobot_note = "LeRobot's own columns could not be measured: no --lerobot-python given"
    if args.lerobot_python:
        probe = subprocess.run([args.lerobot_python, "-c", "import lerobot; print(lerobot.__version__)"],
                               capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=""), cwd="/tmp")
        if probe.returncode == 0:
            version = probe.stdout.strip()
            sides += [(f"lerobot {version} {b}", None) for b in args.lerobot_backends.split(",") if b]
            lerobot_note = f"lerobot {version} = LeRobotDataset(root=the dataset, video_backend=...), run by " \
                           f"{args.lerobot_python}"
        else:
            lerobot_note = f"LeRobot's own columns could not be measured: {args.lerobot_python} cannot import " \
                           f"lerobot ({(probe.stderr.strip().splitlines() or ['?'])[-1]})"
    shapes = [s for s in SHAPES if not args.shapes or any(k in s for k in args.shapes.split(";"))]
    table = []
    for shape in shapes:
        params = SHAPES[shape]
        slug = "".join(c if c.isalnum() else "_" for c in shape)
        root, out = work / f"ds_{slug}", work / f"out_{slug}"
        t0 = time.perf_counter()
        if not (out / "manifest.json").exists():
            make_dataset(root, codec=args.codec, gop=args.gop, clip_frames=args.clip_frames, overwrite=True, **params)
            if run_import(root, out) != 0:
                raise SystemExit(f"the import of {root} failed: see {out}/errors.jsonl")
        from transforms.reader import GopBlockSampler, ImportedFrames, ImportReader
        ds = ImportedFrames(str(out))
        if ds.num_episodes != params["episodes"]:
            raise SystemExit(f"{out} holds {ds.num_episodes} of the {params['episodes']} episodes: remove it to import "
                             "again")
        rng = np.random.default_rng(args.seed)
        orders = work / f"orders_{slug}.npz"
        np.savez(orders, sequential=np.arange(len(ds)), random=rng.permutation(len(ds)),
                 **{"gop-block": GopBlockSampler(ds, seed=args.seed).order()})
        reader = ImportReader(str(out))
        mp4s = len({ds._handle(ds._episode(e), c).uri for e in range(ds.num_episodes) for c in ds.cameras})
        samples = reader.tracks(ds._handle(ds._episode(0), ds.cameras[0]).uri).num_samples
        print(f"# {shape}: {ds.num_episodes} episodes x {params['frames']} frames = {len(ds)} items, "
              f"{len(ds.cameras)} {args.codec} cameras {params['width']}x{params['height']} g={args.gop}, "
              f"{mp4s} MP4s ({samples} samples in the first); ready in {time.perf_counter() - t0:.0f} s", flush=True)
        got: dict = {s: [] for s, _ in sides}
        for r in range(args.repeat):
            for side, code in (sides if r % 2 == 0 else sides[::-1]):
                kind = side if side in ("pyav", "floor") else f"lerobot:{side.split()[-1]}" \
                    if side.startswith("lerobot") else "ours"
                res = run_side(kind, code, root, out, orders, args)
                if res is not None:
                    got[side].append(res)
                    print(f"  round {r + 1} {side} (load {os.getloadavg()[0]:.1f}), items/s wall / per CPU-s: "
                          + ", ".join(f"{k} {v['items_per_s']:.1f}/{v.get('items_per_cpu_s') or 0:.1f}"
                                      for k, v in res.items()), flush=True)
        med = {}
        for side, runs in got.items():
            keys = {k for run in runs for k in run}
            med[side] = {k: {m: statistics.median(vals) for m in {m for run in runs if k in run for m in run[k]}
                             if (vals := [run[k][m] for run in runs if k in run and run[k].get(m) is not None])}
                         for k in keys}
        table.append((shape, med))
        _print_table(table[-1:], "items_per_cpu_s")
    for metric, what in (("items_per_cpu_s", "items per CPU-second (CPU time of the process, and of the loader's "
                                               "workers and main process)"), ("items_per_s", "items/s (wall clock)")):
        print(f"\n{what}, medians of {args.repeat} alternating rounds; one process = ds[i] in a loop, torch threads 1; "
              "loader = DataLoader(num_workers=2, shuffle=True, batch_size=8) after its first batch; windows = "
              "2 frames per camera [-1/30, 0] s + 10 action steps; warm = after one item of every episode")
        _print_table(table, metric)
    print(f"note: {lerobot_note}; pyav = the per-item PyAV open + seek + decode LeRobot's pyav backend does "
          "(PyAVBaseline).")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        print("MEASURE-RESULT " + json.dumps(measure_side(json.loads(sys.argv[2]))), flush=True)
    elif len(sys.argv) > 1 and sys.argv[1] == "--lerobot-side":
        r, o, b, n, s, t, k = sys.argv[2:9]
        lerobot_side(r, o, b, int(n), float(s), int(t), int(k))
    else:
        main()
