"""Rendering keeps going past a frame that cannot be rendered: the frame is listed in SAMPLES/errors.jsonl
(global index, episode, frame, blend component, binding, LeRobot's message), every other frame is
rendered exactly as LeRobot renders it (its recorded outputs in `language/expected/`), and `render`
exits 1 saying how many frames failed. Also the Beam transform on small synthetic episodes."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import copy_dataset, lerobot_dataset, read_errors, run_import
from transforms.language import columns as lc
from transforms.language.errors import RenderError
from transforms.language.recipe import load_recipe, parse_recipe
from transforms.reader.import_reader import Episode, ImportReader
from transforms.render_samples import (
    FAILURES,
    SAMPLES,
    RenderFailure,
    RenderTrainingSamples,
    load_tasks,
    render_episode_samples,
)

RECIPE = "subtask_mem_vqa_speech"
#: The frame made unrenderable: global index 13 is frame 1 of episode 1, a VQA frame.
BAD_INDEX, BAD_EPISODE, BAD_FRAME = 13, 1, 1
AMBIGUOUS = ("Ambiguous resolver for style='vqa' role='assistant' tool_name=None "
             "camera='observation.images.front': 2 matching rows. Add a selector that distinguishes them.")


def _expected(root: Path) -> dict[int, dict]:
    lines = (root / "expected" / f"{RECIPE}.jsonl").read_text().splitlines()
    return {row["index"]: row for row in map(json.loads, lines)}


@pytest.fixture(scope="module")
def ambiguous_import(tmp_path_factory):
    """The `language` dataset with a second front-camera VQA answer on one frame, imported.

    LeRobot's `emitted_at(t, style=vqa, role=assistant, camera=observation.images.front)` (the recipe's
    `ask_vqa_top` component, tried on every frame) raises "Ambiguous resolver" for that frame only."""
    original = lerobot_dataset("language")
    tmp = tmp_path_factory.mktemp("ambiguous")
    root = copy_dataset(original, tmp / "language")
    path = root / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(path)
    assert table["index"][BAD_INDEX].as_py() == BAD_INDEX
    assert (table["episode_index"][BAD_INDEX].as_py(), table["frame_index"][BAD_INDEX].as_py()) == \
        (BAD_EPISODE, BAD_FRAME)
    events = table.column("language_events").to_pylist()
    answer = next(r for r in events[BAD_INDEX] if r["style"] == "vqa" and r["role"] == "assistant"
                  and r["camera"] == "observation.images.front")
    events[BAD_INDEX].insert(0, dict(answer, content='{"count": 3}'))
    column = pa.array(events, table.schema.field("language_events").type)
    pq.write_table(table.set_column(table.schema.get_field_index("language_events"), "language_events", column),
                   path)
    out = tmp / "out"
    assert run_import(root, out) == 0, read_errors(out)
    return original, root, out


def test_episode_samples_keep_going(ambiguous_import):
    original, root, out = ambiguous_import
    recipe = load_recipe(original / "expected" / "recipes" / f"{RECIPE}.yaml")
    tasks = load_tasks("file://" + str(root))
    results = [render_episode_samples(ep, recipe, tasks) for ep in ImportReader(str(out))]
    failures = [f for r in results for f in r.failures]
    assert failures == [RenderFailure(index=BAD_INDEX, episode_index=BAD_EPISODE, frame_index=BAD_FRAME,
                                      timestamp=float(np.float32(0.1)), component="ask_vqa_top", binding="vqa",
                                      message=AMBIGUOUS)]
    samples = {s["index"]: s for r in results for s in r.samples}
    expected = _expected(original)
    assert sorted(samples) == sorted(i for i, row in expected.items() if i != BAD_INDEX and row["processor"])
    for i, sample in samples.items():
        assert json.loads(sample["messages"]) == expected[i]["processor"]["messages"], i
        assert sample["message_streams"] == expected[i]["processor"]["message_streams"]
        assert sample["target_message_indices"] == expected[i]["processor"]["target_message_indices"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_render_command_lists_the_frame_and_exits_1(ambiguous_import, tmp_path, capsys, fmt):
    from pipelines.render_recipes import run
    original, _, out = ambiguous_import
    samples_dir = tmp_path / "samples"
    status = run(["--recipe", str(original / "expected" / "recipes" / f"{RECIPE}.yaml"), "--input", str(out),
                  "--output", str(samples_dir), "--format", fmt, "--runner", "FnApiRunner"])
    assert status == 1
    err = capsys.readouterr().err
    assert "1 frame could not be rendered" in err and str(samples_dir / "errors.jsonl") in err
    errors = [json.loads(line) for line in (samples_dir / "errors.jsonl").read_text().splitlines()]
    assert errors == [{"index": BAD_INDEX, "episode_index": BAD_EPISODE, "frame_index": BAD_FRAME,
                       "timestamp": float(np.float32(0.1)), "component": "ask_vqa_top", "binding": "vqa",
                       "rule": "render", "message": AMBIGUOUS}]
    files = sorted(glob.glob(str(samples_dir / f"samples-*.{fmt}")))
    if fmt == "jsonl":
        rows = [json.loads(line) for f in files for line in Path(f).read_text().splitlines()]
    else:
        rows = [dict(r, messages=json.loads(r["messages"])) for f in files for r in pq.read_table(f).to_pylist()]
    expected = _expected(original)
    assert sorted(r["index"] for r in rows) == sorted(i for i, row in expected.items()
                                                      if i != BAD_INDEX and row["processor"] is not None)
    for r in rows:
        assert r["messages"] == expected[r["index"]]["processor"]["messages"], r["index"]
        assert r["message_streams"] == expected[r["index"]]["processor"]["message_streams"]


def test_render_command_clean_run_writes_empty_errors(tmp_path, capsys):
    from pipelines.render_recipes import run
    root = lerobot_dataset("language")
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    samples_dir = tmp_path / "samples"
    assert run(["--recipe", str(root / "expected" / "recipes" / "subtask.yaml"), "--input", str(out),
                "--output", str(samples_dir), "--format", "jsonl", "--runner", "FnApiRunner"]) == 0
    assert (samples_dir / "errors.jsonl").read_text() == ""
    assert "every frame rendered" in capsys.readouterr().out


def test_render_on_dataflow_without_its_options_is_one_line_and_writes_nothing(tmp_path, capsys):
    """`render --runner DataflowRunner` without project, region and temp_location: the import's one line,
    before the render's lease or anything else is written."""
    from pipelines.render_recipes import run
    root = lerobot_dataset("language")
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    samples_dir = tmp_path / "samples"
    capsys.readouterr()
    assert run(["--recipe", str(root / "expected" / "recipes" / "subtask.yaml"), "--input", str(out),
                "--output", str(samples_dir), "--runner", "DataflowRunner"]) == 1
    assert capsys.readouterr().err == ("error: --runner DataflowRunner needs --project, --region, --temp_location "
                                       "(e.g. --project PROJECT --region us-central1 --temp_location "
                                       "gs://BUCKET/tmp)\n")
    assert not samples_dir.exists()


# ---------------------------------------------------------------------------------------------
# The Beam transform on synthetic episodes

CAMERAS = ("observation.images.front", "observation.images.wrist")
SYNTH_RECIPE = """\
messages:
  - {role: user, content: "${task}", stream: high_level}
  - {role: assistant, content: "${subtask}", stream: high_level, target: true, if_present: subtask}
  - {role: assistant, content: "${vqa}", stream: high_level, target: true, if_present: vqa}
"""


def _episode(episode_index: int, first_index: int, vqa_cameras: tuple[str, ...]) -> Episode:
    """A 3-frame imported episode: subtask "reach" from t=0, "grasp" from t=0.2; frame 1 holds a VQA
    answer on each of `vqa_cameras` (two make the default `vqa` binding ambiguous there)."""
    n = 3
    persistent = [{"role": "assistant", "content": "reach", "style": "subtask", "timestamp": 0.0},
                  {"role": "assistant", "content": "grasp", "style": "subtask", "timestamp": float(np.float32(0.2))}]
    events = [[], [{"role": "assistant", "content": f"a cup ({cam})", "style": "vqa", "camera": cam}
                   for cam in vqa_cameras], []]
    frames = pa.StructArray.from_arrays(
        [pa.array(range(first_index, first_index + n), pa.int64()), pa.array(range(n), pa.int64()),
         pa.array(np.arange(n, dtype=np.float32) / np.float32(10), pa.float32()),
         pa.array([0] * n, pa.int64()), lc.column_from_python([persistent] * n, "persistent"),
         lc.column_from_python(events, "events")],
        names=["index", "frame_index", "timestamp", "task_index", "language_persistent", "language_events"])
    offsets = pa.array([0, n], pa.int32())
    record = pa.table({"episode_index": pa.array([episode_index], pa.int64()), "length": pa.array([n], pa.int64()),
                       "tasks": pa.array([["pick the cup"]], pa.list_(pa.string())),
                       "frames": pa.ListArray.from_arrays(offsets, frames)})
    return Episode(record)


def _sample(episode_index: int, frame_index: int, index: int, answer: str) -> dict:
    messages = [{"role": "user", "content": "pick the cup"}, {"role": "assistant", "content": answer}]
    return {"episode_index": episode_index, "frame_index": frame_index, "index": index,
            "timestamp": float(np.float32(frame_index / 10)), "task": "pick the cup",
            "messages": json.dumps(messages, separators=(",", ":")),
            "message_streams": ["high_level", "high_level"], "target_message_indices": [1]}


def test_render_transform_on_synthetic_episodes():
    episodes = [_episode(0, 0, CAMERAS[:1]), _episode(1, 3, CAMERAS)]
    ok_vqa = dict(_sample(0, 1, 1, "reach"))
    ok_vqa["messages"] = json.dumps([{"role": "user", "content": "pick the cup"},
                                     {"role": "assistant", "content": "reach"},
                                     {"role": "assistant", "content": "a cup (observation.images.front)"}],
                                    separators=(",", ":"))
    ok_vqa["message_streams"] = ["high_level"] * 3
    ok_vqa["target_message_indices"] = [1, 2]
    want_samples = [_sample(0, 0, 0, "reach"), ok_vqa, _sample(0, 2, 2, "grasp"),
                    _sample(1, 0, 3, "reach"), _sample(1, 2, 5, "grasp")]
    want_failures = [RenderFailure(
        index=4, episode_index=1, frame_index=1, timestamp=float(np.float32(0.1)), component=None, binding="vqa",
        message="Ambiguous resolver for style='vqa' role='assistant' tool_name=None camera=None: 2 matching rows. "
                "Add a selector that distinguishes them.")]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = (p | beam.Create(episodes, reshuffle=False)
               | RenderTrainingSamples(SYNTH_RECIPE, {0: "pick the cup"}, recipe_name="synth.yaml"))
        assert_that(out[SAMPLES], equal_to(want_samples), label="Samples")
        assert_that(out[FAILURES], equal_to(want_failures), label="Failures")


def test_render_error_is_an_import_error():
    episode = _episode(7, 40, CAMERAS)
    from transforms.language.render import render_episode
    recipe = parse_recipe(SYNTH_RECIPE)
    with pytest.raises(RenderError) as info:
        render_episode(recipe, persistent=episode.column("language_persistent"),
                       events=episode.column("language_events"), timestamps=episode.column("timestamp"),
                       indices=episode.column("index"), task="pick the cup")
    assert info.value.rule == "render" and info.value.index == 41 and info.value.binding == "vqa"
    assert str(info.value).startswith("[render] frame with index 41 (t=0.10000000149011612), binding 'vqa': "
                                      "Ambiguous resolver for style='vqa'")


def test_render_help_teaches(capsys):
    """`lerobot-import render --help`: every option with its meaning and default, examples, Beam referred to."""
    from pipelines.render_recipes import render_parser
    with pytest.raises(SystemExit) as info:
        render_parser().parse_args(["--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in ("--recipe FILE The recipe: a LeRobot training-recipe YAML file, local path or URL (required)",
                  "YAML anchors and aliases are refused",
                  "--input OUT The output root of an import",
                  "--output SAMPLES Folder for the samples and errors.jsonl",
                  "--format {parquet,jsonl} Samples file format. Default: parquet",
                  "--tasks DATASET_ROOT Dataset root whose meta/tasks.parquet names each frame's task. Default: "
                  "the dataset recorded in the import's manifest.json",
                  "examples: lerobot-import render --recipe subtask_mem.yaml --input out/language --output samples",
                  "--runner DataflowRunner",
                  "Every other option is an Apache Beam pipeline option",
                  "Exit status: 0 when every frame rendered, 1 when a frame could not be rendered"):
        assert words in text, words
