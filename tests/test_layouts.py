"""The input versions' seam (`transforms.lerobot.layouts`): each unit of work finds its layout, and one function
reads any unit's rows, as the import, `plan`, `check` and the quality pass do."""

from __future__ import annotations

import pytest

from tests.helpers import lerobot_dataset
from tests.v21_repack import repack_v21
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import layouts, v2
from transforms.lerobot.dataset import check_dataset
from transforms.lerobot.episodes_files import read_episodes_file
from transforms.lerobot.sources import load_info
from transforms.output.paths import output_part_path

V3_FILE = "meta/episodes/chunk-000/file-000.parquet"


def test_each_unit_finds_its_layout():
    assert isinstance(layouts.layout_of(V3_FILE), layouts.V3EpisodesFiles)
    assert isinstance(layouts.layout_of(v2.group_name(3)), layouts.V2Groups)
    assert layouts.layout_of(V3_FILE).sized_by_footers and not layouts.layout_of("meta/episodes.jsonl:chunk-000"
                                                                                 ).sized_by_footers
    # the output of each, through the same path function
    assert output_part_path(V3_FILE, 0, 1) == "episodes/chunk-000/file-000.parquet"
    assert output_part_path(V3_FILE, 2, 3) == "episodes/chunk-000/file-000.part-0002.parquet"
    assert output_part_path("meta/episodes.jsonl:chunk-003", 0, 1) == "episodes/chunk-003.parquet"
    assert output_part_path("meta/episodes.jsonl:chunk-003", 1, 2) == "episodes/chunk-003.part-0001.parquet"


def test_read_unit_rows_reads_both_versions_alike(tmp_path):
    """The same episodes, as a v3.0 episodes file and as the v2.1 group they were repacked into, read through
    the one function: the same episodes, tasks and lengths."""
    root = lerobot_dataset("so101_av1")
    info, _, _ = load_info(str(root), skip_videos=False)
    v3_rows = layouts.read_unit_rows(str(root), V3_FILE, info)
    assert v3_rows == read_episodes_file(str(root), V3_FILE, info)
    old = repack_v21(root, tmp_path / "v21")
    old_info, _, _ = load_info(str(old), skip_videos=False)
    units = check_dataset(str(old)).episodes_files
    assert units == ("meta/episodes.jsonl:chunk-000",)
    v2_rows = layouts.read_unit_rows(str(old), units[0], old_info)
    assert [(r.episode_index, sorted(r.tasks), r.length) for r in v2_rows] == \
        [(r.episode_index, sorted(r.tasks), r.length) for r in v3_rows]
    assert all(r.whole_file for r in v2_rows) and not any(r.whole_file for r in v3_rows)
    assert v2_rows[1].data_file == "data/chunk-000/episode_000001.parquet"


def test_a_failed_unit_still_accounts_for_its_episodes(tmp_path):
    root = lerobot_dataset("so101_av1")
    info, _, _ = load_info(str(root), skip_videos=False)
    assert layouts.layout_of(V3_FILE).failed_episodes(str(root), V3_FILE, info) == (0, 1, 2, 3)
    assert layouts.layout_of(V3_FILE).failed_episodes(str(root), "meta/episodes/chunk-009/none.parquet", info) == ()
    old = repack_v21(root, tmp_path / "v21")
    group = "meta/episodes.jsonl:chunk-000"
    assert layouts.layout_of(group).failed_episodes(str(old), group, None) == (0, 1, 2, 3)
    with pytest.raises(LeRobotImportError) as err:
        layouts.read_unit_rows(str(root), "meta/episodes/chunk-009/none.parquet", info)
    assert err.value.file == "meta/episodes/chunk-009/none.parquet"


def test_info_chooses_the_layout_and_each_layout_knows_its_unit_names(tmp_path):
    root = lerobot_dataset("so101_av1")
    info, _, _ = load_info(str(root), skip_videos=False)
    old_info, _, _ = load_info(str(repack_v21(root, tmp_path / "v21")), skip_videos=False)
    assert isinstance(layouts.layout_for(info), layouts.V3EpisodesFiles)
    assert isinstance(layouts.layout_for(old_info), layouts.V2Groups)
    v3, groups = layouts.layout_of(V3_FILE), layouts.layout_of("meta/episodes.jsonl:chunk-000")
    assert v3.names_unit(V3_FILE) and not v3.names_unit("data/chunk-000/file-000.parquet")
    assert groups.names_unit("meta/episodes.jsonl:chunk-000") and not groups.names_unit("meta/episodes.jsonl:a/b")
    assert groups.episodes_own_files and not v3.episodes_own_files
