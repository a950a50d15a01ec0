"""Figures for the episode reader's frame seeks (a script, not a test).

    /work/venv/bin/python tests/bench/bench_reader.py [--codec h264|hevc|av1 ...] [--seeks 200]

For each codec: encode one MP4 of 10 episodes × 300 frames (30 fps, 320×240, GOP 30, B-frames where
the codec has them), build a LeRobot v3 dataset around it, import it (default layout), then time
random single-frame seeks by episode time on one episode (episode 5, in the middle of the file):

* ours: `ImportReader(OUT).episode(5).video(cam).frame_at(t)` — range reads of the decode closure;
* PyAV, container held open: `container.seek(pts) + decode` to the frame (the file is already open,
  its moov parsed: the best case for PyAV);
* PyAV, open per seek: `av.open + seek + decode`, what LeRobot's PyAV/torchvision decode path does for
  each query (bytes include reading the head and moov);
* LeRobot itself when it can be installed (it needs Python >= 3.12).

Bytes for PyAV are counted through a Python file object handed to `av.open`; latencies are measured
with a plain path (native I/O). Every PyAV frame is checked against ours pixel for pixel.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parents[1]))

import av  # noqa: E402

import dataset_factory as DF  # noqa: E402
from scheduling import restore_normal_scheduling  # noqa: E402
from pipelines.import_lerobot import run as run_import  # noqa: E402
from transforms.reader.import_reader import ImportReader  # noqa: E402
from transforms.mp4 import ranges  # noqa: E402

ENCODERS = {"h264": ("libx264", {"g": "30", "bf": "3"}), "hevc": ("libx265", {"g": "30"}),
            "av1": ("libsvtav1", {"g": "30"})}
CAM = "observation.images.cam"


def encode(path: Path, codec: str, frames: int, width: int = 320, height: int = 240, fps: int = 30) -> Path:
    """A moving scene with texture (so frames cost realistic bytes), deterministic."""
    name, opts = ENCODERS[codec]
    opts = dict(opts)
    if name == "libx265":
        opts["x265-params"] = "log-level=none"
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:height * 2, 0:width * 2].astype(np.float32)
    # A smooth scene (like a workspace seen by a fixed camera) with a little sensor noise.
    base = np.stack([128 + 60 * np.sin(xx / 23.0) * np.cos(yy / 31.0),
                     128 + 50 * np.sin((xx + yy) / 41.0),
                     128 + 40 * np.cos(xx / 17.0 - yy / 29.0)], axis=-1)
    texture = np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)
    with av.open(str(path), "w", format="mp4") as out:
        s = out.add_stream(name, rate=fps, options=opts)
        s.width, s.height, s.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            dx, dy = int(width * (1 + np.sin(i / 40.0)) / 2), int(height * (1 + np.cos(i / 55.0)) / 2)
            img = texture[dy:dy + height, dx:dx + width].copy()
            ax, ay = int((width - 40) * (1 + np.sin(i / 13.0)) / 2), int((height - 40) * (1 + np.sin(i / 17.0)) / 2)
            img[ay:ay + 40, ax:ax + 40] = (200, 60, 40)  # a moving "gripper"
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(p)
        for p in s.encode(None):
            out.mux(p)
    restore_normal_scheduling()  # SVT-AV1 leaves this thread at real-time priority (tests/scheduling.py)
    return path


def build(tmp: Path, codec: str, episodes: int, length: int) -> tuple[Path, Path]:
    mp4 = encode(tmp / f"{codec}.mp4", codec, episodes * length)
    label = {"h264": "h264", "hevc": "hevc", "av1": "av1"}[codec]
    features = {
        "observation.state": {"dtype": "float32", "shape": [6], "names": None},
        CAM: {"dtype": "video", "shape": [240, 320, 3], "names": ["height", "width", "channels"],
              "info": {"video.codec": label, "video.fps": 30, "video.pix_fmt": "yuv420p"}},
    }
    root = DF.write_dataset(tmp / f"ds_{codec}", DF.DatasetSpec(lengths=[length] * episodes, fps=30,
                                                                features=features, video_files={CAM: mp4}))
    out = tmp / f"out_{codec}"
    assert run_import(["--dataset", str(root), "--output", str(out), "--runner", "FnApiRunner"]) == 0
    return root, out


class CountingFile(io.RawIOBase):
    """A file object for av.open that counts the bytes PyAV reads."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "rb")
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.bytes_read += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        self._f.close()
        super().close()


def pyav_seek(container, target_pts: int) -> np.ndarray:
    """PyAV's usual seek: to the keyframe before `target_pts`, then decode up to the frame."""
    stream = container.streams.video[0]
    container.seek(target_pts, stream=stream, backward=True, any_frame=False)
    for frame in container.decode(stream):
        if frame.pts >= target_pts:
            return frame.to_ndarray(format="rgb24")
    raise RuntimeError(f"no frame at pts {target_pts}")


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:7.2f} ms (p90 {np.percentile(values, 90) * 1e3:6.2f})"


def bench(tmp: Path, codec: str, seeks: int, episodes: int, length: int) -> None:
    t0 = time.perf_counter()
    root, out = build(tmp, codec, episodes, length)
    print(f"\n== {codec}: {episodes} episodes x {length} frames, 320x240, GOP 30 "
          f"(built and imported in {time.perf_counter() - t0:.1f} s) ==")
    counter = ranges.ReadStats()
    t0 = time.perf_counter()
    reader = ImportReader(str(out), open_file=lambda uri: ranges.open_uri(uri, stats=counter))
    ep = reader.episode(episodes // 2)
    video = ep.video(CAM)
    open_s = time.perf_counter() - t0
    path = video.uri[len("file://"):]
    size = Path(path).stat().st_size
    tr = video.track
    print(f"file: {size} bytes, {tr.num_samples} samples, {len(tr.gop_start)} GOPs, "
          f"mean GOP {size / len(tr.gop_start) / 1024:.1f} KiB; episode {ep.episode_index}: {ep.length} frames")
    print(f"ours: opening the import + episode lookup + MediaIndex join: {open_s * 1e3:.1f} ms (once)")

    rng = np.random.default_rng(1)
    picks = rng.integers(0, ep.length, seeks)
    times = ep["timestamp"][picks].astype(np.float64)
    targets = tr.sorted_pts[video.locate(times)]

    ours_lat, ours_bytes, ours_req, frames = [], [], [], []
    for t in times:
        b, r = counter.bytes_read, counter.requests
        s = time.perf_counter()
        frames.append(video.frame_at(float(t)))
        ours_lat.append(time.perf_counter() - s)
        ours_bytes.append(counter.bytes_read - b)
        ours_req.append(counter.requests - r)

    held_lat, mismatches = [], 0
    with av.open(path) as c:
        for k, p in enumerate(targets.tolist()):
            s = time.perf_counter()
            img = pyav_seek(c, p)
            held_lat.append(time.perf_counter() - s)
            mismatches += not np.array_equal(img, frames[k])
    held_bytes = []
    f = CountingFile(path)
    with av.open(f) as c:
        opened = f.bytes_read
        for p in targets.tolist():
            b = f.bytes_read
            pyav_seek(c, p)
            held_bytes.append(f.bytes_read - b)
    open_lat, open_bytes = [], []
    for p in targets.tolist()[: max(20, seeks // 4)]:
        s = time.perf_counter()
        with av.open(path) as c:
            pyav_seek(c, p)
        open_lat.append(time.perf_counter() - s)
        f = CountingFile(path)
        with av.open(f) as c:
            pyav_seek(c, p)
        open_bytes.append(f.bytes_read)

    # Ground truth: a sequential decode of the whole file.
    want = {int(k): None for k in video.locate(times).tolist()}
    with av.open(path) as c:
        for k, fr in enumerate(c.decode(video=0)):
            if k in want:
                want[k] = fr.to_ndarray(format="rgb24")
    wrong_ours = sum(not np.array_equal(frames[i], want[k]) for i, k in enumerate(video.locate(times).tolist()))

    mb, hb, ob = statistics.median(ours_bytes), statistics.median(held_bytes), statistics.median(open_bytes)
    print(f"{'':34} {'median latency':>28} {'median bytes/seek':>18}")
    print(f"{'ours (index + range reads)':34} {ms(ours_lat):>28} {mb:>18,.0f}   "
          f"({statistics.median(ours_req):.0f} request(s))")
    print(f"{'PyAV, container held open':34} {ms(held_lat):>28} {hb:>18,.0f}   "
          f"(+{opened:,} bytes to open once)")
    print(f"{'PyAV, av.open per seek':34} {ms(open_lat):>28} {ob:>18,.0f}")
    print(f"bytes: PyAV held open / ours = {hb / mb:.1f}x, PyAV open per seek / ours = {ob / mb:.1f}x; "
          f"latency: ours / PyAV held open = {statistics.median(ours_lat) / statistics.median(held_lat):.2f}, "
          f"ours / PyAV open per seek = {statistics.median(ours_lat) / statistics.median(open_lat):.2f}")
    print(f"frames differing from a sequential decode: ours {wrong_ours} of {seeks}; "
          f"PyAV seek+decode differs from ours in {mismatches} of {seeks}")


def lerobot_status() -> str:
    if sys.version_info < (3, 12):
        return (f"LeRobot: skipped - it requires Python >= 3.12 and this venv runs "
                f"{sys.version_info.major}.{sys.version_info.minor}")
    try:
        import lerobot  # noqa: F401
    except ImportError as ex:
        return f"LeRobot: skipped - not installed ({ex})"
    return "LeRobot: installed, but not benchmarked by this script"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--codec", nargs="+", default=["h264", "av1"], choices=sorted(ENCODERS))
    ap.add_argument("--seeks", type=int, default=200)
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--length", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for codec in args.codec:
            bench(Path(tmp), codec, args.seeks, args.episodes, args.length)
    print("\n" + lerobot_status())


if __name__ == "__main__":
    main()
