"""The data-quality checks, one entry each: the one place a check is named, described and wired.

Each check has a stable name (what the quality table's `check` column, the manifest's `quality.checks` and
`--strict` hold), a description (the README's table, `lerobot-import check`, `--strict`'s help and the Flex
Template's help text say the same words; tests hold them to it), whether LeRobot's own loader refuses a
dataset with its findings, and where it runs:

* an episode check has a vectorised **screen** over a part's frames (`transforms.quality.screen`), which
  names the episodes that may have a finding, and a **per-episode check** over one episode's frames, which
  words the findings. Only the episodes some screen names reach the per-episode checks, so a screen must
  name every episode its check would find something in: `tests/test_quality_registry.py` runs each pair
  over the same cases;
* a file or dataset check runs once per data file or per dataset (`dataset_checks`).

A new check is one entry here plus its two functions.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.lerobot.episodes_files import EpisodeRow
from transforms.lerobot.info import DatasetInfo
from transforms.quality import episode_checks, screen, video_checks
from transforms.quality.episode_checks import EpisodeContext, FeaturePlan
from transforms.quality.findings import Finding
from transforms.quality.video_checks import SampleTimes

EPISODE, FILE, DATASET = "episode", "file", "dataset"

#: A per-episode check: (the episode, meta/tasks.parquet's tasks or None, the MP4s' sample times) -> findings.
EpisodeCheck = Callable[[EpisodeContext, Optional[Sequence[str]], Mapping[str, SampleTimes]], list]


@dataclasses.dataclass(frozen=True)
class Check:
    """One data-quality check."""

    name: str
    description: str
    blocks_lerobot: bool  # LeRobot's loader refuses a dataset with a finding of it
    scope: str  # EPISODE, FILE or DATASET
    screen: Optional[Callable[[screen.PartFrames], np.ndarray]] = None  # EPISODE: a bool per episode
    check: Optional[EpisodeCheck] = None  # EPISODE: the findings of one episode


REGISTRY: tuple[Check, ...] = (
    Check("timestamp_grid", "a frame's timestamp is more than 1e-4 s off frame_index / fps", True, EPISODE,
          screen.timestamp_grid, lambda ctx, tasks, samples: episode_checks.timestamp_grid(ctx)),
    Check("timestamp_steps", "consecutive timestamps are not 1/fps apart (dropped or duplicated frames)", False,
          EPISODE, screen.timestamp_steps, lambda ctx, tasks, samples: episode_checks.timestamp_steps(ctx)),
    Check("video_samples",
          "a camera has no video sample within 1e-4 s of a frame's time (from_timestamp + timestamp)", True,
          EPISODE, screen.video_samples,
          lambda ctx, tasks, samples: video_checks.video_samples(ctx, samples) if samples else []),
    Check("dataset_totals",
          "info.json's total_episodes, total_frames or splits disagree with the episodes files", False, DATASET),
    Check("episode_tasks", "an episode's tasks differ from the tasks its frames' task_index name", False, EPISODE,
          screen.episode_tasks, lambda ctx, tasks, samples: episode_checks.episode_tasks(ctx, tasks)),
    Check("undeclared_columns",
          "a data file holds columns info.json does not declare (they are not imported)", False, FILE),
    Check("non_finite", "a numeric feature holds NaN or infinite values", False, EPISODE,
          screen.non_finite, lambda ctx, tasks, samples: episode_checks.non_finite(ctx)),
    Check("frozen_feature", "a numeric feature holds one value (every dimension) through a whole episode", False,
          EPISODE, screen.frozen_feature, lambda ctx, tasks, samples: episode_checks.frozen_feature(ctx)),
    Check("episode_rows",
          "an episode's rows do not match its length: another episode_index, or frame_index not 0..length-1",
          False, EPISODE, screen.episode_rows, lambda ctx, tasks, samples: episode_checks.episode_rows(ctx)),
)

BY_NAME: dict[str, Check] = {c.name: c for c in REGISTRY}
#: check name -> what it finds, in the registry's order.
CHECKS: dict[str, str] = {c.name: c.description for c in REGISTRY}
#: Checks whose findings LeRobot's own loader refuses (it asks each camera for the frame at from_timestamp +
#: timestamp, within 1e-4 s, and checks the timestamps against the fps).
LEROBOT_BLOCKING = frozenset(c.name for c in REGISTRY if c.blocks_lerobot)
#: The episode checks in the order their findings are listed for an episode.
EPISODE_ORDER = ("timestamp_grid", "timestamp_steps", "non_finite", "frozen_feature", "episode_rows",
                 "episode_tasks", "video_samples")
EPISODE_CHECKS = tuple(BY_NAME[name] for name in EPISODE_ORDER)
assert {c.name for c in REGISTRY if c.scope == EPISODE} == set(EPISODE_ORDER)


def parse_strict(value: Optional[str]) -> frozenset[str]:
    """The checks `--strict NAME,...` (or `all`) makes errors.

    Raises:
        ValueError: a name that is no check, saying which ones are.
    """
    names = {n.strip() for n in (value or "").split(",") if n.strip()}
    if "all" in names:
        return frozenset(CHECKS)
    unknown = sorted(names - set(CHECKS))
    if unknown:
        raise ValueError(f"--strict names unknown check(s) {', '.join(unknown)}; the checks are: "
                         f"{', '.join(CHECKS)} (or all)")
    return frozenset(names)


def suspects(info: DatasetInfo, rows: Sequence[EpisodeRow], frames: Sequence[pa.StructArray], plan: FeaturePlan,
             *, tasks: Optional[Sequence[str]] = None,
             samples: Optional[Mapping[str, SampleTimes]] = None) -> np.ndarray:
    """A bool per episode (`rows[i]` with typed `frames[i]`): True where some check's screen names it (the
    arguments are `screen.PartFrames`')."""
    part = screen.PartFrames(info, rows, frames, plan, tasks=tasks, samples=samples)
    flagged = part.none()
    if part.empty:
        return flagged
    for check in EPISODE_CHECKS:
        flagged |= check.screen(part)
    return flagged


def check_episode(ctx: EpisodeContext, tasks: Optional[Sequence[str]],
                  samples: Optional[Mapping[str, SampleTimes]] = None) -> list[Finding]:
    """Every episode check of one episode, in `EPISODE_ORDER`."""
    found: list[Finding] = []
    for check in EPISODE_CHECKS:
        found += check.check(ctx, tasks, samples or {})
    return found
