"""All the checks of one part (or one episodes file): its episodes' typed frames, their cameras' sample
times, and the columns of the data files it read. The import's part writer and `lerobot-import check`
call the same function, so a check finds the same things in both.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import pyarrow as pa

from transforms.lerobot.episodes_files import EpisodeRow
from transforms.lerobot.info import DatasetInfo
from transforms.lerobot.tasks import read_tasks, tasks_file
from transforms.base.errors import LeRobotImportError, shorten
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


#: The task_index values the tasks check lists, up to: a v2.x tasks.jsonl may leave numbers out, and a list
#: with a gap per number left out must stay small.
MAX_LISTED_TASKS = 1 << 20


class TaskNames(list):
    """A dataset's tasks by task_index (None where no task has that index), and the file they come from."""

    def __init__(self, names, file: str) -> None:
        super().__init__(names)
        self.file = file


def ordered_tasks(root: str) -> Optional[TaskNames]:
    """The dataset's tasks by task_index (as `load_tasks`), None when there are none to compare with."""
    return load_tasks(root)[0]


def load_tasks(root: str) -> tuple[Optional[TaskNames], list[Finding]]:
    """(the dataset's tasks by task_index, or None; the dataset-level finding saying why the tasks check
    cannot run). The file follows codebase_version (meta/tasks.parquet, a v2.x dataset's meta/tasks.jsonl);
    a dataset without one is not checked and says nothing (the episodes' own tasks are all there is), but a
    file that is there and cannot be read is an `episode_tasks` finding naming the file and what is wrong
    (its line, for tasks.jsonl): the check does not run, and says so."""
    file = tasks_file(root)
    try:
        by_index = read_tasks(root)
    except LeRobotImportError as ex:
        if ex.rule == "file_missing":
            return None, []
        return None, [_unreadable(root, ex.file or file, ex.message)]
    except (OSError, KeyError, ValueError, pa.ArrowException) as ex:
        return None, [_unreadable(root, file, f"{type(ex).__name__}: {ex}")]
    count = max(by_index, default=-1) + 1
    if count > MAX_LISTED_TASKS:
        return None, [_unreadable(root, file, f"it numbers a task {count - 1}, above the {MAX_LISTED_TASKS - 1} "
                                  "the tasks check lists")]
    return TaskNames([by_index.get(i) for i in range(count)], file), []


def _unreadable(root: str, file: str, why: str) -> Finding:
    return Finding(root, None, None, "episode_tasks", "task_index", 1, None,
                   f"{file} cannot be read, so no episode's tasks were checked against its frames: "
                   f"{shorten(why, 300)}", file=file)
