"""Generate large synthetic LeRobot v3 datasets with real encoded MP4s, fast.

    python tests/bench/synth_dataset.py OUT_ROOT --episodes 2000 --frames 150 --cameras 2 --codec h264 \\
        --episodes-per-meta-file 50 --samples-per-mp4 15000 [--moov-at-end] [--data-file-mb 100] ...

or, from Python, `make_dataset(root, episodes=2000, frames=150, ...) -> root`.

How it stays fast at hundreds of thousands of frames per camera:
* each camera's pixels are encoded ONCE with PyAV as a short base clip (`clip_frames`, default 30 frames,
  a closed GOP every `gop` frames, B-frames for h264/hevc); an episode whose length is not a multiple of
  the clip also gets a tail clip of the remaining frames, encoded once per distinct remainder;
* every MP4 is then built by remuxing (stream copy) those packets again and again with shifted pts/dts,
  one episode = whole repetitions (+ the tail), so every episode starts on a keyframe, as it does in
  LeRobot's concatenated files (each episode is encoded on its own, then stream-copied into the file).

What is written follows LeRobot's writer:
* `meta/info.json` (features: user features, the cameras with their `video.*` info, the 5 defaults),
  `meta/tasks.parquet`, `meta/stats.json`;
* `meta/episodes/chunk-XXX/file-YYY.parquet`: LeRobot's columns and column order (location columns,
  `videos/<key>/from_timestamp`/`to_timestamp` as running float sums restarting at 0.0 in each new MP4,
  per-episode `stats/<feature>/<stat>` unless `stats=False`, `meta/episodes/*` last), row groups of 10;
* `data/chunk-XXX/file-YYY.parquet`: the user numeric features as `fixed_size_list<float>[n]` plus
  the 5 default columns, snappy, one row group per episode, `index` global and consecutive;
* `videos/<key>/chunk-XXX/file-YYY.mp4`: one MP4 per `samples_per_mp4` / `episodes_per_mp4` /
  `video_file_mb`, faststart (moov first, like LeRobot's concatenation) or moov at the end.
Data, video and episodes files roll over independently; `chunks_size` files per chunk directory.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, when run as a script
from tests.isolated import run_isolated  # noqa: E402
from tests.scheduling import restore_normal_scheduling  # noqa: E402
from tests.dataset_factory import (  # noqa: E402  (LeRobot's path templates and default columns)
    DATA_PATH, DEFAULTS as DEFAULT_FEATURES, EPISODES_PATH, VIDEO_PATH)

#: --codec -> (PyAV encoder, LeRobot's `video.codec` label)
CODECS = {"h264": ("libx264", "h264"), "hevc": ("libx265", "hevc"), "av1": ("libsvtav1", "av1")}
QUANTILES = ("q01", "q10", "q50", "q90", "q99")
_Q = (0.01, 0.10, 0.50, 0.90, 0.99)
METADATA_BUFFER_SIZE = 10  # LeRobot flushes episode metadata every 10 episodes: one row group each


# ------------------------------------------------------------------------------------------------
# Base clips and remuxing
# ------------------------------------------------------------------------------------------------

@dataclass
class Clip:
    """The packets of one encoded clip: (payload, pts, dts, duration, keyframe), in `time_base` ticks."""

    packets: list
    time_base: object
    frame_ticks: int
    frames: int
    template: bytes  # the encoded MP4, to open a template stream from

    @property
    def ticks(self) -> int:
        return self.frames * self.frame_ticks

    @property
    def nbytes(self) -> int:
        return sum(len(p[0]) for p in self.packets)


def _encoder_options(encoder: str, gop: int, bframes: bool) -> dict:
    if encoder == "libx264":
        params = f"keyint={gop}:min-keyint={gop}:scenecut=0:open-gop=0" + ("" if bframes else ":bframes=0")
        return {"g": str(gop), "crf": "28", "preset": "veryfast", "x264-params": params}
    if encoder == "libx265":
        params = f"keyint={gop}:min-keyint={gop}:scenecut=0:open-gop=0:log-level=none"
        params += "" if bframes else ":bframes=0"
        return {"g": str(gop), "crf": "28", "preset": "veryfast", "x265-params": params}
    if encoder == "libsvtav1":  # LeRobot's default encoder (crf 30, preset 12)
        return {"g": str(gop), "crf": "30", "preset": "12", "svtav1-params": f"keyint={gop}"}
    raise ValueError(encoder)


def _frame_image(i: int, camera: int, width: int, height: int) -> np.ndarray:
    """A moving synthetic picture (different per camera)."""
    y, x = np.mgrid[0:height, 0:width]
    img = np.empty((height, width, 3), np.uint8)
    img[:, :, 0] = (x * 4 + i * 8 + camera * 60) % 256
    img[:, :, 1] = (y * 5 + i * 3) % 256
    img[:, :, 2] = np.where(((x + i) // 8 + (y + camera * 3) // 8) % 2 == 0, 220, 30)
    return img


def encode_clip(encoder: str, frames: int, *, camera: int = 0, fps: int = 30, width: int = 64, height: int = 48,
                gop: int = 15, bframes: bool = True, first_frame: int = 0) -> Clip:
    """Encode `frames` frames into an in-memory MP4 with PyAV and return its packets. The encode runs in
    this process's encoding child (tests/isolated.py says why)."""
    return run_isolated(_encode_clip_here, encoder, frames, camera=camera, fps=fps, width=width, height=height,
                        gop=gop, bframes=bframes, first_frame=first_frame)


def _encode_clip_here(encoder: str, frames: int, *, camera: int, fps: int, width: int, height: int, gop: int,
                      bframes: bool, first_frame: int) -> Clip:
    """`encode_clip` in this process."""
    import av

    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream(encoder, rate=fps, options=_encoder_options(encoder, gop, bframes))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(_frame_image(first_frame + i, camera, width, height), format="rgb24")
            for p in stream.encode(frame):
                out.mux(p)
        for p in stream.encode(None):
            out.mux(p)
    restore_normal_scheduling()  # SVT-AV1 leaves this thread at real-time priority (tests/scheduling.py)
    data = buf.getvalue()
    with av.open(io.BytesIO(data)) as inp:
        st = inp.streams.video[0]
        packets = [(bytes(p), p.pts, p.dts, p.duration, p.is_keyframe) for p in inp.demux(st) if p.size]
        time_base = st.time_base
    if len(packets) != frames or not packets[0][4]:
        raise RuntimeError(f"{encoder}: expected {frames} packets starting on a keyframe, got {len(packets)}")
    frame_ticks = int(round(1 / (fps * time_base)))
    return Clip(packets, time_base, frame_ticks, frames, data)


class Mp4Writer:
    """One output MP4 built by stream copy of clips, pts/dts running on across appended clips."""

    def __init__(self, path: Path, template: Clip, faststart: bool) -> None:
        import av

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._template_in = av.open(io.BytesIO(template.template))
        self._out = av.open(str(path), "w", format="mp4", options={"movflags": "faststart"} if faststart else {})
        self._stream = self._out.add_stream_from_template(self._template_in.streams.video[0], opaque=True)
        self.ticks = 0      # where the next clip starts, in clip time_base ticks
        self.samples = 0
        self.nbytes = 0

    def append(self, clip: Clip) -> None:
        import av

        shift, stream, tb, mux = self.ticks, self._stream, clip.time_base, self._out.mux
        for payload, pts, dts, duration, key in clip.packets:
            p = av.Packet(payload)
            p.pts, p.dts, p.duration, p.is_keyframe = pts + shift, dts + shift, duration, key
            p.time_base = tb
            p.stream = stream
            mux(p)
        self.ticks += clip.ticks
        self.samples += clip.frames
        self.nbytes += clip.nbytes

    def close(self) -> None:
        self._out.close()
        self._template_in.close()


class _DataWriter:
    """A data file: one row group per episode written as it comes, or (`whole`) one row group for the whole
    file written at the end; `size` is its bytes so far (estimated from the rows held when `whole`)."""

    def __init__(self, path: Path, schema: pa.Schema, *, whole: bool) -> None:
        self._path, self._schema, self._tables = path, schema, [] if whole else None
        self._writer = None if whole else pq.ParquetWriter(path, schema, compression="snappy")
        self._held = 0

    @property
    def size(self) -> int:
        return self._path.stat().st_size if self._tables is None else self._held

    def write_table(self, table: pa.Table) -> None:
        if self._tables is None:
            self._writer.write_table(table)
        else:
            self._tables.append(table)
            self._held += table.nbytes

    def close(self) -> None:
        if self._tables is None:
            self._writer.close()
            return
        table = pa.concat_tables(self._tables)
        pq.write_table(table, self._path, compression="snappy", row_group_size=max(1, table.num_rows))


class SyntheticMp4Writer:
    """An MP4 with the sample table the same clips would give (sizes, keyframes, timing), written as a sparse
    file (mp4_factory.synthetic_mp4): the moov is real, the mdat zeros. For imports, which read only the
    moov, at LeRobot's sizes (hundreds of MB of video) in no time; a decoder would see garbage."""

    def __init__(self, path: Path, template: Clip, faststart: bool, sample_bytes: Optional[float] = None) -> None:
        self.path, self._template = path, template.template
        self._scale = sample_bytes / (template.nbytes / template.frames) if sample_bytes else 1.0
        self._sizes: list[np.ndarray] = []
        self._keys: list[np.ndarray] = []
        self.ticks = self.samples = self.nbytes = 0

    def append(self, clip: Clip) -> None:
        sizes = np.maximum(1, np.round(np.array([len(p[0]) for p in clip.packets]) * self._scale)).astype(np.int64)
        self._sizes.append(sizes)
        self._keys.append(np.array([p[4] for p in clip.packets], bool))
        self.ticks += clip.ticks
        self.samples += clip.frames
        self.nbytes += int(sizes.sum())

    def close(self) -> None:
        from tests.mp4_factory import synthetic_mp4
        synthetic_mp4(self.path, self._template, np.concatenate(self._sizes), keyframes=np.concatenate(self._keys))


# ------------------------------------------------------------------------------------------------
# File numbering
# ------------------------------------------------------------------------------------------------

def _next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """LeRobot's update_chunk_file_indices."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


def _stats(values: np.ndarray) -> dict:
    """LeRobot's per-episode stats of a (frames, ...) array, over the frames axis (lists of doubles)."""
    v = values.reshape(values.shape[0], -1).astype(np.float64)
    out = {"min": v.min(0), "max": v.max(0), "mean": v.mean(0), "std": v.std(0), "count": [values.shape[0]]}
    for name, q in zip(QUANTILES, np.quantile(v, _Q, axis=0)):
        out[name] = q
    return {k: (list(map(int, x)) if k == "count" else x.tolist()) for k, x in out.items()}


def _image_stats(camera: int, count: int) -> dict:
    base = [[[0.3 + 0.1 * c + 0.05 * camera]] for c in range(3)]
    out = {k: base for k in ("min", "max", "mean", "std")}
    out["count"] = [count]
    out.update({q: base for q in QUANTILES})
    return out


# ------------------------------------------------------------------------------------------------
# The dataset
# ------------------------------------------------------------------------------------------------

def make_dataset(root: Union[str, os.PathLike], *, episodes: int = 10, frames: Union[int, Sequence[int]] = 150,
                 cameras: int = 2, codec: str = "h264", fps: int = 30, width: int = 64, height: int = 48,
                 gop: int = 15, clip_frames: int = 30, bframes: bool = True,
                 episodes_per_meta_file: int = 50, episodes_per_data_file: Optional[int] = None,
                 data_file_mb: float = 100.0, episodes_per_mp4: Optional[int] = None,
                 samples_per_mp4: Optional[int] = None, video_file_mb: float = 200.0, faststart: bool = True,
                 state_dim: int = 14, action_dim: int = 14, tasks: Sequence[str] = ("pick the cube", "place the cube"),
                 chunks_size: int = 1000, stats: bool = True, seed: int = 0, overwrite: bool = False,
                 verbose: bool = False, synthetic_mp4s: bool = False, sample_bytes: Optional[float] = None,
                 data_row_groups: str = "episode", meta_row_group_size: Optional[int] = METADATA_BUFFER_SIZE) -> Path:
    """Write a LeRobot v3 dataset at `root` and return `root`.

    * `frames`: frames per episode (an int) or one length per episode.
    * data files roll over every `episodes_per_data_file` episodes, else when the file reaches
      `data_file_mb` (LeRobot's `data_files_size_in_mb`, default 100);
    * MP4s roll over every `episodes_per_mp4` episodes, else before an episode that would take the file
      past `samples_per_mp4` samples, else past `video_file_mb` (LeRobot's default 200 MB);
    * episodes files hold `episodes_per_meta_file` episodes each;
    * `synthetic_mp4s`: MP4s with the real sample tables but a sparse mdat (`SyntheticMp4Writer`), each
      sample `sample_bytes` on average (default: the encoded clip's sizes), so size-based rolling behaves
      as with real video;
    * `data_row_groups`: "episode" (one row group per episode, LeRobot's recording writer) or "file" (one
      row group per data file, as LeRobot's first v3 writer left a file it rewrote whole at each episode);
    * `meta_row_group_size`: rows per row group of the episodes files (LeRobot flushes every 10; None:
      pyarrow's default, one row group for files written at once, as conversion tools do).
    """
    if data_row_groups not in ("episode", "file"):
        raise ValueError(f"data_row_groups: 'episode' or 'file', not {data_row_groups!r}")
    t_start = time.perf_counter()
    root = Path(root)
    if root.exists():
        if not overwrite and any(root.iterdir()):
            raise FileExistsError(f"{root} exists and is not empty (overwrite=True replaces it)")
        shutil.rmtree(root)
    lengths = [int(frames)] * episodes if isinstance(frames, int) else [int(n) for n in frames]
    if len(lengths) != episodes:
        raise ValueError(f"{len(lengths)} lengths for {episodes} episodes")
    if min(lengths, default=1) < 1:
        raise ValueError("episodes need at least one frame")
    encoder, codec_label = CODECS[codec]
    camera_keys = ["observation.images.top", "observation.images.wrist", "observation.images.side",
                   "observation.images.front"][:cameras] + [f"observation.images.cam{i}" for i in range(4, cameras)]
    user_features: dict = {}
    if state_dim:
        user_features["observation.state"] = {"dtype": "float32", "shape": [state_dim],
                                              "names": [f"joint_{i}" for i in range(state_dim)]}
    if action_dim:
        user_features["action"] = {"dtype": "float32", "shape": [action_dim],
                                   "names": [f"joint_{i}" for i in range(action_dim)]}
    for key in camera_keys:
        user_features[key] = {
            "dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channels"],
            "info": {"video.height": height, "video.width": width, "video.codec": codec_label,
                     "video.pix_fmt": "yuv420p", "video.fps": fps, "video.channels": 3, "has_audio": False,
                     "video.g": gop, "video.crf": 30 if codec == "av1" else 28,
                     "video.preset": 12 if codec == "av1" else None, "video.fast_decode": 0,
                     "video.video_backend": "pyav", "video.extra_options": {}, "is_depth_map": False}}
    features = {**user_features, **DEFAULT_FEATURES}

    # --- clips: one base clip per camera, one tail clip per camera and distinct remainder
    clips: dict[tuple[int, int], Clip] = {}

    def clip(camera: int, n: int) -> Clip:
        if (camera, n) not in clips:
            c = encode_clip(encoder, n, camera=camera, fps=fps, width=width, height=height, gop=gop, bframes=bframes)
            if n != clip_frames:
                # A short clip may come out with a smaller decode delay (pts - dts of its first packet) than
                # the base clip: give it the base clip's delay so dts stays increasing across clips.
                base = clip(camera, clip_frames)
                lag = (base.packets[0][1] - base.packets[0][2]) - (c.packets[0][1] - c.packets[0][2])
                if lag < 0:
                    raise ValueError(f"a {n}-frame clip has a larger decode delay than the base clip; "
                                     "use bframes=False or other lengths")
                c.packets = [(b, pts, dts - lag, d, k) for b, pts, dts, d, k in c.packets]
            clips[(camera, n)] = c
        return clips[(camera, n)]

    # --- videos
    n_total = int(sum(lengths))
    video_cols: dict[str, dict[str, list]] = {}
    video_files: dict[str, list[Path]] = {}
    for cam, key in enumerate(camera_keys):
        cols = {"chunk_index": [], "file_index": [], "from_timestamp": [], "to_timestamp": []}
        chunk, file, writer, ts, n_in_file = 0, 0, None, 0.0, 0
        files: list[Path] = []
        for ep, length in enumerate(lengths):
            reps, tail = divmod(length, clip_frames)
            parts = [clip(cam, clip_frames)] * reps + ([clip(cam, tail)] if tail else [])
            if writer is not None:
                nbytes = sum(c.nbytes for c in parts)
                full = (n_in_file >= episodes_per_mp4 if episodes_per_mp4 else
                        writer.samples + length > samples_per_mp4 if samples_per_mp4 else
                        writer.nbytes + nbytes > video_file_mb * 1e6)
                if full:
                    writer.close()
                    chunk, file = _next_file(chunk, file, chunks_size)
                    writer = None
            if writer is None:
                path = root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
                writer = (SyntheticMp4Writer(path, parts[0], faststart, sample_bytes) if synthetic_mp4s else
                          Mp4Writer(path, parts[0], faststart))
                path.parent.mkdir(parents=True, exist_ok=True)
                files.append(path)
                ts, n_in_file = 0.0, 0
            for c in parts:
                writer.append(c)
            cols["chunk_index"].append(chunk)
            cols["file_index"].append(file)
            cols["from_timestamp"].append(ts)
            ts = ts + length / fps  # LeRobot: to = from + the episode MP4's duration (a running float sum)
            cols["to_timestamp"].append(ts)
            n_in_file += 1
        if writer is not None:
            writer.close()
        video_cols[key], video_files[key] = cols, files
    t_videos = time.perf_counter()

    # --- data files
    rng = np.random.default_rng(seed)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    hf_features = {name: ({"feature": {"dtype": f["dtype"], "_type": "Value"}, "length": f["shape"][0],
                           "_type": "Sequence"} if f["shape"] != [1] else {"dtype": f["dtype"], "_type": "Value"})
                   for name, f in features.items() if f["dtype"] != "video"}
    schema = pa.schema(
        [(name, pa.list_(pa.float32(), f["shape"][0])) for name, f in user_features.items() if f["dtype"] != "video"]
        + [("timestamp", pa.float32()), ("frame_index", pa.int64()), ("episode_index", pa.int64()),
           ("index", pa.int64()), ("task_index", pa.int64())],
        metadata={"huggingface": json.dumps({"info": {"features": hf_features}})})
    data_cols = {"chunk_index": [], "file_index": []}
    ep_stats: list[dict] = []
    chunk, file, writer, path, n_in_file = 0, 0, None, None, 0
    data_files: list[Path] = []
    for ep, length in enumerate(lengths):
        if writer is not None:
            full = (n_in_file >= episodes_per_data_file if episodes_per_data_file else
                    writer.size >= data_file_mb * 1e6)
            if full:
                writer.close()
                chunk, file = _next_file(chunk, file, chunks_size)
                writer = None
        if writer is None:
            path = root / DATA_PATH.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = _DataWriter(path, schema, whole=data_row_groups == "file")
            data_files.append(path)
            n_in_file = 0
        columns, st = [], {}
        for name, f in user_features.items():
            if f["dtype"] == "video":
                continue
            dim = f["shape"][0]
            values = rng.standard_normal((length, dim), dtype=np.float32)
            columns.append(pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), dim))
            if stats:
                st[name] = _stats(values)
        frame_index = np.arange(length, dtype=np.int64)
        task = ep % len(tasks)
        defaults = {"timestamp": (frame_index / fps).astype(np.float32), "frame_index": frame_index,
                    "episode_index": np.full(length, ep, np.int64),
                    "index": np.arange(starts[ep], starts[ep + 1], dtype=np.int64),
                    "task_index": np.full(length, task, np.int64)}
        columns += [pa.array(v) for v in defaults.values()]
        writer.write_table(pa.Table.from_arrays(columns, schema=schema))
        if stats:
            for cam, key in enumerate(camera_keys):
                st[key] = _image_stats(cam, length)
            for name, v in defaults.items():
                st[name] = _stats(v[:, None])
        ep_stats.append(st)
        data_cols["chunk_index"].append(chunk)
        data_cols["file_index"].append(file)
        n_in_file += 1
    if writer is not None:
        writer.close()
    t_data = time.perf_counter()

    # --- episodes metadata
    meta_chunk, meta_file = 0, 0
    stat_names = ["min", "max", "mean", "std", "count", *QUANTILES]
    for first in range(0, episodes, episodes_per_meta_file):
        rows = range(first, min(first + episodes_per_meta_file, episodes))
        cols: dict[str, object] = {
            "episode_index": pa.array(list(rows), pa.int64()),
            "tasks": pa.array([[tasks[ep % len(tasks)]] for ep in rows], pa.list_(pa.string())),
            "length": pa.array([lengths[ep] for ep in rows], pa.int64()),
            "data/chunk_index": pa.array([data_cols["chunk_index"][ep] for ep in rows], pa.int64()),
            "data/file_index": pa.array([data_cols["file_index"][ep] for ep in rows], pa.int64()),
            "dataset_from_index": pa.array([int(starts[ep]) for ep in rows], pa.int64()),
            "dataset_to_index": pa.array([int(starts[ep + 1]) for ep in rows], pa.int64()),
        }
        for key in camera_keys:
            vc = video_cols[key]
            for col, typ in (("chunk_index", pa.int64()), ("file_index", pa.int64()),
                             ("from_timestamp", pa.float64()), ("to_timestamp", pa.float64())):
                cols[f"videos/{key}/{col}"] = pa.array([vc[col][ep] for ep in rows], typ)
        if stats:
            for name in ep_stats[0]:
                for s in stat_names:
                    cols[f"stats/{name}/{s}"] = pa.array([ep_stats[ep][name][s] for ep in rows])
        cols["meta/episodes/chunk_index"] = pa.array([meta_chunk] * len(rows), pa.int64())
        cols["meta/episodes/file_index"] = pa.array([meta_file] * len(rows), pa.int64())
        path = root / EPISODES_PATH.format(chunk_index=meta_chunk, file_index=meta_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols), path, row_group_size=meta_row_group_size)
        meta_chunk, meta_file = _next_file(meta_chunk, meta_file, chunks_size)

    # --- info, tasks, stats
    info = {
        "codebase_version": "v3.0", "fps": fps, "features": features, "total_episodes": episodes,
        "total_frames": n_total, "total_tasks": len(tasks), "chunks_size": chunks_size,
        "data_files_size_in_mb": data_file_mb, "video_files_size_in_mb": video_file_mb,
        "data_path": DATA_PATH, "video_path": VIDEO_PATH if camera_keys else None, "robot_type": "synthetic",
        "splits": {"train": f"0:{episodes}"},
    }
    (root / "meta").mkdir(parents=True, exist_ok=True)
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    pq.write_table(pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(list(tasks))}),
                   root / "meta" / "tasks.parquet")
    if stats and ep_stats:
        (root / "meta" / "stats.json").write_text(json.dumps(ep_stats[0], indent=2))
    if verbose:
        mp4s = sum(len(v) for v in video_files.values())
        print(f"synth: {episodes} episodes, {n_total} frames x {cameras} camera(s) ({codec}); "
              f"{len(data_files)} data file(s), {mp4s} MP4(s), {math.ceil(episodes / episodes_per_meta_file)} "
              f"episodes file(s); videos {t_videos - t_start:.1f}s, data {t_data - t_videos:.1f}s, "
              f"total {time.perf_counter() - t_start:.1f}s -> {root}", file=sys.stderr)
    return root


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("root", help="folder to write the dataset into")
    ap.add_argument("--episodes", type=int, default=2000, help="episodes in the dataset")
    ap.add_argument("--frames", type=int, default=150, help="frames per episode")
    ap.add_argument("--cameras", type=int, default=2, help="cameras (one MP4 stream each)")
    ap.add_argument("--codec", choices=sorted(CODECS), default="h264", help="video codec")
    ap.add_argument("--fps", type=int, default=30, help="frames per second")
    ap.add_argument("--resolution", default="64x48", help="WIDTHxHEIGHT")
    ap.add_argument("--gop", type=int, default=15, help="keyframe interval (closed GOPs)")
    ap.add_argument("--clip-frames", type=int, default=30, help="frames of the base clip that is repeated")
    ap.add_argument("--no-bframes", action="store_true")
    ap.add_argument("--episodes-per-meta-file", type=int, default=50, help="episodes per episodes file")
    ap.add_argument("--episodes-per-data-file", type=int, default=None,
                    help="episodes per data file (None: roll over by --data-file-mb)")
    ap.add_argument("--data-file-mb", type=float, default=100.0,
                    help="data file size that starts a new file (LeRobot's default)")
    ap.add_argument("--episodes-per-mp4", type=int, default=None,
                    help="episodes per MP4 (None: roll over by samples or size)")
    ap.add_argument("--samples-per-mp4", type=int, default=None, help="samples per MP4 before a new one")
    ap.add_argument("--video-file-mb", type=float, default=200.0,
                    help="MP4 size that starts a new file (LeRobot's default)")
    ap.add_argument("--moov-at-end", action="store_true", help="no faststart: moov after mdat")
    ap.add_argument("--state-dim", type=int, default=14, help="values of observation.state")
    ap.add_argument("--action-dim", type=int, default=14, help="values of action")
    ap.add_argument("--chunks-size", type=int, default=1000, help="files per chunk folder")
    ap.add_argument("--no-stats", action="store_true")
    ap.add_argument("--seed", type=int, default=0, help="random seed of the frame values")
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args(argv)
    width, height = (int(x) for x in a.resolution.lower().split("x"))
    make_dataset(a.root, episodes=a.episodes, frames=a.frames, cameras=a.cameras, codec=a.codec, fps=a.fps,
                 width=width, height=height, gop=a.gop, clip_frames=a.clip_frames, bframes=not a.no_bframes,
                 episodes_per_meta_file=a.episodes_per_meta_file, episodes_per_data_file=a.episodes_per_data_file,
                 data_file_mb=a.data_file_mb, episodes_per_mp4=a.episodes_per_mp4, samples_per_mp4=a.samples_per_mp4,
                 video_file_mb=a.video_file_mb, faststart=not a.moov_at_end, state_dim=a.state_dim,
                 action_dim=a.action_dim, chunks_size=a.chunks_size, stats=not a.no_stats, seed=a.seed,
                 overwrite=a.overwrite, verbose=True)


if __name__ == "__main__":
    main()
