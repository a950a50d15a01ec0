"""meta/tasks.parquet (v2.x: meta/tasks.jsonl): the task string of each task_index. Pure: no Beam.

LeRobot names task_index `k` by row `k` of the file (`tasks.iloc[k]`), and its writer stores the task
string as the pandas index column (named in the file's pandas metadata, normally `task`).
"""

from __future__ import annotations

import json
from typing import Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import v2

#: Where a dataset keeps its tasks.
TASKS_PATH = "meta/tasks.parquet"


def read_tasks(root: str) -> dict[int, str]:
    """task_index -> task of a dataset: meta/tasks.parquet (v3.0: row k is task_index k) or, when the dataset
    has none, meta/tasks.jsonl (v2.x: each line names its task_index).

    Raises:
        LeRobotImportError: neither file can be read (the tasks.parquet error when tasks.jsonl is absent too).
        KeyError, ValueError, pyarrow.ArrowException: a file that is not a tasks file.
    """
    try:
        raw = storage.read_bytes(storage.dataset_file(root, TASKS_PATH), what="tasks file", file=TASKS_PATH)
    except LeRobotImportError as ex:
        if ex.rule != "file_missing":
            raise
        try:
            raw = storage.read_bytes(storage.dataset_file(root, v2.TASKS_JSONL), what="tasks file",
                                     file=v2.TASKS_JSONL, max_bytes=v2.MAX_TASKS_JSONL_BYTES)
        except LeRobotImportError as jsonl:
            if jsonl.rule == "file_missing":
                raise ex from None
            raise
        return v2.parse_tasks_jsonl(raw)
    return dict(enumerate(tasks_in_row_order(pq.read_table(pa.BufferReader(raw)))))


def tasks_in_row_order(table: pa.Table) -> list[str]:
    """The task strings of a tasks.parquet table, row `k` naming task_index `k`.

    Args:
        table: the file's table, schema metadata kept.
    Raises:
        KeyError: the table has no task column.
    """
    meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}") or b"{}")
    column = next((c for c in meta.get("index_columns", []) if isinstance(c, str)), "task")
    return [str(t) for t in table.column(column).to_pylist()]


def frame_tasks(task_index: Optional[np.ndarray], tasks: Mapping[int, str], episode_tasks: Sequence[str],
                n: int) -> list[Optional[str]]:
    """Each frame's task string: through tasks.parquet, or the episode's only task.

    Args:
        task_index: the frames' task_index values (None when the dataset has none).
        tasks: task_index -> task.
        episode_tasks: the episode's tasks.
        n: the number of frames.

    Returns:
        One task (or None) per frame.
    """
    if task_index is not None and tasks:
        return [tasks.get(int(i)) for i in task_index]
    return [episode_tasks[0] if len(episode_tasks) == 1 else None] * n
