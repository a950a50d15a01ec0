"""Beam: imported episodes -> per-frame training samples rendered with a LeRobot recipe.

`render_episode_samples` is the pure step: one episode -> its frames' samples, exactly as LeRobot's
`RenderMessagesStep` renders them, and the frames that cannot be rendered (LeRobot raises for them, e.g.
"Ambiguous resolver") as `RenderFailure`s. `RenderTrainingSamples` applies it to a PCollection of
imported `Episode`s; one frame's failure never stops the others. `WriteRenderFailures` writes the
failures as `errors.jsonl`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterator, Mapping, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics

from transforms.language.errors import RenderError
from transforms.language.recipe import TrainingRecipe, parse_recipe
from transforms.language.render import render_episode
from transforms.lerobot.tasks import frame_tasks, read_tasks

NAMESPACE = "lerobot_render"
#: The tags of `RenderTrainingSamples`' two outputs.
SAMPLES = "samples"
FAILURES = "failures"

SAMPLE_SCHEMA = pa.schema([
    pa.field("episode_index", pa.int64(), nullable=False),
    pa.field("frame_index", pa.int64()),
    pa.field("index", pa.int64(), nullable=False),
    pa.field("timestamp", pa.float32()),
    pa.field("task", pa.utf8()),
    # messages are lists of chat turns whose content is a string or a list of typed blocks: kept as JSON
    pa.field("messages", pa.utf8(), nullable=False),
    pa.field("message_streams", pa.list_(pa.utf8()), nullable=False),
    pa.field("target_message_indices", pa.list_(pa.int64()), nullable=False),
])


@dataclasses.dataclass(frozen=True, order=True)
class RenderFailure:
    """A frame that cannot be rendered: one row of `SAMPLES/errors.jsonl`.

    `index` is the frame's global index, `component` the blend component and `binding` the binding
    whose resolver raised (None when the recipe is not a blend / the failure is not a binding's),
    `message` LeRobot's own words for the cause.
    """

    index: int
    episode_index: int
    frame_index: int
    timestamp: float
    component: Optional[str]
    binding: Optional[str]
    message: str
    rule: str = "render"

    def to_json_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class EpisodeSamples:
    """One episode rendered: its samples (SAMPLE_SCHEMA rows; frames the processor drops are left out)
    and its frames that cannot be rendered."""

    samples: list[dict[str, Any]]
    failures: list[RenderFailure]


def load_tasks(dataset_root: str) -> dict[int, str]:
    """task_index -> task, from the dataset's meta/tasks.parquet (row order is task_index, as LeRobot reads it)
    or, for a v2.x dataset, its meta/tasks.jsonl.

    Args:
        dataset_root: the dataset root URI.

    Returns:
        The task of each task_index.
    """
    return read_tasks(dataset_root)


def _sample(episode_index: int, frame_index: int, index: int, timestamp: float, task: Optional[str],
            rendered: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "episode_index": episode_index, "frame_index": frame_index, "index": index, "timestamp": timestamp,
        "task": task, "messages": json.dumps(rendered["messages"], ensure_ascii=False, separators=(",", ":")),
        "message_streams": list(rendered["message_streams"]),
        "target_message_indices": [int(x) for x in rendered["target_message_indices"]],
    }


def render_episode_samples(episode, recipe: TrainingRecipe, tasks: Mapping[int, str]) -> EpisodeSamples:
    """Render every frame of one imported episode with RenderMessagesStep's rules.

    Args:
        episode: an imported `Episode` (anything with `episode_index`, `length`, `tasks`, `features`
            and `column(name)`).
        recipe: the recipe.
        tasks: task_index -> task (meta/tasks.parquet).

    Returns:
        The episode's samples and its frames that cannot be rendered.
    """
    features = set(episode.features)
    n = episode.length
    persistent = episode.column("language_persistent") if "language_persistent" in features else None
    events = episode.column("language_events") if "language_events" in features else None
    index = episode.column("index").to_numpy(zero_copy_only=False)
    timestamps = episode.column("timestamp").to_numpy(zero_copy_only=False)
    frame_index = (episode.column("frame_index").to_numpy(zero_copy_only=False) if "frame_index" in features
                   else np.arange(n))
    task_index = episode.column("task_index").to_numpy(zero_copy_only=False) if "task_index" in features else None
    per_frame_task = frame_tasks(task_index, tasks, episode.tasks, n)
    rendered = render_episode(recipe, persistent=persistent, events=events, timestamps=timestamps,
                              indices=index, task=per_frame_task, mode="processor", errors="return")
    samples, failures = [], []
    for i, frame in enumerate(rendered):
        if isinstance(frame, RenderError):
            failures.append(RenderFailure(index=int(index[i]), episode_index=episode.episode_index,
                                          frame_index=int(frame_index[i]), timestamp=float(timestamps[i]),
                                          component=frame.component, binding=frame.binding, message=frame.cause))
        elif frame is not None:
            samples.append(_sample(episode.episode_index, int(frame_index[i]), int(index[i]),
                                   float(timestamps[i]), per_frame_task[i], frame))
    return EpisodeSamples(samples, failures)


class _RenderEpisode(beam.DoFn):
    """Episode -> its samples (main output) and RenderFailures (tag FAILURES)."""

    def __init__(self, recipe_text: str, recipe_name: str, tasks: Mapping[int, str]) -> None:
        self._recipe_text = recipe_text
        self._recipe_name = recipe_name
        self._tasks = dict(tasks)
        self._recipe: Optional[TrainingRecipe] = None
        self._frames = Metrics.counter(NAMESPACE, "frames")
        self._samples = Metrics.counter(NAMESPACE, "samples")
        self._failed = Metrics.counter(NAMESPACE, "frames_failed")

    def setup(self) -> None:
        self._recipe = parse_recipe(self._recipe_text, name=self._recipe_name)

    def process(self, episode) -> Iterator[Any]:
        result = render_episode_samples(episode, self._recipe, self._tasks)
        self._frames.inc(episode.length)
        self._samples.inc(len(result.samples))
        self._failed.inc(len(result.failures))
        yield from result.samples
        for failure in result.failures:
            yield beam.pvalue.TaggedOutput(FAILURES, failure)


class RenderTrainingSamples(beam.PTransform):
    """PCollection[Episode] -> the samples of every frame and the frames that cannot be rendered.

    Args:
        recipe_text: the recipe's YAML text. It is parsed here, so a bad recipe fails when the pipeline
            is built (`RecipeError`), and once more on each worker.
        tasks: task_index -> task (the dataset's meta/tasks.parquet, `load_tasks`).
        recipe_name: the recipe's name for messages (its file).

    Returns (from `expand`):
        A tuple of outputs: `[SAMPLES]` the samples (dicts of SAMPLE_SCHEMA; frames RenderMessagesStep
        drops are left out) and `[FAILURES]` one `RenderFailure` per frame that cannot be rendered.
    """

    def __init__(self, recipe_text: str, tasks: Mapping[int, str], *, recipe_name: str = "<recipe text>") -> None:
        super().__init__()
        parse_recipe(recipe_text, name=recipe_name)
        self._recipe_text = recipe_text
        self._recipe_name = recipe_name
        self._tasks = dict(tasks)

    def expand(self, episodes):
        return episodes | "RenderFrames" >> beam.ParDo(
            _RenderEpisode(self._recipe_text, self._recipe_name, self._tasks)).with_outputs(FAILURES, main=SAMPLES)


class WriteRenderFailures(beam.PTransform):
    """PCollection[RenderFailure] -> `OUTPUT/errors.jsonl`, one JSON object per failed frame (an empty
    file when every frame rendered, so a reader never sees a previous run's failures).

    Args:
        output_dir: the samples folder (local path or URL).
    """

    def __init__(self, output_dir: str) -> None:
        super().__init__()
        self._output_dir = output_dir

    def expand(self, failures):
        return (failures
                | "ToJson" >> beam.Map(lambda f: json.dumps(f.to_json_dict(), ensure_ascii=False, sort_keys=True))
                | "Write" >> beam.io.WriteToText(errors_path(self._output_dir), num_shards=1,
                                                 shard_name_template=""))


def errors_path(output_dir: str) -> str:
    """Where `WriteRenderFailures` writes: `OUTPUT/errors.jsonl`."""
    return output_dir.rstrip("/") + "/errors.jsonl"
