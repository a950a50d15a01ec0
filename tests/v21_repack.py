"""Repack a LeRobot v3.0 dataset into LeRobot's v2.1 layout, keeping every frame value and MP4 sample.

    python tests/v21_repack.py SRC DEST [--version v2.1] [--chunks-size N] [--moov start|end|alternate]

or `repack_v21(src, dest)` from Python. What it writes is what LeRobot's v2.1 writer lays out:

* `meta/info.json`: the source's, with `codebase_version` v2.1, LeRobot's v2.1 templates
  (`data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet`,
  `videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4`), `total_chunks`,
  `total_videos`, and without v3.0's file-size keys;
* `meta/episodes.jsonl` (`episode_index`, `tasks`, `length`, in episode order) and `meta/tasks.jsonl`
  (`task_index`, `task`: row k of tasks.parquet is task_index k); `episodes_stats.jsonl` is not written
  (the import does not need it);
* one data file per episode: the episode's rows of its v3.0 data file, sliced by `index`, with the
  file's schema and its metadata (the huggingface features) kept;
* one MP4 per episode and camera, cut out of the v3.0 file **without re-encoding**: the packets whose
  presentation time lies in [from_timestamp, to_timestamp) are stream-copied with their times moved
  to start at 0. LeRobot encodes each episode on its own and stream-copies it into the v3.0 file, so
  every episode starts on a keyframe and its samples are the bytes it was encoded to; an episode that
  does not start on a keyframe (a file this tool cannot cut without decoding) is refused, not re-encoded.
  moov at the start (faststart), at the end, or alternating between episodes (`--moov`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from fractions import Fraction
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"


def _episodes(src: Path) -> list[dict]:
    files = sorted((src / "meta" / "episodes").glob("*/*.parquet"))
    rows = []
    for f in files:
        table = pq.read_table(f)
        keep = [c for c in table.column_names if not c.startswith("stats/")]
        rows += table.select(keep).to_pylist()
    return sorted(rows, key=lambda r: r["episode_index"])


def _tasks(src: Path) -> list[str]:
    table = pq.read_table(src / "meta" / "tasks.parquet")
    meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}") or b"{}")
    column = next((c for c in meta.get("index_columns", []) if isinstance(c, str)), "task")
    return [str(t) for t in table.column(column).to_pylist()]


def cut_mp4(src: Union[str, Path], start: float, end: float, dest: Union[str, Path], *, faststart: bool = True) -> int:
    """Stream-copy the samples of `src` presented in [start, end) s into `dest`, times moved to start at 0.

    Returns the number of samples copied. Raises ValueError when the first sample (in decode order) is
    not a keyframe: the cut would need decoding."""
    import av
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(src)) as inp:
        stream = inp.streams.video[0]
        tb: Fraction = stream.time_base
        rate = stream.average_rate or stream.guessed_rate
        half = tb and rate and Fraction(1, 2) / Fraction(rate) / tb  # half a frame in stream ticks
        lo = Fraction(start) / tb - (half or 0)
        hi = Fraction(end) / tb - (half or 0)
        packets = [p for p in inp.demux(stream) if p.pts is not None and p.size and lo <= p.pts < hi]
        if not packets:
            raise ValueError(f"{src}: no sample presented in [{start}, {end}) s")
        if not packets[0].is_keyframe:
            raise ValueError(f"{src}: the episode at {start} s does not start on a keyframe; it cannot be cut "
                             "without re-encoding")
        shift = min(p.pts for p in packets)
        options = {"movflags": "faststart"} if faststart else {}
        with av.open(str(dest), "w", format="mp4", options=options) as out:
            ostream = out.add_stream_from_template(stream, opaque=True)
            for p in packets:
                p.pts -= shift
                p.dts = p.dts - shift if p.dts is not None else None
                p.stream = ostream
                out.mux(p)
    return len(packets)


def repack_v21(src: Union[str, Path], dest: Union[str, Path], *, version: str = "v2.1",
               chunks_size: Optional[int] = None, moov: str = "alternate") -> Path:
    """Write `src` (a LeRobot v3.0 dataset) to `dest` in v2.x layout; returns `dest`."""
    src, dest = Path(src), Path(dest)
    info = json.loads((src / "meta" / "info.json").read_text())
    chunks = int(chunks_size or info.get("chunks_size") or 1000)
    cameras = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    episodes = _episodes(src)
    out = dict(info)
    for key in ("data_files_size_in_mb", "video_files_size_in_mb"):
        out.pop(key, None)
    n_chunks = (max(e["episode_index"] for e in episodes) // chunks + 1) if episodes else 0
    out.update(codebase_version=version, chunks_size=chunks, data_path=V21_DATA_PATH, total_chunks=n_chunks,
               total_videos=len(cameras) * len(episodes), video_path=V21_VIDEO_PATH if cameras else None)
    (dest / "meta").mkdir(parents=True, exist_ok=True)
    (dest / "meta" / "info.json").write_text(json.dumps(out, indent=4))
    (dest / "meta" / "episodes.jsonl").write_text("".join(
        json.dumps({"episode_index": e["episode_index"], "tasks": list(e["tasks"]), "length": e["length"]}) + "\n"
        for e in episodes))
    (dest / "meta" / "tasks.jsonl").write_text("".join(
        json.dumps({"task_index": i, "task": t}) + "\n" for i, t in enumerate(_tasks(src))))
    data_cache: dict[str, pa.Table] = {}
    for n, e in enumerate(episodes):
        ep, chunk = e["episode_index"], e["episode_index"] // chunks
        rel = info["data_path"].format(chunk_index=e["data/chunk_index"], file_index=e["data/file_index"])
        if rel not in data_cache:
            data_cache.clear()
            data_cache[rel] = pq.read_table(src / rel)
        table = data_cache[rel]
        index = table.column("index").to_numpy()
        lo = int(np.searchsorted(index, e["dataset_from_index"]))
        part = table.slice(lo, e["dataset_to_index"] - e["dataset_from_index"])
        assert part.num_rows == e["length"] and pc.all(pc.equal(part.column("episode_index"), ep)).as_py()
        target = dest / V21_DATA_PATH.format(episode_chunk=chunk, episode_index=ep)
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, target)
        for camera in cameras:
            mp4 = src / info["video_path"].format(video_key=camera, chunk_index=e[f"videos/{camera}/chunk_index"],
                                                  file_index=e[f"videos/{camera}/file_index"])
            faststart = moov == "start" or (moov == "alternate" and n % 2 == 0)
            cut_mp4(mp4, e[f"videos/{camera}/from_timestamp"], e[f"videos/{camera}/to_timestamp"],
                    dest / V21_VIDEO_PATH.format(episode_chunk=chunk, video_key=camera, episode_index=ep),
                    faststart=faststart)
    if (src / "meta" / "stats.json").exists():
        shutil.copy(src / "meta" / "stats.json", dest / "meta" / "stats.json")
    return dest


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("src")
    parser.add_argument("dest")
    parser.add_argument("--version", default="v2.1", choices=["v2.0", "v2.1"])
    parser.add_argument("--chunks-size", type=int)
    parser.add_argument("--moov", default="alternate", choices=["start", "end", "alternate"])
    args = parser.parse_args(argv)
    repack_v21(args.src, args.dest, version=args.version, chunks_size=args.chunks_size, moov=args.moov)
    print(f"wrote {args.dest}", file=sys.stderr)


if __name__ == "__main__":
    main()
