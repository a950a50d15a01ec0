"""Rendered samples per second for the richest recipe (subtask_mem_vqa_speech), one process.

Generates, in memory, a dataset shaped like LeRobot's annotation writer output: per episode a
persistent list (task_aug x3, subtask/plan/memory changes) broadcast to every frame, VQA pairs on
two cameras on a few frames, an interjection + `say` speech atom. The columns are built in the
writer's on-disk form (float64 timestamps, null-typed camera/tool_calls, struct tool calls) and
normalised first, so the normalisation rate is reported too.

    /work/venv/bin/python tests/bench/bench_language.py [--frames 100000] [--mode processor]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from transforms.language import columns as lc  # noqa: E402
from transforms.language import recipes  # noqa: E402

SHARED = os.environ.get("LEROBOT_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
RECIPE = os.path.join(SHARED, "corpus", "lerobot", "language", "expected", "recipes", "subtask_mem_vqa_speech.yaml")
CAMERAS = ("observation.images.front", "observation.images.wrist")
FPS = 30


def _say(text: str) -> dict:
    return {"function": {"arguments": {"text": text}, "name": "say"}, "type": "function"}


def make_episode(ep: int, length: int, rng: np.random.Generator) -> tuple[list, list, np.ndarray]:
    ts = (np.arange(length, dtype=np.float32) / np.float32(FPS)).astype(np.float32)
    rows = [{"role": "user", "content": f"task {ep} phrasing {k}", "style": "task_aug", "timestamp": 0.0,
             "camera": None, "tool_calls": None} for k in range(3)]
    cuts = sorted(rng.choice(np.arange(1, length - 1), size=4, replace=False).tolist())
    for k, frame in enumerate([0] + cuts):
        t = float(ts[frame])
        rows.append({"role": "assistant", "content": f"subtask {k}", "style": "subtask", "timestamp": t,
                     "camera": None, "tool_calls": None})
        rows.append({"role": "assistant", "content": f"plan from step {k}", "style": "plan", "timestamp": t,
                     "camera": None, "tool_calls": None})
        if k:
            rows.append({"role": "assistant", "content": f"done: {k} steps", "style": "memory", "timestamp": t,
                         "camera": None, "tool_calls": None})
    rows.sort(key=lambda r: (r["timestamp"], r["style"], r["role"]))
    events: list = [[] for _ in range(length)]
    for frame in rng.choice(np.arange(length), size=max(1, length // 25), replace=False):
        for cam in CAMERAS:
            events[frame].append({"role": "assistant", "content": '{"count": 2, "label": "cup"}', "style": "vqa",
                                  "camera": cam, "tool_calls": None})
            events[frame].append({"role": "user", "content": "How many cups?", "style": "vqa", "camera": cam,
                                  "tool_calls": None})
    speech = int(rng.integers(1, length - 1))
    events[speech] = [{"role": "assistant", "content": None, "style": None, "camera": None,
                       "tool_calls": [_say("Okay.")]},
                      {"role": "user", "content": "use the blue cup", "style": "interjection", "camera": None,
                       "tool_calls": None}]
    return [rows] * length, events, ts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--episode-length", type=int, default=400)
    parser.add_argument("--mode", default="processor", choices=["processor", "sample", "sample_task"])
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    episodes = []
    total = 0
    ep = 0
    while total < args.frames:
        length = min(args.episode_length, args.frames - total) if args.frames - total >= 10 else 10
        episodes.append(make_episode(ep, length, rng))
        total += length
        ep += 1

    # The writer's on-disk form: pyarrow infers the types (double timestamps, null-typed fields).
    disk_p = pa.array([f for p, _, _ in episodes for f in p])
    disk_e = pa.array([f for _, e, _ in episodes for f in e])
    t0 = time.perf_counter()
    persistent = lc.normalize_language_column(disk_p, "persistent", feature="language_persistent")
    events = lc.normalize_language_column(disk_e, "events", feature="language_events")
    t_norm = time.perf_counter() - t0
    recipe = recipes.load_recipe(RECIPE)

    t0 = time.perf_counter()
    start = 0
    rendered = 0
    for e, (_, _, ts) in enumerate(episodes):
        n = len(ts)
        p_ep = persistent.slice(start, n)
        e_ep = events.slice(start, n)
        lc.validate_language(p_ep, e_ep, episode_index=e, frame_index=np.arange(n), timestamps=ts,
                             camera_keys=set(CAMERAS))
        start += n
    t_valid = time.perf_counter() - t0

    t0 = time.perf_counter()
    start = 0
    for e, (_, _, ts) in enumerate(episodes):
        n = len(ts)
        out = recipes.render_episode(recipe, persistent=persistent.slice(start, n), events=events.slice(start, n),
                                     timestamps=ts, indices=range(start, start + n), task=f"task {e}",
                                     mode=args.mode, persistent_validated=True)
        rendered += sum(1 for r in out if r is not None)
        start += n
    t_render = time.perf_counter() - t0

    print(f"frames: {total} in {len(episodes)} episodes, {len(persistent.flatten())} persistent rows, "
          f"{len(events.flatten())} event rows")
    print(f"normalise: {total / t_norm:,.0f} frames/s ({t_norm:.2f} s)")
    print(f"validate:  {total / t_valid:,.0f} frames/s ({t_valid:.2f} s)")
    print(f"render ({args.mode}, subtask_mem_vqa_speech): {total / t_render:,.0f} samples/s "
          f"({t_render:.2f} s, {rendered} rendered)")


if __name__ == "__main__":
    main()
