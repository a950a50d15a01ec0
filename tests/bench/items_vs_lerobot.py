#!/usr/bin/env python3
"""Spot-check that ImportedFrames over an import returns LeRobot's own items, on a seeded sample (a script, not a
test: the datasets it is for are large and live outside the repo, and LeRobot 0.6.1 needs its own venv).

    python tests/bench/items_vs_lerobot.py IMPORT --lerobot-python /path/to/lerobot061-venv/bin/python \
        [--items 20] [--seed 0] [--runs uint8,plain,windows]

For each run (`uint8`: `return_uint8=True` / `camera_dtype="uint8"`; `plain`: float32; `windows`: float32 with
`delta_timestamps` of 2 camera frames, 3 state steps back and 10 action steps ahead) the LeRobot interpreter
reads `LeRobotDataset(root=the import's dataset, video_backend="pyav")[i]` for `--items` seeded random indexes
plus the first and last frame of the first and last episode (where windows pad), and this interpreter compares
ImportedFrames' item at the same indexes: the same keys, the same `task`, and every tensor equal in dtype, shape
and value. Depth (a camera whose `info.is_depth_map` is true) may differ by 1 mm where torch's and numpy's float32
`exp` round differently in the last bit (as tests/test_lerobot061.py allows); those pixels are counted. Prints
one line per run and a line per mismatch (index, key, what differs); exits 1 on a mismatch.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()


def windows(info: dict) -> dict:
    fps = info["fps"]
    out = {}
    for key, ft in info["features"].items():
        if ft["dtype"] in ("video", "image"):
            out[key] = [-1 / fps, 0.0]
        elif key == "action":
            out[key] = [k / fps for k in range(10)]
        elif key == "observation.state":
            out[key] = [-2 / fps, -1 / fps, 0.0]
    return out


def dump(spec: dict) -> None:
    """In the LeRobot interpreter: the sample's items of each run into spec['out']/<run>.npz (+ tasks.json)."""
    import logging
    import warnings

    import numpy as np
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    info = json.loads((Path(spec["dataset"]) / "meta" / "info.json").read_text())
    kwargs = {"uint8": {"return_uint8": True}, "plain": {}, "windows": {"delta_timestamps": windows(info)}}
    tasks = {}
    for run in spec["runs"]:
        ds = LeRobotDataset("check/local", root=spec["dataset"], video_backend="pyav", **kwargs[run])
        arrays = {}
        for i in spec["indexes"]:
            item = ds[i]
            tasks.setdefault(run, {})[str(i)] = {"task": item.get("task"),
                                                 "keys": sorted(item)}
            for k, v in item.items():
                if isinstance(v, torch.Tensor):
                    arrays[f"{i}/{k}"] = v.numpy()
        np.savez(Path(spec["out"]) / f"{run}.npz", **arrays)
    (Path(spec["out"]) / "tasks.json").write_text(json.dumps(tasks))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("import_root")
    ap.add_argument("--lerobot-python", default=os.environ.get("LEROBOT_PYTHON", "lerobot-venv/bin/python"))
    ap.add_argument("--items", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default="uint8,plain,windows")
    a = ap.parse_args()
    import numpy as np
    import pyarrow.parquet as pq
    import torch

    sys.path.insert(0, str(HERE.parents[2]))
    from transforms.reader import ImportedFrames

    dataset = json.loads((Path(a.import_root) / "manifest.json").read_text())["dataset"].removeprefix("file://")
    info = json.loads((Path(dataset) / "meta" / "info.json").read_text())
    depth = {k for k, ft in info["features"].items() if (ft.get("info") or {}).get("is_depth_map")}
    eps = pq.read_table(sorted((Path(dataset) / "meta" / "episodes").rglob("*.parquet")),
                        columns=["dataset_from_index", "dataset_to_index"]).to_pylist()
    edges = [eps[0]["dataset_from_index"], eps[0]["dataset_to_index"] - 1,
             eps[-1]["dataset_from_index"], eps[-1]["dataset_to_index"] - 1]
    n = info["total_frames"]
    sample = np.random.default_rng(a.seed).choice(n, size=min(a.items, n), replace=False).tolist()
    indexes = sorted(set(sample + edges))
    runs = a.runs.split(",")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"dataset": dataset, "indexes": indexes, "runs": runs, "out": tmp}
        proc = subprocess.run([a.lerobot_python, str(HERE), "--dump", json.dumps(spec)], capture_output=True,
                              text=True, env=dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=""), cwd="/tmp")
        if proc.returncode:
            print(f"LeRobot's side failed: {proc.stderr.strip()[-2000:]}")
            return 2
        theirs = json.loads((Path(tmp) / "tasks.json").read_text())
        kwargs = {"uint8": {"camera_dtype": "uint8"}, "plain": {}, "windows": {"delta_timestamps": windows(info)}}
        for run in runs:
            ours = ImportedFrames(a.import_root, **kwargs[run])
            tensors = values = depth_px = depth_off = 0
            with np.load(Path(tmp) / f"{run}.npz") as z:
                for i in indexes:
                    got = ours[i]
                    want_meta = theirs[run][str(i)]
                    if sorted(got) != want_meta["keys"]:
                        bad += 1
                        print(f"MISMATCH {run} index {i}: keys ours-only {sorted(set(got) - set(want_meta['keys']))}"
                              f", LeRobot-only {sorted(set(want_meta['keys']) - set(got))}")
                    if got.get("task") != want_meta["task"]:
                        bad += 1
                        print(f"MISMATCH {run} index {i} task: ours {got.get('task')!r}, LeRobot "
                              f"{want_meta['task']!r}")
                    for key in want_meta["keys"]:
                        name = f"{i}/{key}"
                        if name not in z.files:
                            continue
                        want = z[name]
                        mine = got.get(key)
                        if not isinstance(mine, torch.Tensor):
                            bad += 1
                            print(f"MISMATCH {run} index {i} {key}: ours {type(mine).__name__}, LeRobot a tensor")
                            continue
                        mine = mine.numpy()
                        tensors += 1
                        values += want.size
                        if mine.dtype != want.dtype or mine.shape != want.shape:
                            bad += 1
                            print(f"MISMATCH {run} index {i} {key}: ours {mine.dtype} {mine.shape}, LeRobot "
                                  f"{want.dtype} {want.shape}")
                            continue
                        if key in depth:
                            diff = np.abs(mine.astype(np.float64) - want.astype(np.float64))
                            depth_px += diff.size
                            depth_off += int(np.count_nonzero(diff))
                            if diff.max() > 1:
                                bad += 1
                                at = np.unravel_index(int(diff.argmax()), diff.shape)
                                print(f"MISMATCH {run} index {i} {key}: {int(np.count_nonzero(diff > 1))} pixels "
                                      f"more than 1 mm off, worst at {tuple(int(x) for x in at)}: ours "
                                      f"{mine[at]}, LeRobot {want[at]}")
                        elif not np.array_equal(mine, want):
                            bad += 1
                            diff = mine != want
                            at = np.unravel_index(int(np.argmax(diff)), diff.shape)
                            print(f"MISMATCH {run} index {i} {key}: {int(diff.sum())} of {diff.size} values differ, "
                                  f"first at {tuple(int(x) for x in at)}: ours {mine[at]}, LeRobot {want[at]}")
            extra = f", depth {depth_px} pixels of which {depth_off} 1 mm off" if depth else ""
            print(f"{run}: {len(indexes)} items, {tensors} tensors, {values} values compared{extra}", flush=True)
    print("equal" if not bad else f"{bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--dump":
        dump(json.loads(sys.argv[2]))
    else:
        sys.exit(main())
