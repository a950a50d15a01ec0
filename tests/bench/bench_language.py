"""Rendered samples per second for the richest recipe (subtask_mem_vqa_speech), one process.

Generates, in memory, a dataset shaped like LeRobot's annotation writer output: per episode a
persistent list (task_aug x3, subtask/plan/memory changes) broadcast to every frame, VQA pairs on
two cameras on a few frames, an interjection + `say` speech atom. The columns are built in the
writer's on-disk form (float64 timestamps, null-typed camera/tool_calls, struct tool calls) and
normalised first, so the normalisation rate is reported too.

`--hostile` instead measures hostile recipes (a text naming a file, a YAML error, billion laughs, deep
nesting, too many values, an oversized recipe, a 5,000-digit number, a FIFO): each is parsed, and if it
loads, one frame is rendered, in a child process whose wall time and peak RSS are printed with what
happened.

    python tests/bench/bench_language.py [--frames 100000] [--mode processor] [--hostile]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from transforms.language import columns as lc  # noqa: E402
from transforms.language.recipe import load_recipe  # noqa: E402
from transforms.language.render import render_episode  # noqa: E402

RECIPE = os.path.join(os.path.dirname(__file__), "..", "data", "lerobot", "language", "expected", "recipes",
                      "subtask_mem_vqa_speech.yaml")
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


_HOSTILE_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from transforms.language.errors import RecipeError
from transforms.language.recipe import parse_recipe, read_recipe_file
from transforms.language.render import render_episode
kind, arg = sys.argv[2], sys.argv[3]
try:
    text = read_recipe_file(arg) if kind == "file" else open(arg, encoding="utf-8", errors="surrogateescape").read()
    recipe = parse_recipe(text, name="hostile.yaml")
    out = render_episode(recipe, persistent=None, events=None, timestamps=[0.0], indices=[0], task="t",
                         mode="sample_task")
    print("rendered", len(str(out)), "characters")
except RecipeError as exc:
    print(str(exc)[:150])
"""


def _hostile_cases(tmp: str) -> dict[str, tuple[str, str]]:
    """case -> (how the child reads it: "text" from a file's content / "file" through read_recipe_file, path)."""
    good = os.path.join(tmp, "good.yaml")
    with open(good, "w") as f:
        f.write("messages:\n  - {role: user, content: x, stream: low_level}\n")
    laughs = ["messages:", "  - role: user", "    stream: low_level", "    content:",
              "      - {type: text, text: hi, l0: &l0 [" + ",".join(["lol"] * 9) + "]}"]
    laughs += [f"      - {{type: text, l{k}: &l{k} [" + ",".join([f"*l{k - 1}"] * 9) + "]}" for k in range(1, 9)]
    texts = {
        "text naming a file": good,
        "YAML syntax error": "messages: [\n  - {role: user\n",
        "billion laughs (%d bytes)" % len("\n".join(laughs) + "\n"): "\n".join(laughs) + "\n",
        "nesting 200,000 deep": "[" * 200_000 + "]" * 200_000,
        "500,000 values (1 MB)": "messages: [" + ",".join(["1"] * 500_000) + "]\n",
        "1 MB comment, then a recipe": "# " + "x" * 1_000_000 + "\nmessages: [{role: user, content: x, "
                                       "stream: low_level}]\n",
        "5,000-digit weight": "blend:\n  a:\n    weight: " + "9" * 5000 + "\n",
        "8 MiB recipe": "# " + "x" * (8 << 20) + "\n",
    }
    cases = {}
    for k, (name, text) in enumerate(texts.items()):
        path = os.path.join(tmp, f"case{k}.yaml")
        with open(path, "w") as f:
            f.write(text)
        cases[name] = ("text", path)
    fifo = os.path.join(tmp, "fifo.yaml")
    os.mkfifo(fifo)
    cases["FIFO as --recipe"] = ("file", fifo)
    return cases


def hostile() -> None:
    """Each hostile recipe in a child process: wall time, peak RSS, outcome (60 s and 4 GiB at most)."""
    import resource

    repo = os.path.join(os.path.dirname(__file__), "..", "..")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (kind, path) in _hostile_cases(tmp).items():
            t0 = time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-c", _HOSTILE_CHILD, repo, kind, path], stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)))
            timer = threading.Timer(60, child.kill)
            timer.start()
            out = child.stdout.read()
            _, status, usage = os.wait4(child.pid, 0)  # reaped here, so the child's own peak RSS is known
            child.returncode = os.waitstatus_to_exitcode(status)
            timer.cancel()
            wall = time.perf_counter() - t0
            outcome = (out.strip().splitlines() or ["(no output)"])[-1]
            if child.returncode < 0:
                outcome = f"killed (signal {-child.returncode}) after {wall:.0f} s: {outcome}"
            print(f"{name:28s} {wall:6.2f} s  peak {usage.ru_maxrss / 1024:5.0f} MB  {outcome[:110]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--episode-length", type=int, default=400)
    parser.add_argument("--mode", default="processor", choices=["processor", "sample", "sample_task"])
    parser.add_argument("--hostile", action="store_true", help="measure hostile recipes instead")
    args = parser.parse_args()
    if args.hostile:
        hostile()
        return

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
    recipe = load_recipe(RECIPE)

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
        out = render_episode(recipe, persistent=persistent.slice(start, n), events=events.slice(start, n),
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
