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
from transforms.lerobot.info import INFO_JSON_MAX_BYTES, INFO_PATH, READ_VERSIONS, V2_VERSIONS

#: Where a dataset keeps its tasks.
TASKS_PATH = "meta/tasks.parquet"


def read_tasks(root: str, *, version: Optional[str] = None) -> dict[int, str]:
    """task_index -> task of a dataset. The file follows the dataset's `codebase_version` (`version`, or
    info.json's when None): a v3.0 dataset's meta/tasks.parquet (row k is task_index k); a v2.x dataset's
    meta/tasks.jsonl (each line names its task_index), never a meta/tasks.parquet beside it (a conversion to
    v3.0 left half done writes one before it rewrites the episodes). When the version cannot be told
    (info.json unreadable), tasks.parquet, else tasks.jsonl.

    Raises:
        LeRobotImportError: the file is missing (`file_missing`) or cannot be read; a tasks.jsonl line that is
            not a task (`episodes_file`, naming the line).
        KeyError, ValueError, pyarrow.ArrowException: a tasks.parquet that is not a tasks file.
    """
    if version is None:
        version = _codebase_version(root)
    if version in V2_VERSIONS:
        return _read_tasks_jsonl(root)
    try:
        raw = storage.read_bytes(storage.dataset_file(root, TASKS_PATH), what="tasks file", file=TASKS_PATH)
    except LeRobotImportError as ex:
        if ex.rule != "file_missing" or version in READ_VERSIONS:
            raise
        try:
            return _read_tasks_jsonl(root)
        except LeRobotImportError as jsonl:
            if jsonl.rule == "file_missing":
                raise ex from None
            raise
    # the file itself, not pq.read_table's dataset machinery (whose first use imports pyarrow.dataset, ~20 ms);
    # one thread: a small file, and Arrow's thread pool started here (in a process that has loaded PyAV) made
    # the interpreter abort at exit now and then ("terminate called without an active exception")
    return dict(enumerate(tasks_in_row_order(pq.ParquetFile(pa.BufferReader(raw)).read(use_threads=False))))


def tasks_file(root: str, *, version: Optional[str] = None) -> str:
    """The tasks file `read_tasks` reads for the dataset: meta/tasks.jsonl for v2.x, else meta/tasks.parquet."""
    return v2.TASKS_JSONL if (version or _codebase_version(root)) in V2_VERSIONS else TASKS_PATH


def _read_tasks_jsonl(root: str) -> dict[int, str]:
    raw = storage.read_bytes(storage.dataset_file(root, v2.TASKS_JSONL), what="tasks file", file=v2.TASKS_JSONL,
                             max_bytes=v2.MAX_TASKS_JSONL_BYTES)
    return v2.parse_tasks_jsonl(raw)


def _codebase_version(root: str) -> Optional[str]:
    """info.json's `codebase_version`, None when info.json cannot be read (its own checks say why)."""
    try:
        raw = storage.read_bytes(storage.dataset_file(root, INFO_PATH), what="info file", file=INFO_PATH,
                                 max_bytes=INFO_JSON_MAX_BYTES)
        version = json.loads(raw).get("codebase_version")
    except (LeRobotImportError, OSError, ValueError, RecursionError, AttributeError):
        return None
    return version if isinstance(version, str) else None


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
