"""Imports that could destroy data: names that look like wildcards, outputs placed over the input.

Both are refused or handled at their root: dataset-derived names are never used as glob patterns,
and an output that overlaps its dataset is refused before anything runs.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from tests.helpers import SAMPLE, read_errors, read_manifest, run_import


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _sample(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SAMPLE, tmp_path / "so101"))


@pytest.mark.parametrize("name", ["*.parquet", "file-[0].parquet", "file-?.parquet", "[a-z]*.parquet"])
def test_wildcard_episodes_file_name_touches_no_other_output(tmp_path, name):
    root = _sample(tmp_path)
    episodes = root / "meta" / "episodes" / "chunk-000"
    shutil.copy(episodes / "file-000.parquet", episodes / name)
    out = tmp_path / "out"
    # Outputs that belong to neither episodes file of this run: a wildcard read as a pattern would
    # match them (`*.part-*.parquet`, `.*.parquet.tmp-*`) and the failed file's clean-up remove them.
    kept = out / "episodes" / "chunk-000"
    kept.mkdir(parents=True)
    for other in ("other.part-0001.parquet", ".other.parquet.tmp-0123", "file-0.parquet", ".file-0.parquet.tmp-1"):
        (kept / other).write_bytes(b"someone else's output")
    before = _tree_digest(out)
    assert run_import(root, out) == 1  # the copy repeats every episode_index of file-000
    errors = read_errors(out)
    assert {e["rule"] for e in errors} == {"duplicate_episode"}
    assert {e["episodes_file"] for e in errors} == {"meta/episodes/chunk-000/file-000.parquet",
                                                    f"meta/episodes/chunk-000/{name}"}
    after = _tree_digest(out)
    assert {k: after.get(k) for k in before} == before, "another output was changed or removed"
    assert read_manifest(out)["totals"]["episodes_files"] == 2


def test_wildcard_name_imports_beside_other_files(tmp_path):
    """A lone episodes file called `*.parquet` imports, and its output is exactly its own."""
    root = _sample(tmp_path)
    episodes = root / "meta" / "episodes" / "chunk-000"
    (episodes / "file-000.parquet").rename(episodes / "*.parquet")
    out = tmp_path / "out"
    other = out / "episodes" / "chunk-000" / "file-000.parquet"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"not ours to remove")
    assert run_import(root, out) == 0
    assert (out / "episodes" / "chunk-000" / "*.parquet").stat().st_size > 1000
    assert other.read_bytes() == b"not ours to remove"


@pytest.mark.parametrize("where", ["root", "meta", "meta/episodes", "data/chunk-000", "new/sub"])
def test_output_inside_dataset_is_refused(tmp_path, where, capsys):
    root = _sample(tmp_path)
    before = _tree_digest(root)
    out = root if where == "root" else root / where
    with pytest.raises(SystemExit) as raised:
        run_import(root, out)
    message = str(raised.value)
    assert "never writes inside its input" in message and str(root) in message, message
    assert _tree_digest(root) == before
    assert not (root / "new").exists()


@pytest.mark.parametrize("managed", ["episodes", "media_index"])
def test_dataset_inside_output_managed_folder_is_refused(tmp_path, managed):
    out = tmp_path / "out"
    root = Path(shutil.copytree(SAMPLE, out / managed / "so101"))
    before = _tree_digest(root)
    with pytest.raises(SystemExit) as raised:
        run_import(root, out)
    assert "inside the output" in str(raised.value) and "overwrite or remove" in str(raised.value)
    assert _tree_digest(root) == before


def test_output_through_symlink_into_dataset_is_refused(tmp_path):
    root = _sample(tmp_path)
    link = tmp_path / "looks_elsewhere"
    link.symlink_to(root / "meta")
    with pytest.raises(SystemExit) as raised:
        run_import(root, link)
    assert "never writes inside its input" in str(raised.value)


def test_sibling_output_is_accepted(tmp_path):
    root = _sample(tmp_path)
    out = tmp_path / "so101-import"  # shares a name prefix with the dataset, but is not inside it
    assert run_import(root, out) == 0
    assert read_manifest(out)["totals"]["episodes_written"] == 4


@pytest.mark.parametrize("dataset, output", [
    ("gs://bkt/datasets/so101", "gs://bkt/datasets/so101/meta"),
    ("gs://bkt/datasets/so101", "gs://bkt/datasets/so101/"),
    ("s3://bkt/ds", "s3://bkt/ds/new/sub"),
    ("gs://bkt/out/episodes/so101", "gs://bkt/out"),
])
def test_object_store_overlap_is_refused_before_any_request(dataset, output):
    """The placement check is pure on object stores: refused before a single request is made."""
    with pytest.raises(SystemExit) as raised:
        run_import(dataset, output)
    message = str(raised.value)
    assert "never writes inside its input" in message or "inside the output" in message, message


def test_memory_output_inside_memory_dataset_is_refused():
    import fsspec
    fs = fsspec.filesystem("memory")
    fs.put(str(SAMPLE) + "/", "/safety/so101", recursive=True)
    try:
        before = {p: fs.cat_file(p) for p in fs.find("/safety")}
        assert "/safety/so101/meta/info.json" in before
        with pytest.raises(SystemExit) as raised:
            run_import("memory://safety/so101", "memory://safety/so101/meta/episodes")
        assert "never writes inside its input" in str(raised.value)
        assert {p: fs.cat_file(p) for p in fs.find("/safety")} == before
    finally:
        fs.rm("/safety", recursive=True)


def test_sibling_memory_output_is_accepted():
    import fsspec
    fs = fsspec.filesystem("memory")
    fs.put(str(SAMPLE) + "/", "/sibling/so101", recursive=True)
    try:
        assert run_import("memory://sibling/so101", "memory://sibling/so101-out") == 0
        assert fs.exists("/sibling/so101-out/manifest.json")
        assert not [p for p in fs.find("/sibling/so101") if "episodes/chunk-000/file-000.parquet" in p
                    and not p.startswith("/sibling/so101/meta/")]
    finally:
        fs.rm("/sibling", recursive=True)
