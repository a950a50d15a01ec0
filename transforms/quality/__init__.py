"""Data quality at import: what makes a dataset fail or mislead in training, found in the import's own pass.

Pure (no Beam): every check is one entry of `checks.REGISTRY` (name, description, whether LeRobot's loader
refuses it, its vectorised screen and its per-episode check); each is a numpy function over one episode's
typed frames, its cameras' sample times (from the MediaIndex, no video decoded) or the dataset's metadata,
and returns `Finding`s. The Beam layer calls `check_part` from the part writer, `dataset_totals` from the
finish step, and writes `table()` and `summarize()`; `lerobot-import check` calls the same functions
without writing anything.
"""

from transforms.quality.dataset_checks import (dataset_totals, index_ranges, indices_of, info_document,
                                              undeclared_columns)
from transforms.quality.checks import (CHECKS, LEROBOT_BLOCKING, REGISTRY, Check, check_episode, parse_strict,
                                       suspects)
from transforms.quality.episode_checks import BOOKKEEPING, TOLERANCE_S, EpisodeContext
from transforms.quality.findings import (ERROR, REFUSED, SCHEMA, WARNING, Finding, merge_summaries, message,
                                         summarize, table, table_bytes, with_severity)
from transforms.quality.part import check_part, load_tasks, ordered_tasks
from transforms.quality.video_checks import (SampleTimes, clips_window, presentation_timeline, presentation_times,
                                             sample_window, video_samples)

__all__ = [
    "BOOKKEEPING", "CHECKS", "Check", "ERROR", "EpisodeContext", "Finding", "LEROBOT_BLOCKING", "REFUSED", "SCHEMA",
    "SampleTimes", "TOLERANCE_S", "WARNING", "check_episode", "check_part", "clips_window", "dataset_totals",
    "index_ranges", "indices_of", "info_document", "merge_summaries", "message", "parse_strict",
    "load_tasks", "ordered_tasks", "presentation_timeline", "presentation_times", "REGISTRY", "sample_window",
    "summarize", "suspects", "table", "table_bytes", "undeclared_columns", "video_samples", "with_severity"]
