"""Conformance with the reference implementation: for every LeRobot-writer dataset of the project
(tests/data/lerobot, and LeRobot 0.6.1's depth datasets in tests/data/lerobot061) and every one of its
episodes files, our episodes equal spiral-sdk's `spql.lerobot.episodes` output (tests/oracle.py) — schema and
every value, MediaIndex included.

The `language` dataset is one the reference rejects (dtype `language`); its conformance is checked on
a copy without the two language features, and the full import is checked in test_language_import.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.arrow_compare import rows, schema_signature
from tests.helpers import (SAMPLE, OracleError, copy_dataset, lerobot061_corpus, lerobot_corpus, read_manifest,
                           run_import, run_oracle, spiral_available)

# LeRobot 0.6.1's depth datasets too: the reference types a depth camera as any camera, and so does the import
# (its depth facts are in the schema's metadata, which the equality leaves alone)
DATASETS = lerobot_corpus() + lerobot061_corpus()


def _reference_ready(name: str, root: Path, tmp: Path) -> Path:
    """The dataset the reference accepts: language features removed for `language`."""
    if name != "language":
        return root
    copy = copy_dataset(root, tmp / "language-no-lang")
    info = json.loads((copy / "meta" / "info.json").read_text())
    for key in ("language_persistent", "language_events"):
        info["features"].pop(key)
    (copy / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    return copy


@pytest.fixture(scope="module", params=[p.name for p in DATASETS])
def imported(request, tmp_path_factory):
    """(name, dataset root, inline-index output, default output) for one corpus dataset."""
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    root = _reference_ready(name, next(p for p in DATASETS if p.name == name), tmp)
    inline, default = tmp / "inline", tmp / "default"
    assert run_import(root, inline, "--one-part", "--inline-index") == 0, (inline / "errors.jsonl").read_text()
    assert run_import(root, default, "--one-part") == 0, (default / "errors.jsonl").read_text()
    return name, root, inline, default


def _episodes_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "meta" / "episodes").glob("*/*.parquet"))


def test_inline_parts_equal_reference(imported, oracle_dir):
    name, root, inline, _ = imported
    files = _episodes_files(root)
    assert files
    for rel in files:
        try:
            reference = run_oracle(root, rel, oracle_dir)
        except OracleError as ex:
            pytest.fail(f"the reference rejected {name}/{rel}: {ex}")
        ours = pq.read_table(inline / "episodes" / rel[len("meta/episodes/"):])
        assert schema_signature(ours.schema) == schema_signature(reference.schema), rel
        ours_rows, ref_rows = rows(ours), rows(reference)
        assert len(ours_rows) == len(ref_rows) > 0
        for a, b in zip(ours_rows, ref_rows):
            assert a["episode_index"] == b["episode_index"]
            for field in a:
                assert a[field] == b[field], f"{name}/{rel} episode {a['episode_index']} field {field}"


def test_default_layout_moves_index_to_media_index(imported, oracle_dir):
    """Default layout: parts equal the reference with clip.media.index null, and each media_index row
    equals the index the reference puts in that file's episodes."""
    name, root, inline, default = imported
    reference_index: dict[str, object] = {}
    for rel in _episodes_files(root):
        reference = rows(run_oracle(root, rel, oracle_dir))
        ours = rows(pq.read_table(default / "episodes" / rel[len("meta/episodes/"):]))
        for a, b in zip(ours, reference):
            for key, video in (b.get("videos") or {}).items():
                media = video["clip"]["media"]
                reference_index.setdefault(media["source"]["uri"], media["index"])
                assert a["videos"][key]["clip"]["media"]["index"] is None
                media_without = dict(media, index=None)
                assert a["videos"][key]["clip"]["media"] == media_without
                assert a["videos"][key]["time_origin"] == video["time_origin"]
            assert {k: v for k, v in a.items() if k != "videos"} == {k: v for k, v in b.items() if k != "videos"}
    manifest = read_manifest(default)
    if not reference_index:
        assert manifest["media_index"] == []
        return
    table = pa.concat_tables(pq.read_table(default / p) for p in manifest["media_index"])
    uris = table.column("uri").to_pylist()
    assert uris == sorted(uris) == sorted(reference_index)
    for row in rows(table):
        assert row["index"] == reference_index[row["uri"]], row["uri"]
    assert table.column("size").to_pylist() == [Path(u[len("file://"):]).stat().st_size for u in uris]


def test_datasets_are_there():
    """Conformance runs on every LeRobot-writer dataset of the project: none may silently go missing."""
    assert [p.name for p in DATASETS] == ["h264_multi_file", "images_and_tensors", "language", "so101_av1",
                                          "depth_image", "depth_video"]


def test_oracle_is_available(oracle_dir):
    """The reference is installed (the test extra pins it) and answers on the sample with its own values."""
    assert spiral_available() is None
    reference = run_oracle(SAMPLE, "meta/episodes/chunk-000/file-000.parquet", oracle_dir)
    assert reference.column_names == ["episode_index", "tasks", "length", "frames", "videos"]
    assert reference.column("episode_index").to_pylist() == [0, 1, 2, 3]
    assert reference.column("length").to_pylist() == [12, 9, 15, 10]
    assert [len(f) for f in reference.column("frames").to_pylist()] == [12, 9, 15, 10]
    assert reference.schema.field("videos").type.names == ["observation.images.front", "observation.images.wrist"]


def test_oracle_reports_the_reference_error(oracle_dir):
    """A dataset the reference rejects raises OracleError carrying the reference's own words."""
    with pytest.raises(OracleError, match="unknown dtype `language`"):
        run_oracle(next(p for p in DATASETS if p.name == "language"), "meta/episodes/chunk-000/file-000.parquet",
                   oracle_dir)
