"""A real user-recorded dataset whose MP4s were not published (third_party/record-test, outside the project:
these tests skip, naming the folder, when it is absent)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq

from tests.arrow_compare import rows, schema_signature
from tests.helpers import OracleError, copy_dataset, read_errors, read_part, run_import, run_oracle, third_party_path

EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def test_missing_videos_fail_naming_the_expected_file(tmp_path):
    root = third_party_path("record-test")
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    errors = read_errors(out)
    missing = [e for e in errors if e["rule"] == "file_missing"]
    assert missing, errors
    expected = {"videos/observation.images.front/chunk-000/file-000.mp4",
                "videos/observation.images.top/chunk-000/file-000.mp4"}
    assert {e["file"] for e in missing} <= expected
    assert "does not exist" in missing[0]["message"] and missing[0]["file"] in missing[0]["message"]
    assert {e["episode_index"] for e in errors} == {0, 1, 2, 3}
    assert not (out / "episodes").exists() or not list((out / "episodes").rglob("*.parquet"))


def _frames_only_copy(tmp_path):
    copy = copy_dataset(third_party_path("record-test"), tmp_path / "record-test")
    info = json.loads((copy / "meta" / "info.json").read_text())
    info["features"] = {k: v for k, v in info["features"].items() if v["dtype"] != "video"}
    (copy / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    return copy


def test_frames_read_correctly_without_videos(tmp_path, oracle_dir):
    """With the video features removed, the frames equal the data file's values and the reference's."""
    copy = _frames_only_copy(tmp_path)
    out = tmp_path / "out"
    assert run_import(copy, out, "--one-part") == 0
    part = read_part(out)
    data = pq.read_table(copy / "data" / "chunk-000" / "file-000.parquet")
    frames = part.column("frames").combine_chunks().flatten()
    assert part.column("length").to_pylist() == [len(x) for x in part.column("frames").to_pylist()]
    assert len(frames) == data.num_rows == 1492
    state = np.stack(frames.field("observation.state").storage.to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(state, np.stack(data.column("observation.state").to_numpy()))
    np.testing.assert_array_equal(frames.field("index").to_numpy(), data.column("index").to_numpy())
    try:
        reference = run_oracle(copy, EPISODES, oracle_dir)
    except OracleError as ex:
        raise AssertionError(f"the reference rejected the frames-only copy: {ex}")
    assert schema_signature(part.schema) == schema_signature(reference.schema)
    assert rows(part) == rows(reference)


def test_skip_videos_option_imports_the_frames(tmp_path):
    """--skip-videos imports the same episodes as the copy without video features."""
    out_skip, out_copy = tmp_path / "skip", tmp_path / "copy"
    assert run_import(third_party_path("record-test"), out_skip, "--skip-videos") == 0
    assert run_import(_frames_only_copy(tmp_path), out_copy) == 0
    assert read_part(out_skip).equals(read_part(out_copy))
