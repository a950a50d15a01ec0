"""Benchmark: scheduled imports of a growing dataset: how fast a run decides what to import, and (once
the pipeline imports only changed episodes files) what a re-import costs.

    python tests/bench/bench_incremental.py                    # plan on 100,000 episodes (metadata only)
    python tests/bench/bench_incremental.py --episodes 20000 --episodes-per-meta-file 1000

The planning figures need no frames: the dataset is generated as LeRobot lays it out, but only `meta/` is
real; data files and MP4s are sparse files of the right sizes (nothing under them is read by a plan).
Printed, for a first import (nothing to compare with), after a whole import (everything unchanged: the
episodes files are not even read, their references come from the manifest), and after appending
episodes files and touching one data file:
  * wall time of one listing, of `scan_dataset` and of the whole `plan_dataset`;
  * episodes files to import / unchanged / remove, data bytes and MP4s to read.
Target: a plan of 100,000 episodes answers in seconds.

The re-import figures (`--reimport [--repeat N]`) time, on the 2,000-episode synthetic dataset with real
frames (H.264, 2 cameras): the first import, a no-change run (Beam's fixed start-up: the dataset is
skipped after one listing), and a run after appending 2 new episodes files (5% more frames), with the data
bytes, MP4s and media_index/ shards each one reads or writes. Targets: the append run reads <= 7%
of the full import's data bytes, and its wall time is <= Beam's fixed start-up + 10% of the full import's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, when run as a script
from tests.dataset_factory import DATA_PATH, DEFAULTS, EPISODES_PATH, VIDEO_PATH  # noqa: E402

#: Bytes of a data file / an MP4 per frame, roughly what the 2,000-episode synthetic dataset holds.
DATA_BYTES_PER_FRAME = 150
VIDEO_BYTES_PER_FRAME = 400


def write_metadata_dataset(root: Path, *, episodes: int, frames: int = 150, cameras: int = 2,
                           episodes_per_meta_file: int = 50, episodes_per_data_file: int = 1000,
                           episodes_per_mp4: int = 100, first_episode: int = 0, fps: int = 30) -> Path:
    """A LeRobot v3 dataset whose `meta/` is real and whose data files and MP4s are sparse files.

    With `first_episode` > 0 the episodes are appended to a dataset written by an earlier call (new
    episodes files, data files and MP4s after the existing ones; info.json rewritten), as a recording
    session appends them. Data/MP4/episodes files roll over at the `episodes_per_*` counts.

    Args:
        root: dataset root (created).
        episodes: episodes to write (from `first_episode` on).
        frames: frames per episode.
        cameras: video features (`observation.images.cam0`, ...), each with its own MP4s.
    Returns:
        root.
    """
    root = Path(root)
    keys = [f"observation.images.cam{i}" for i in range(cameras)]
    total = first_episode + episodes
    _write_info(root, keys, total, frames, fps)
    end = first_episode + episodes
    if first_episode % episodes_per_meta_file:
        raise ValueError("append whole episodes files: first_episode must be a multiple of episodes_per_meta_file")
    for first in range(first_episode, end, episodes_per_meta_file):
        ep = list(range(first, min(first + episodes_per_meta_file, end)))
        _write_episodes_file(root, ep, frames, fps, keys, episodes_per_meta_file, episodes_per_data_file,
                             episodes_per_mp4)
    _write_sparse(root, range(first_episode, end), frames, keys, episodes_per_data_file, episodes_per_mp4)
    return root


def _write_info(root: Path, keys: Sequence[str], total: int, frames: int, fps: int) -> None:
    features = {
        "observation.state": {"dtype": "float32", "shape": [14], "names": None},
        "action": {"dtype": "float32", "shape": [14], "names": None},
        **{k: {"dtype": "video", "shape": [48, 64, 3], "names": ["height", "width", "channels"],
               "info": {"video.codec": "h264", "video.fps": fps}} for k in keys},
        **DEFAULTS,
    }
    info = {"codebase_version": "v3.0", "fps": fps, "features": features, "total_episodes": total,
            "total_frames": total * frames, "chunks_size": 1000, "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if keys else None, "robot_type": "synthetic"}
    (root / "meta").mkdir(parents=True, exist_ok=True)
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))


def _location(ep: int, per_file: int, chunks_size: int = 1000) -> tuple[int, int]:
    n = ep // per_file
    return n // chunks_size, n % chunks_size


def _write_episodes_file(root: Path, eps: list[int], frames: int, fps: int, keys: Sequence[str],
                         per_meta: int, per_data: int, per_mp4: int) -> None:
    n = len(eps)
    cols: dict[str, pa.Array] = {
        "episode_index": pa.array(eps, pa.int64()),
        "tasks": pa.array([["pick the cube"]] * n, pa.list_(pa.string())),
        "length": pa.array([frames] * n, pa.int64()),
        "data/chunk_index": pa.array([_location(e, per_data)[0] for e in eps], pa.int64()),
        "data/file_index": pa.array([_location(e, per_data)[1] for e in eps], pa.int64()),
        "dataset_from_index": pa.array([e * frames for e in eps], pa.int64()),
        "dataset_to_index": pa.array([(e + 1) * frames for e in eps], pa.int64()),
    }
    for key in keys:
        cols[f"videos/{key}/chunk_index"] = pa.array([_location(e, per_mp4)[0] for e in eps], pa.int64())
        cols[f"videos/{key}/file_index"] = pa.array([_location(e, per_mp4)[1] for e in eps], pa.int64())
        cols[f"videos/{key}/from_timestamp"] = pa.array([(e % per_mp4) * frames / fps for e in eps], pa.float64())
        cols[f"videos/{key}/to_timestamp"] = pa.array([(e % per_mp4 + 1) * frames / fps for e in eps], pa.float64())
    chunk, file = _location(eps[0], per_meta)
    cols["meta/episodes/chunk_index"] = pa.array([chunk] * n, pa.int64())
    cols["meta/episodes/file_index"] = pa.array([file] * n, pa.int64())
    path = root / EPISODES_PATH.format(chunk_index=chunk, file_index=file)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path, row_group_size=10)


def _write_sparse(root: Path, eps: range, frames: int, keys: Sequence[str], per_data: int, per_mp4: int) -> None:
    """Sparse data files and MP4s sized by the frames they hold (a file appended to grows)."""
    sizes: dict[Path, int] = {}
    for ep in eps:
        chunk, file = _location(ep, per_data)
        path = root / DATA_PATH.format(chunk_index=chunk, file_index=file)
        sizes[path] = sizes.get(path, path.stat().st_size if path.exists() else 0) + frames * DATA_BYTES_PER_FRAME
        for key in keys:
            chunk, file = _location(ep, per_mp4)
            path = root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
            sizes[path] = sizes.get(path, path.stat().st_size if path.exists() else 0) + frames * VIDEO_BYTES_PER_FRAME
    for path, size in sizes.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            f.truncate(size)


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def bench_plan(root: Path, out: Path, episodes: int, per_meta: int) -> None:
    """Plan a first import, an up-to-date output and a grown dataset; print the figures."""
    from pipelines import plan
    from transforms.lerobot import sources

    options = plan.output_options(plan.PlanSettings())
    listing, t_list = _timed(lambda: sources.list_sources(str(root)))
    print(f"listing: {len(listing.files)} files in {t_list:.2f} s")
    first, t_first = _timed(lambda: plan.plan_dataset(str(root), str(out), options))
    _report("first import (nothing recorded)", first, t_first)
    # An output whose manifest records every episodes file as the last import left it.
    _fake_import(out, first)
    same, t_same = _timed(lambda: plan.plan_dataset(str(root), str(out), options))
    _report("no change", same, t_same)
    # Two new episodes files (LeRobot appends) and one data file touched.
    write_metadata_dataset(root, episodes=2 * per_meta, first_episode=episodes, episodes_per_meta_file=per_meta)
    data = root / DATA_PATH.format(chunk_index=0, file_index=0)
    os.utime(data, ns=(data.stat().st_atime_ns, data.stat().st_mtime_ns + 10**9))
    grown, t_grown = _timed(lambda: plan.plan_dataset(str(root), str(out), options))
    _report("2 episodes files appended, data file 0 touched", grown, t_grown)


def _fake_import(out: Path, first) -> None:
    """A manifest as an incremental import of `first` would leave it, and its parts (empty: only their presence
    is checked when no size is recorded)."""
    from transforms.output.paths import MEDIA_INDEX_LAYOUT
    files = {}
    for f in first.files:
        src = f.sources
        files[f.episodes_file] = {"status": "imported", "parts": [f"episodes/{f.episodes_file[14:]}"],
                                  "episodes": f.episodes, "bytes": int(f.data_bytes * 0.9), "data_bytes": f.data_bytes,
                                  **src.to_manifest()}
    out.mkdir(parents=True, exist_ok=True)
    doc = {"dataset": first.dataset, "options": first.options, "episodes_files": files, "status": "imported",
           "video_versions": first.video_versions, "media_index_layout": MEDIA_INDEX_LAYOUT, "media_index_files": []}
    (out / "manifest.json").write_text(json.dumps(doc))
    for entry in files.values():
        for part in entry["parts"]:
            (out / part).parent.mkdir(parents=True, exist_ok=True)
            (out / part).touch()


def _report(label: str, p, seconds: float) -> None:
    c = p.counts
    print(f"{label}: plan in {seconds:.2f} s — {c['import']} to import, {c['unchanged']} unchanged, "
          f"{c['removed']} to remove; {p.parts} parts, {p.data_bytes / 1e6:.1f} MB of data, "
          f"{len(p.mp4s_to_read)} MP4s to read, ~{p.estimated_output_bytes / 1e6:.1f} MB out")


# ------------------------------------------------------------------------------------------------
# Re-import (needs the pipeline's incremental import; until then every run re-imports everything)
# ------------------------------------------------------------------------------------------------

def split_for_append(full: Path, before: Path, *, new_files: int = 2) -> list[Path]:
    """Copy `full` to `before` minus its last `new_files` episodes files and the data files and MP4s only
    they use; returns the held-back files (relative), which `append` puts back as a recording session
    appends them. `full` must roll data files and MP4s at episodes-file boundaries."""
    from transforms.lerobot import sources

    shutil.copytree(full, before)
    scanned = sources.scan_dataset(str(full), {"one_part": False, "data_span_limit": 1 << 62,
                                               "inline_index": False, "skip_videos": False})
    held, kept = scanned.files[-new_files:], scanned.files[:-new_files]
    used_before = {f for src in kept for f in src.data_files + src.video_files}
    back = [Path(src.episodes_file) for src in held]
    back += sorted({Path(f) for src in held for f in src.data_files + src.video_files if f not in used_before})
    for rel in back:
        (before / rel).unlink()
    return back


def append(full: Path, before: Path, files: Sequence[Path]) -> None:
    for rel in files:
        (before / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(full / rel, before / rel)
    shutil.copy2(full / "meta" / "info.json", before / "meta" / "info.json")  # new totals


def timed_import(root: Path, out: Path) -> tuple[float, dict[str, int]]:
    """Wall time of one import (a fresh process, Beam's start-up included) and its metrics."""
    cmd = [sys.executable, "-m", "pipelines.import_lerobot", "--dataset", str(root), "--output", str(out),
           "--runner", "FnApiRunner"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    wall = time.perf_counter() - start
    found = re.search(r"^metrics: (.*)$", proc.stdout, re.M)
    metrics = {k: int(v) for k, v in (kv.split("=") for kv in found.group(1).split(", "))} if found else {}
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    return wall, metrics


def bench_reimport(workdir: Path, episodes: int, per_meta: int, repeat: int = 1) -> None:
    """First import, no-change run, and the run after appending 2 episodes files; figures and targets.

    Each run is timed `repeat` times (the output restored to its state before the run each time) and the
    fastest kept: on a shared machine the slower ones measure the neighbours."""
    from tests.bench.synth_dataset import make_dataset

    full, before, out = workdir / "full", workdir / "dataset", workdir / "out"
    make_dataset(full, episodes=episodes + 2 * per_meta, frames=150, cameras=2, codec="h264",
                 episodes_per_meta_file=per_meta, episodes_per_data_file=2 * per_meta,
                 episodes_per_mp4=2 * per_meta, verbose=True)
    held = split_for_append(full, before)
    one = one_episodes_file(full, workdir / "one")
    t_one, m_one = _fastest(repeat, one, workdir / "out-one", None)
    t_full, m_full = _fastest(repeat, before, out, None)
    t_same, m_same = _fastest(repeat, before, out, workdir / "out-imported")
    append(full, before, held)
    t_new, m_new = _fastest(repeat, before, out, workdir / "out-imported")
    read_full = max(m_full.get("data_bytes_read", 0), 1)
    for label, t, m in (("first import", t_full, m_full), ("no change (Beam's fixed start-up)", t_same, m_same),
                        ("2 episodes files appended", t_new, m_new), ("one episodes file, first import", t_one, m_one)):
        print(f"{label}: {t:.2f} s wall, {m.get('data_bytes_read', 0) / 1e6:.1f} MB of data read "
              f"({m.get('data_bytes_read', 0) / read_full:.1%} of the first import's), "
              f"{m.get('parts_written', 0)} parts written; {m.get('mp4_files', 0)} MP4s read "
              f"({m.get('mp4_bytes_read', 0) / 1e3:.0f} kB), {m.get('media_index_rows_carried', 0)} media_index rows "
              f"carried, {m.get('media_index_shards_written', 0)} shards written")
    # A run with nothing to do (the dataset skipped after one listing) is Beam's fixed start-up: the
    # process, the pipeline's construction and the runner's set-up and tear-down.
    # An import of one episodes file adds what every run that writes anything pays once: each step's
    # bundles on the runner, the output's manifest and errors.jsonl (its data is 1/40 of the first import's).
    startup = t_same
    print(f"Beam's fixed start-up: {startup:.2f} s (the no-change run); an import that writes one episodes "
          f"file: {t_one:.2f} s")
    print(f"targets: append reads {m_new.get('data_bytes_read', 0) / read_full:.1%} of the data bytes (<= 7%); "
          f"append wall {t_new:.2f} s vs start-up + 10% of the first import = {startup + 0.1 * t_full:.2f} s "
          f"(one-file import + 10% = {t_one + 0.1 * t_full:.2f} s)")


def one_episodes_file(full: Path, root: Path) -> Path:
    """`full`'s info.json, first episodes file and the data files and MP4s it uses, as a dataset at `root`."""
    from transforms.lerobot import sources

    scanned = sources.scan_dataset(str(full), {"one_part": False, "data_span_limit": 1 << 62,
                                               "inline_index": False, "skip_videos": False})
    first = scanned.files[0]
    for rel in ("meta/info.json", first.episodes_file, *first.data_files, *first.video_files):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(full / rel, root / rel)
    return root


def _fastest(repeat: int, root: Path, out: Path, snapshot: Optional[Path]) -> tuple[float, dict[str, int]]:
    """The fastest of `repeat` imports of `root` into `out`, each starting from the same output: none (a
    first import) or `snapshot`, a copy of the output taken before the first of them (made here)."""
    if snapshot is not None:
        shutil.rmtree(snapshot, ignore_errors=True)
        shutil.copytree(out, snapshot)
    best: Optional[tuple[float, dict[str, int]]] = None
    for _ in range(max(1, repeat)):
        shutil.rmtree(out, ignore_errors=True)
        if snapshot is not None:
            shutil.copytree(snapshot, out)
        wall, metrics = timed_import(root, out)
        if best is None or wall < best[0]:
            best = (wall, metrics)
    return best


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=None,
                    help="episodes (default 100,000 for the plan, 2,000 for --reimport)")
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--episodes-per-meta-file", type=int, default=50)
    ap.add_argument("--reimport", action="store_true", help="time real re-imports instead of plans")
    ap.add_argument("--workdir", default=None, help="where to generate (default: a temporary folder)")
    ap.add_argument("--repeat", type=int, default=1, help="time each re-import run this many times, keep the fastest")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
        if a.reimport:
            bench_reimport(Path(tmp), a.episodes or 2000, a.episodes_per_meta_file, a.repeat)
            return
        episodes = a.episodes or 100_000
        root, out = Path(tmp) / "dataset", Path(tmp) / "out"
        _, t_gen = _timed(lambda: write_metadata_dataset(root, episodes=episodes, frames=a.frames,
                                                         episodes_per_meta_file=a.episodes_per_meta_file))
        n_files = -(-episodes // a.episodes_per_meta_file)
        print(f"generated {episodes} episodes x {a.frames} frames, {n_files} episodes files "
              f"(metadata only) in {t_gen:.1f} s")
        bench_plan(root, out, episodes, a.episodes_per_meta_file)


if __name__ == "__main__":
    main()
