"""The input versions behind one seam: how each lays out a dataset's episodes, in units of work.

A unit of work is what the import plans, writes and records as one "episodes file": a v3 episodes file
(`meta/episodes/chunk-000/file-000.parquet`), or a group of a v2.x dataset's episodes (its lines of
`meta/episodes.jsonl` in one chunk, named `meta/episodes.jsonl:chunk-000`). Everything that depends on the
version goes through the unit's `Layout`: reading its rows (the import, `plan`, `check` and the quality pass
read them through `read_unit_rows`), accounting for the episodes of a unit that failed, how its data files
are sized, and the name of its output. A new input version is one `Layout` class and one line of `LAYOUTS`.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from transforms.base.errors import LeRobotImportError
from transforms.lerobot import episodes_files, v2
from transforms.lerobot.episodes_files import EpisodeRow
from transforms.lerobot.info import META_EPISODES_DIR, DatasetInfo


class Layout:
    """How one input version lays out its episodes."""

    #: The data files' bytes are sized from their footers' row groups (v3: many episodes per data file);
    #: otherwise each episode is its whole data file, sized by the file.
    sized_by_footers = True
    #: Each episode has a data file and MP4s of its own (v2.x): a failure of one of them is that episode's
    #: alone, and the rest of its unit imports without it.
    episodes_own_files = False

    def owns(self, unit: str) -> bool:
        """Does `unit` (an episodes-file name) belong to this layout?"""
        raise NotImplementedError

    def names_unit(self, unit: str) -> bool:
        """Is `unit` (one this layout owns) a name the dataset's listing gives a unit, whose output is a clean
        path under OUT/episodes/? (A journal record naming anything else is forged.)"""
        raise NotImplementedError

    def read_rows(self, root: str, unit: str, info: DatasetInfo) -> list[EpisodeRow]:
        """The validated rows of a unit, in its row order.

        Raises:
            LeRobotImportError: the unit cannot be read or breaks a rule, naming the file and the row.
        """
        raise NotImplementedError

    def failed_episodes(self, root: str, unit: str, info: Optional[DatasetInfo]) -> tuple[int, ...]:
        """The episode_index values of a unit whose rows could not be read, so its episodes are still
        accounted for in errors.jsonl; () when even those cannot be read."""
        raise NotImplementedError

    def data_file_sizes(self, root: str, rows: Sequence[EpisodeRow]) -> Mapping[str, int]:
        """Sizes of the rows' data files known without asking per file (a listing), by relative path."""
        return {}

    def output_stem(self, unit: str) -> str:
        """The unit's output path under OUT/episodes/, without `.parquet`."""
        raise NotImplementedError

    def left_out(self, root: str, rows: Sequence[EpisodeRow], info: DatasetInfo) -> Mapping[int, tuple]:
        """The rows left out at planning, each failing alone (position -> the files its errors.jsonl rows
        name): none, unless episodes own their files (see `v2.left_out_episodes`)."""
        return {}


class V3EpisodesFiles(Layout):
    """LeRobot v3.0: Parquet episodes files under meta/episodes/, many episodes per data file and MP4."""

    def owns(self, unit: str) -> bool:
        return not v2.is_group(unit)

    def names_unit(self, unit: str) -> bool:
        return unit.startswith(META_EPISODES_DIR + "/") and unit.endswith(".parquet")

    def read_rows(self, root: str, unit: str, info: DatasetInfo) -> list[EpisodeRow]:
        return episodes_files.read_episodes_file(root, unit, info)

    def failed_episodes(self, root: str, unit: str, info: Optional[DatasetInfo]) -> tuple[int, ...]:
        try:
            source = episodes_files.open_episodes_file(root, unit)
        except (LeRobotImportError, OSError):
            return ()
        try:
            return episodes_files.episode_indices(source)
        finally:
            if not isinstance(source, bytes):
                source.close()

    def output_stem(self, unit: str) -> str:
        prefix = META_EPISODES_DIR + "/"
        rel = unit[len(prefix):] if unit.startswith(prefix) else unit
        return rel[:-len(".parquet")] if rel.endswith(".parquet") else rel


class V2Groups(Layout):
    """LeRobot v2.0 / v2.1: meta/episodes.jsonl, one data file and one MP4 per camera per episode; a unit is
    the group of one chunk's episodes."""

    sized_by_footers = False
    episodes_own_files = True

    def owns(self, unit: str) -> bool:
        return v2.is_group(unit)

    def names_unit(self, unit: str) -> bool:
        return "/" not in self.output_stem(unit)  # one group, one file directly under episodes/

    def read_rows(self, root: str, unit: str, info: DatasetInfo) -> list[EpisodeRow]:
        return v2.group_rows(v2.load_episodes(root), info, unit)

    def failed_episodes(self, root: str, unit: str, info: Optional[DatasetInfo]) -> tuple[int, ...]:
        return v2.group_episode_indices(root, info, unit)

    def data_file_sizes(self, root: str, rows: Sequence[EpisodeRow]) -> Mapping[str, int]:
        # an episode's own data file not there (0 bytes here) fails that episode alone, when it is read
        return {**{row.data_file: 0 for row in rows}, **v2.listed_sizes(root, rows)}

    def output_stem(self, unit: str) -> str:
        return v2.group_output_stem(unit)

    def left_out(self, root: str, rows: Sequence[EpisodeRow], info: DatasetInfo) -> Mapping[int, tuple]:
        return v2.left_out_episodes(root, rows, info)


#: The registry, asked in order: the first layout that owns a unit is its layout.
LAYOUTS: tuple[Layout, ...] = (V2Groups(), V3EpisodesFiles())


def layout_of(unit: str) -> Layout:
    """The layout of a unit of work (an episodes-file name as the import records it)."""
    return next(layout for layout in LAYOUTS if layout.owns(unit))


def layout_for(info: DatasetInfo) -> Layout:
    """The layout info.json's `codebase_version` gives the dataset's units."""
    return LAYOUTS[0] if info.is_v2 else LAYOUTS[1]


def read_unit_rows(root: str, unit: str, info: DatasetInfo) -> list[EpisodeRow]:
    """The validated rows of a unit of work, whatever its input version (see `Layout.read_rows`)."""
    return layout_of(unit).read_rows(root, unit, info)
