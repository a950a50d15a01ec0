#!/usr/bin/env python3
"""Write benchmark datasets with LeRobot 0.6.1's own writer, at real shapes, with the pixels of a real recording.

usage: make_lerobot_writer_data.py OUT_FOLDER --shape a|b|c [--episodes N] [--length F] [--size WxH]
                                   [--source FOLDER] [--png] [--overwrite]

Run it with an interpreter that has LeRobot 0.6.1 (Python >= 3.12, `pip install "lerobot[dataset]==0.6.1"`,
FFmpeg's libraries for its encoders), not the project's venv. It is a bench helper, not a test: the datasets
are large (0.1-1 GB) and take minutes to write, so they live outside the repo.

Shapes (every episode `--length` frames at 30 fps, 150 by default: 5 s, shorter than most recordings (10-30 s)
to keep the writing time down (on 2 busy cores: `a` 10 min, `b` 7 min, `c` 25 min, most of it libx265's
lossless depth); a 6-value state and action, one task string per episode):
- `a`: two RGB cameras 320x240, 120 episodes;
- `b`: three RGB cameras 640x480, 40 episodes;
- `c`: one RGB camera and one depth camera (`"info": {"is_depth_map": True}`: LeRobot 0.6.1's depth path,
  HEVC Main 12 gray12le lossless of log-quantized metres) 320x240, 40 episodes.

Pixels: the 1,461 frames of a real robot recording (the AV1 camera `observation.images.cam_high`, 640x480, of
the corpus' `third_party/unitree_g1_av1`, its four MP4s in order), decoded with PyAV and resized to the
shape with swscale (bilinear). Episode `e`'s camera `k` shows the frames from `(97 e + 487 k) mod 1461` on,
wrapping around, so episodes and cameras differ. Depth: the RGB camera's own frame (so the two cameras are
aligned, as on an RGB-D sensor), its luma blurred (down to 1/8 of the size and back up, bilinear) and mapped
to millimetres, `500 + 3500 * (1 - luma / 255)`: 0.5-4.0 m, a tabletop RGB-D camera's range, nearer where
brighter; pixels whose unblurred luma is under 12 are 0 (no return), as real sensors report holes. Given to
LeRobot as uint16 millimetres (what its RealSense camera gives).

State and action: smooth joint trajectories (a sum of two sines per joint, phases drawn per episode, plus a
little noise), action leading state by 3 frames, float32.

Encoding: LeRobot 0.6.1's default encoders (RGB: libsvtav1, g=2, crf 30, preset 12, yuv420p; depth: HEVC
lossless gray12le). By default frames go through LeRobot's streaming encoder (`streaming_encoding=True`, the
recorder's `--dataset.streaming_encoding=true`: the same encoders and settings fed frame by frame instead of
through PNG files, much faster here); its queue is made longer than an episode so that no frame is dropped, and
the frame count of every MP4 is checked against the data at the end. `--png` writes PNGs and encodes them at
each episode's end instead (LeRobot's default recorder path; several times slower).

The source recording must be present: `$LEROBOT_SHARED/corpus/third_party/unitree_g1_av1` (default: `shared`
beside the repository's checkout) or `--source FOLDER`; the script stops with a message when it is absent.

Example (the datasets of tests/bench/README.md's "Against LeRobot 0.6.1"):

    for s in a b c; do /path/to/lerobot061-venv/bin/python tests/bench/make_lerobot_writer_data.py \\
        /data/lw/$s --shape $s; done
"""
import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = (Path(os.environ.get("LEROBOT_SHARED", REPO.parent / "shared")) / "corpus" / "third_party"
                  / "unitree_g1_av1")
CAMERA = "observation.images.cam_high"
FPS = 30

SHAPES = {
    "a": dict(cameras=["front", "wrist"], depth=False, size=(320, 240), episodes=120),
    "b": dict(cameras=["front", "wrist", "top"], depth=False, size=(640, 480), episodes=40),
    "c": dict(cameras=["front"], depth=True, size=(320, 240), episodes=40),
}
TASKS = ["pick up the red cube and place it in the bin", "open the top drawer", "fold the towel in half",
         "pour the cup into the bowl", "push the button", "stack the two blocks"]


def source_mp4s(folder: Path) -> list[Path]:
    files = sorted((folder / "videos" / CAMERA).glob("chunk-*/file-*.mp4"))
    if not files:
        sys.exit(f"make_lerobot_writer_data: the real recording whose pixels these datasets use is absent: no "
                 f"{folder / 'videos' / CAMERA}/chunk-*/file-*.mp4. Give its folder with --source (the corpus' "
                 f"third_party/unitree_g1_av1) or set LEROBOT_SHARED to the folder holding corpus/.")
    return files


def decode_source(files: list[Path], size: tuple[int, int]) -> np.ndarray:
    """Every frame of the recording, in order, as (N, H, W, 3) uint8 at `size` (W, H)."""
    import av
    w, h = size
    out = []
    for path in files:
        with av.open(str(path)) as c:
            for frame in c.decode(video=0):
                out.append(frame.reformat(width=w, height=h, format="rgb24", interpolation="BILINEAR")
                           .to_ndarray())
    return np.stack(out)


def depth_from_rgb(rgb: np.ndarray) -> np.ndarray:
    """uint16 millimetres from RGB frames (N, H, W, 3): a smooth function of luma, 0 where it is very dark."""
    import av
    n, h, w, _ = rgb.shape
    weights = np.array([0.299, 0.587, 0.114], np.float32)
    out = np.empty((n, h, w), np.uint16)
    for i in range(n):  # a one-off preparation, not a hot path: swscale's area down, bilinear up, per frame
        luma = rgb[i].astype(np.float32) @ weights
        small = av.VideoFrame.from_ndarray(np.clip(luma, 0, 255).astype(np.uint8), format="gray")
        small = small.reformat(width=max(w // 8, 2), height=max(h // 8, 2), interpolation="AREA")
        smooth = small.reformat(width=w, height=h, interpolation="BILINEAR").to_ndarray().astype(np.float32)
        mm = 500.0 + 3500.0 * (1.0 - smooth / 255.0)
        mm[luma < 12] = 0
        out[i] = mm.round()
    return out


def trajectories(rng: np.random.Generator, length: int) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(length + 3, dtype=np.float64)[:, None] / FPS
    amp = rng.uniform(0.2, 0.8, (2, 6))
    freq = rng.uniform(0.05, 0.4, (2, 6))
    phase = rng.uniform(0, 2 * np.pi, (2, 6))
    pos = (amp[0] * np.sin(2 * np.pi * freq[0] * t + phase[0]) + amp[1] * np.sin(2 * np.pi * freq[1] * t + phase[1])
           + rng.normal(0, 0.005, (length + 3, 6)))
    return pos[:length].astype(np.float32), pos[3:].astype(np.float32)


def features(cameras: list[str], depth: bool, w: int, h: int) -> dict:
    names = [f"joint_{i}" for i in range(6)]
    feats = {"observation.state": {"dtype": "float32", "shape": (6,), "names": names},
             "action": {"dtype": "float32", "shape": (6,), "names": names}}
    for cam in cameras:
        feats[f"observation.images.{cam}"] = {"dtype": "video", "shape": (h, w, 3),
                                              "names": ["height", "width", "channels"]}
    if depth:
        feats["observation.images.depth"] = {"dtype": "video", "shape": (h, w, 1),
                                             "names": ["height", "width", "channels"],
                                             "info": {"is_depth_map": True}}
    return feats


def check_frame_counts(root: Path) -> int:
    """Every MP4 holds as many frames as the data rows that point into it (a dropped frame would show)."""
    import av
    import pyarrow.parquet as pq
    info = json.loads((root / "meta" / "info.json").read_text())
    eps = pq.read_table(sorted((root / "meta" / "episodes").rglob("*.parquet"))).to_pylist()
    checked = 0
    for key, feat in info["features"].items():
        if feat["dtype"] != "video":
            continue
        want: dict[Path, int] = {}
        for ep in eps:
            path = root / info["video_path"].format(video_key=key, chunk_index=ep[f"videos/{key}/chunk_index"],
                                                    file_index=ep[f"videos/{key}/file_index"])
            want[path] = want.get(path, 0) + ep["length"]
        for path, n in want.items():
            with av.open(str(path)) as c:
                got = sum(1 for _ in c.demux(video=0) if _.size)
            if got != n:
                sys.exit(f"make_lerobot_writer_data: {path} holds {got} frames, its episodes {n}: the encoder "
                         f"dropped frames; rerun with --png")
            checked += 1
    return checked


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the dataset's folder (created)")
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--episodes", type=int, help="default: the shape's")
    ap.add_argument("--length", type=int, default=150, help="frames per episode (default 150: 5 s at 30 fps)")
    ap.add_argument("--size", help="WxH, default: the shape's")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real recording's dataset folder")
    ap.add_argument("--png", action="store_true", help="LeRobot's PNG-then-encode path instead of streaming")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overwrite", action="store_true", help="replace OUT_FOLDER if it exists")
    a = ap.parse_args()

    shape = SHAPES[a.shape]
    w, h = (int(v) for v in a.size.lower().split("x")) if a.size else shape["size"]
    episodes = a.episodes or shape["episodes"]
    files = source_mp4s(a.source)
    if a.out.exists():
        if not a.overwrite:
            sys.exit(f"make_lerobot_writer_data: {a.out} exists; remove it or pass --overwrite")
        shutil.rmtree(a.out)

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    t0 = time.perf_counter()
    rgb = decode_source(files, (w, h))
    n = len(rgb)
    depth = depth_from_rgb(rgb) if shape["depth"] else None
    print(f"source: {n} frames of {a.source.name} at {w}x{h}, "
          f"{time.perf_counter() - t0:.1f} s", flush=True)

    stream = not a.png
    ds = LeRobotDataset.create(repo_id=f"local/{a.out.name}", fps=FPS, root=a.out, robot_type="so101",
                               features=features(shape["cameras"], shape["depth"], w, h),
                               streaming_encoding=stream, encoder_queue_maxsize=a.length + 16,
                               image_writer_threads=0 if stream else 4 * (len(shape["cameras"]) + shape["depth"]))
    rng = np.random.default_rng(a.seed)
    t1 = time.perf_counter()
    for e in range(episodes):
        state, action = trajectories(rng, a.length)
        task = TASKS[e % len(TASKS)]
        starts = [(97 * e + 487 * k) % n for k in range(len(shape["cameras"]))]
        for f in range(a.length):
            frame = {"observation.state": state[f], "action": action[f], "task": task}
            for k, cam in enumerate(shape["cameras"]):
                frame[f"observation.images.{cam}"] = rgb[(starts[k] + f) % n]
            if depth is not None:
                frame["observation.images.depth"] = depth[(starts[0] + f) % n][..., None]
            ds.add_frame(frame)
        ds.save_episode()
        print(f"episode {e + 1}/{episodes} {time.perf_counter() - t1:.0f} s", flush=True)
    ds.finalize()
    checked = check_frame_counts(a.out)
    size = sum(p.stat().st_size for p in a.out.rglob("*") if p.is_file())
    print(f"wrote {a.out}: shape {a.shape}, {episodes} episodes x {a.length} frames at {FPS} fps, "
          f"{len(shape['cameras'])} RGB {w}x{h}{' + depth' if depth is not None else ''}, {size / 1e6:.0f} MB, "
          f"{checked} MP4s' frame counts checked, {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
