"""One test per dataset rule that needs no MP4, on dataset variants made here.

Each checks: the run exits non-zero; errors.jsonl names the rule, the file and the episode; the
failed episodes file has no part; the other episodes file still imports; the manifest adds up.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from tests.helpers import read_errors, read_manifest, run_import
from tests.dataset_factory import DatasetSpec, edit_episodes, edit_info, write_dataset

# Two episodes files (episodes 0-1 and 2-3) over two data files (the same split).
SPEC = DatasetSpec(lengths=(5, 7, 6, 4), episodes_per_meta_file=2, episodes_per_data_file=2, features={
    "observation.state": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
    "observation.matrix": {"dtype": "float32", "shape": [2, 3], "names": ["rows", "cols"]},
    "observation.image": {"dtype": "image", "shape": [4, 6, 3], "names": ["height", "width", "channels"]},
    "next.done": {"dtype": "bool", "shape": [1], "names": None},
})
FILE0, FILE1 = "meta/episodes/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-001.parquet"
DATA0 = "data/chunk-000/file-000.parquet"


def _replace_column(table: pa.Table, name: str, array: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), pa.field(name, array.type), array)


def _data_edit(edit):
    """A mutate_data hook that edits data file 0 only."""
    return lambda table, number: edit(table) if number == 0 else table


def _wrong_list_length(t: pa.Table) -> pa.Table:
    values = t.column("observation.state").combine_chunks()
    py = values.to_pylist()
    py[2] = py[2][:2]
    return _replace_column(t, "observation.state", pa.array(py, pa.list_(pa.float32())))


def _index_gap(t: pa.Table) -> pa.Table:
    idx = t.column("index").to_numpy().copy()
    idx[8:] += 1
    return _replace_column(t, "index", pa.array(idx))


def _pixels(t: pa.Table) -> pa.Table:
    pixels = pa.array([[1, 2, 3]] * t.num_rows, pa.list_(pa.uint8()))
    return _replace_column(t, "observation.image", pixels)


def _edit_length(t: pa.Table) -> pa.Table:
    lengths = t.column("length").to_numpy().copy()
    lengths[1] += 1
    return _replace_column(t, "length", pa.array(lengths))


def _beyond_file(t: pa.Table) -> pa.Table:
    to = t.column("dataset_to_index").to_numpy().copy()
    lengths = t.column("length").to_numpy().copy()
    to[1] += 3
    lengths[1] += 3
    t = _replace_column(t, "dataset_to_index", pa.array(to))
    return _replace_column(t, "length", pa.array(lengths))


# name: (dataset-level?, how to break it, rule, episode named or None, words the message must hold)
CASES = {
    "codebase_version": (True, lambda r: edit_info(r, lambda i: i.update(codebase_version="v2.1")),
                         "codebase_version", None, ["v2.1", "v3.0"]),
    "missing_data_path": (True, lambda r: edit_info(r, lambda i: i.pop("data_path")),
                          "missing_data_path", None, ["data_path"]),
    "video_without_video_path": (True, lambda r: edit_info(r, lambda i: i["features"].update(
        {"observation.images.top": {"dtype": "video", "shape": [4, 6, 3], "names": None}})),
        "missing_video_path", None, ["observation.images.top", "video_path"]),
    "unknown_placeholder": (True, lambda r: edit_info(r, lambda i: i.update(
        data_path="data/chunk-{chunk_index:03d}/file-{file_idx:03d}.parquet")),
        "path_template", None, ["file_idx"]),
    "unclosed_brace": (True, lambda r: edit_info(r, lambda i: i.update(
        data_path="data/chunk-{chunk_index:03d/file-{file_index:03d}.parquet")),
        "path_template", None, ["brace"]),
    "path_escapes_root": (True, lambda r: edit_info(r, lambda i: i.update(
        data_path="../outside/file-{file_index:03d}.parquet")),
        "path_template", None, ["inside the dataset root"]),
    "unknown_dtype": (True, lambda r: edit_info(r, lambda i: i["features"]["observation.state"].update(
        dtype="complex64")), "unknown_dtype", None, ["observation.state", "complex64"]),
    "bool_shape": (True, lambda r: edit_info(r, lambda i: i["features"]["next.done"].update(shape=[2])),
                   "scalar_shape", None, ["next.done", "[2]"]),
    "missing_column": (False, _data_edit(lambda t: t.drop_columns(["observation.matrix"])),
                       "missing_column", 0, ["observation.matrix", DATA0]),
    "wrong_list_length": (False, _data_edit(_wrong_list_length), "column_type", 0,
                          ["observation.state", "length 2", "expected 3"]),
    "image_not_struct": (False, _data_edit(_pixels), "image_column", 0, ["observation.image", "bytes"]),
    "index_not_consecutive": (False, _data_edit(_index_gap), "index_not_consecutive", 0, ["not consecutive"]),
    "length_mismatch": (False, lambda r: edit_episodes(r, _edit_length), "length_mismatch", 1,
                        ["episode 1 spans frames 5..12 but has length 8"]),
    "frames_outside_file": (False, lambda r: edit_episodes(r, _beyond_file), "frames_outside_file", 1,
                            ["episode 1 spans frames 5..15, outside its data file's 0..12"]),
    "data_file_missing": (False, lambda r: os.remove(r / DATA0), "file_missing", 0, [DATA0, "does not exist"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule(case, tmp_path):
    dataset_level, breaker, rule, episode, words = CASES[case]
    root = tmp_path / "ds"
    if case in ("missing_column", "wrong_list_length", "image_not_struct", "index_not_consecutive"):
        spec = DatasetSpec(**{**SPEC.__dict__, "list_kind": "list"}) if case == "wrong_list_length" else SPEC
        write_dataset(root, spec, mutate_data=breaker)
    else:
        write_dataset(root, SPEC)
        breaker(root)
    out = tmp_path / "out"
    assert run_import(root, out) == 1

    errors = read_errors(out)
    manifest = read_manifest(out)
    assert errors, "errors.jsonl must list the failure"
    ours = [e for e in errors if e["rule"] == rule]
    assert ours, errors
    first = ours[0]
    assert first["dataset"] == "file://" + str(root)
    for word in words:
        assert word in first["message"], (word, first["message"])
    assert f"[{rule}]" in first["message"] and FILE0 in first["message"]
    if episode is not None:
        assert first["episode_index"] == episode and f"episode {episode}" in first["message"]
    failed_files = {e["episodes_file"] for e in errors}
    assert FILE0 in failed_files
    assert not (out / "episodes" / "chunk-000" / "file-000.parquet").exists()
    # Every episode of a failed episodes file is accounted for in errors.jsonl.
    assert {e["episode_index"] for e in errors if e["episodes_file"] == FILE0} >= {0, 1}
    totals = manifest["totals"]
    assert totals["episodes"] == totals["episodes_written"] + totals["episodes_failed"]
    assert manifest["status"] == "failed"
    if dataset_level:
        assert FILE1 in failed_files and not (out / "episodes" / "chunk-000" / "file-001.parquet").exists()
        assert first["file"] == "meta/info.json"
    else:
        assert FILE1 not in failed_files
        part = out / "episodes" / "chunk-000" / "file-001.parquet"
        assert part.exists()
        assert manifest["episodes_files"][FILE1]["status"] == "imported"
        assert manifest["episodes_files"][FILE0]["status"] == "failed"
        assert totals["episodes_written"] == 2 and totals["episodes_failed"] == 2
    # Nothing half-written: no temporary files anywhere in the output.
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


def test_video_file_missing(tmp_path):
    """A declared camera whose MP4 is absent fails its episodes file with the expected path."""
    spec = DatasetSpec(lengths=(4, 5), features={
        "observation.state": {"dtype": "float32", "shape": [2], "names": None},
        "observation.images.top": {"dtype": "video", "shape": [4, 6, 3], "names": None,
                                   "info": {"video.codec": "av1"}}})
    root = write_dataset(tmp_path / "ds", spec)
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    errors = read_errors(out)
    missing = [e for e in errors if e["rule"] == "file_missing"]
    assert missing and missing[0]["file"] == "videos/observation.images.top/chunk-000/file-000.mp4"
    assert "does not exist" in missing[0]["message"]
    assert {e["episode_index"] for e in errors} == {0, 1}
    assert not list((out / "episodes").rglob("*.parquet")) if (out / "episodes").exists() else True


def test_rerun_after_fix_replaces_failure(tmp_path):
    """A failed episodes file leaves nothing; fixing the dataset and rerunning imports it."""
    root = write_dataset(tmp_path / "ds", SPEC)
    out = tmp_path / "out"
    (root / DATA0).rename(tmp_path / "saved.parquet")
    assert run_import(root, out) == 1
    (tmp_path / "saved.parquet").rename(root / DATA0)
    assert run_import(root, out) == 0
    assert read_errors(out) == []
    assert (out / "episodes" / "chunk-000" / "file-000.parquet").exists()
