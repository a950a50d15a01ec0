"""All the checks of one part (or one episodes file): its episodes' typed frames, their cameras' sample
times, and the columns of the data files it read. The import's part writer and `lerobot-import check`
call the same function, so a check finds the same things in both.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import pyarrow as pa

from transforms.lerobot.episodes_files import EpisodeRow
from transforms.lerobot.info import DatasetInfo
from transforms.lerobot.tasks import read_tasks
from transforms.base.errors import LeRobotImportError
from transforms.quality import dataset_checks
from transforms.quality.checks import check_episode, suspects
from transforms.quality.episode_checks import EpisodeContext, FeaturePlan
from transforms.quality.findings import Finding, with_severity
from transforms.quality.video_checks import SampleTimes


def check_part(dataset: str, episodes_file: str, info: DatasetInfo, rows: Sequence[EpisodeRow],
               frames: Mapping[int, pa.StructArray], *, tasks: Optional[Sequence[str]] = None,
               samples: Optional[Mapping[str, SampleTimes]] = None,
               data_columns: Optional[Mapping[str, Sequence[str]]] = None,
               strict: frozenset[str] = frozenset(), declared: Optional[DatasetInfo] = None) -> list[Finding]:
    """The findings of some episodes of one episodes file.

    Args:
        dataset: the dataset root URI.
        episodes_file: the episodes file, relative to the root.
        info: the dataset's info.json.
        rows: the episodes, in row order.
        frames: each episode's typed frames, by row position (an episode without is not checked).
        tasks: meta/tasks.parquet's tasks in row order (None: the tasks check is skipped).
        samples: per MP4 (relative path), its sample times around these episodes' clips.
        data_columns: per data file these episodes read, its column names.
        strict: the checks whose findings are errors.
        declared: the whole info.json, when `info` is cut to the columns read (what a data file may hold).
    """
    found: list[Finding] = []
    plan = FeaturePlan.of(info)
    checked = [(row, frames[row.position]) for row in rows if row.position in frames]
    flags = suspects(info, [r for r, _ in checked], [f for _, f in checked], plan, tasks=tasks, samples=samples)
    for (row, episode), flagged in zip(checked, flags):
        if not flagged:
            continue
        ctx = EpisodeContext(dataset, episodes_file, row, episode, info, plan)
        found += check_episode(ctx, tasks, samples)
    first_reader: dict[str, int] = {}
    for row in rows:
        first_reader.setdefault(row.data_file, row.episode_index)
    for data_file, columns in sorted((data_columns or {}).items()):
        extra = dataset_checks.undeclared_columns(dataset, episodes_file, data_file, columns, declared or info,
                                                  first_reader.get(data_file))
        if extra is not None:
            found.append(extra)
    return with_severity(found, strict)


def ordered_tasks(root: str) -> Optional[list[str]]:
    """meta/tasks.parquet's tasks in row order (task_index k is row k), None when the dataset has no readable
    tasks file (the tasks check is then skipped: nothing to compare with)."""
    try:  # tasks.parquet, or a v2.x dataset's meta/tasks.jsonl (each line naming its task_index)
        by_index = read_tasks(root)
    except (LeRobotImportError, OSError, KeyError, ValueError, pa.ArrowException):
        return None
    return [by_index[i] for i in range(len(by_index))] if set(by_index) == set(range(len(by_index))) else None
