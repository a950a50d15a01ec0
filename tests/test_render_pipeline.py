"""Recipe rendering over an import: the Beam transform and `lerobot-import render`, checked against
LeRobot's recorded RenderMessagesStep output for every frame of the `language` dataset."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers import lerobot_dataset, run_import
from transforms.language.recipe import load_recipe
from transforms.reader.import_reader import ImportReader
from transforms.render_samples import load_tasks, render_episode_samples

RECIPES = ("subtask", "subtask_mem", "subtask_joint", "subtask_mem_vqa_speech")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = lerobot_dataset("language")
    out = tmp_path_factory.mktemp("lang") / "out"
    assert run_import(root, out) == 0
    return root, out


def _expected(root: Path, name: str) -> dict[int, dict]:
    lines = (root / "expected" / f"{name}.jsonl").read_text().splitlines()
    return {row["index"]: row for row in map(json.loads, lines)}


@pytest.mark.parametrize("name", RECIPES)
def test_rendered_samples_equal_lerobot_processor(imported, name):
    root, out = imported
    recipe = load_recipe(root / "expected" / "recipes" / f"{name}.yaml")
    tasks = load_tasks("file://" + str(root))
    samples = {s["index"]: s for ep in ImportReader(str(out))
               for s in render_episode_samples(ep, recipe, tasks).samples}
    expected = _expected(root, name)
    kept = {i for i, row in expected.items() if row["processor"] is not None}
    assert set(samples) == kept and kept
    for i in kept:
        want = expected[i]["processor"]
        got = samples[i]
        assert json.loads(got["messages"]) == want["messages"], i
        assert got["message_streams"] == want["message_streams"]
        assert got["target_message_indices"] == want["target_message_indices"]
        assert got["task"] == expected[i]["task"] and got["frame_index"] == expected[i]["frame_index"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_render_command_writes_samples(imported, tmp_path, fmt):
    from pipelines.render_recipes import run
    root, out = imported
    name = "subtask_mem_vqa_speech"
    samples_dir = tmp_path / "samples"
    assert run(["--recipe", str(root / "expected" / "recipes" / f"{name}.yaml"), "--input", str(out),
                "--output", str(samples_dir), "--format", fmt, "--runner", "FnApiRunner"]) == 0
    files = sorted(glob.glob(str(samples_dir / f"samples-*.{fmt}")))
    assert files
    if fmt == "jsonl":
        rows = [json.loads(line) for f in files for line in Path(f).read_text().splitlines()]
    else:
        rows = [dict(r, messages=json.loads(r["messages"])) for f in files for r in pq.read_table(f).to_pylist()]
    expected = _expected(root, name)
    assert sorted(r["index"] for r in rows) == sorted(i for i, r in expected.items() if r["processor"] is not None)
    for r in rows:
        assert r["messages"] == expected[r["index"]]["processor"]["messages"]
