"""Imported episodes -> per-frame training samples rendered from a LeRobot recipe (issue 6).

`render_episode_samples` is the pure step (one episode -> its frames' samples, exactly as LeRobot's
`RenderMessagesStep` renders them); `RenderTrainingSamples` is the Beam transform that applies it to
a PCollection of imported `Episode`s.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping, Optional, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms import storage
from transforms.language import recipes

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


def load_tasks(dataset_root: str) -> dict[int, str]:
    """task_index -> task, from the dataset's meta/tasks.parquet (row order is task_index, as LeRobot reads it)."""
    raw = storage.read_bytes(storage.dataset_file(dataset_root, "meta/tasks.parquet"), what="tasks file",
                             file="meta/tasks.parquet")
    table = pq.read_table(pa.BufferReader(raw))
    tasks = table.column("task").to_pylist()
    if "task_index" in table.column_names:
        return {int(i): t for i, t in zip(table.column("task_index").to_pylist(), tasks)}
    return dict(enumerate(tasks))


def frame_tasks(task_index: Optional[np.ndarray], tasks: Mapping[int, str], episode_tasks: Sequence[str],
                n: int) -> list[Optional[str]]:
    """Each frame's task string: through tasks.parquet, or the episode's only task."""
    if task_index is not None and tasks:
        return [tasks.get(int(i)) for i in task_index]
    return [episode_tasks[0] if len(episode_tasks) == 1 else None] * n


def render_episode_samples(episode, recipe: recipes.TrainingRecipe, tasks: Mapping[int, str]) -> Iterator[dict]:
    """One episode's rendered frames (frames the processor drops are left out)."""
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
    rendered = recipes.render_episode(recipe, persistent=persistent, events=events, timestamps=timestamps,
                                      indices=index, task=per_frame_task, mode="processor")
    for i, sample in enumerate(rendered):
        if sample is None:
            continue
        yield {
            "episode_index": episode.episode_index, "frame_index": int(frame_index[i]), "index": int(index[i]),
            "timestamp": float(timestamps[i]), "task": per_frame_task[i],
            "messages": json.dumps(sample["messages"], ensure_ascii=False, separators=(",", ":")),
            "message_streams": list(sample["message_streams"]),
            "target_message_indices": [int(x) for x in sample["target_message_indices"]],
        }


class _RenderEpisode(beam.DoFn):
    def __init__(self, recipe_text: str, tasks: Mapping[int, str]) -> None:
        self._recipe_text = recipe_text
        self._tasks = dict(tasks)

    def setup(self) -> None:
        self._recipe = recipes.TrainingRecipe.from_yaml(self._recipe_text)

    def process(self, episode) -> Iterator[dict[str, Any]]:
        yield from render_episode_samples(episode, self._recipe, self._tasks)


class RenderTrainingSamples(beam.PTransform):
    """PCollection[Episode] -> PCollection[dict] of per-frame samples (SAMPLE_SCHEMA)."""

    def __init__(self, recipe_text: str, tasks: Mapping[int, str]) -> None:
        super().__init__()
        recipes.TrainingRecipe.from_yaml(recipe_text)  # fail at construction on a bad recipe
        self._recipe_text = recipe_text
        self._tasks = tasks

    def expand(self, episodes):
        return episodes | "RenderFrames" >> beam.ParDo(_RenderEpisode(self._recipe_text, self._tasks))
