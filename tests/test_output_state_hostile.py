"""The output's own state turned against the user: a manifest naming paths outside the output, managed
folders that are symlinks, a user's files among the import's, FIFOs and devices where the state's files
go. Each case runs through the CLI (import, verify, plan) and checks the exact refusal, and that nothing
outside OUT (the dataset included) changed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from pipelines import plan, verify
from tests.helpers import imported_sample, read_manifest, run_import

EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"
PART = "episodes/chunk-000/file-000.parquet"
FRONT = "media_index/videos/observation.images.front"


def _tree(root: Path) -> dict[str, str]:
    """Every entry under `root` without following links: files by digest, links by target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = "special"
    return out


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> tuple[Path, Path]:
    return imported_sample(tmp_path_factory.mktemp("state"))


@pytest.fixture
def case(imported, tmp_path) -> tuple[Path, Path]:
    """(a dataset copy, a copy of its import) in a fresh folder, to damage."""
    dataset = Path(shutil.copytree(imported[0], tmp_path / "so101", symlinks=True))
    out = Path(shutil.copytree(imported[1], tmp_path / "out", symlinks=True))
    doc = json.loads((out / "manifest.json").read_text())
    doc["dataset"] = "file://" + str(dataset)  # the copy is the dataset of the copied output
    (out / "manifest.json").write_text(json.dumps(doc))
    return dataset, out


def _edit_manifest(out: Path, edit) -> None:
    doc = json.loads((out / "manifest.json").read_text())
    edit(doc)
    (out / "manifest.json").write_text(json.dumps(doc))


def test_manifest_key_with_dotdot_deletes_nothing_outside(case, tmp_path, capsys):
    dataset, out = case
    # An entry for a "removed" episodes file whose output path climbs out of OUT into the dataset.
    escape = "../../so101/meta/episodes/chunk-000/file-000"
    _edit_manifest(out, lambda d: d["episodes_files"].__setitem__(
        escape + ".parquet", {"status": "imported", "parts": [f"episodes/{escape}.parquet"]}))
    before = _tree(tmp_path)
    assert run_import(dataset, out) == 1
    assert (f"error: [output_confinement] file manifest.json: the manifest lists the episodes file "
            f"'{escape}.parquet', which is not a clean relative path (the output of an episodes file lies under "
            f"episodes/); the import writes, reads and deletes its own state only inside its output file://{out}, "
            "so it stops here. Restore the output from the import that wrote it, or remove it and import again"
            ) in capsys.readouterr().out
    assert _tree(tmp_path) == before, "nothing inside or outside the output was written or deleted"
    # verify and plan refuse the same manifest by the same rule, and read nothing it names
    (out / "manifest.json").write_text(json.dumps({"episodes_files": {"x.parquet": {"parts": [
        "episodes/../../so101/meta/info.json"]}}}))
    report, = verify.verify(str(out))
    assert [(p.path, p.kind) for p in report.problems] == [("manifest.json", "confinement")]
    assert "the manifest lists the episode part 'episodes/../../so101/meta/info.json', which is not a clean " \
           "relative path inside the output" in report.problems[0].message
    assert plan.run(["--dataset", str(dataset), "--output", str(out)]) == 1
    assert "cannot import: [output_confinement]" in capsys.readouterr().out


@pytest.mark.parametrize("managed", [FRONT, "episodes/chunk-000", "media_index"])
def test_managed_folder_symlink_is_refused_before_any_write(case, tmp_path, managed, capsys):
    dataset, out = case
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(out / managed), str(elsewhere))
    (out / managed).symlink_to(elsewhere, target_is_directory=True)
    (dataset / "meta" / "info.json").touch()  # a change, so a run would rewrite
    before = _tree(tmp_path)
    assert run_import(dataset, out, "--force") == 1
    printed = capsys.readouterr().out
    assert f"error: [output_confinement] file {managed}: {managed} is a symlink (to {elsewhere}); the import " \
           f"writes, reads and deletes its own state only inside its output file://{out}" in printed, printed
    assert _tree(tmp_path) == before, "nothing was written, moved or deleted"
    report, = verify.verify(str(out))
    assert [(p.path, p.kind) for p in report.problems] == [(managed, "confinement")]
    assert plan.run(["--dataset", str(dataset), "--output", str(out)]) == 1
    assert f"cannot import: [output_confinement] file {managed}: {managed} is a symlink" in capsys.readouterr().out


def test_dangling_lease_lock_symlink_creates_nothing(case, tmp_path, capsys):
    dataset, out = case
    target = tmp_path / "created-by-import"
    (out / ".lease.json.lock").unlink(missing_ok=True)  # a released lease leaves none
    (out / ".lease.json.lock").symlink_to(target)
    assert run_import(dataset, out, "--force") == 1
    assert "error: [output_confinement] file .lease.json.lock: .lease.json.lock is a symlink" in capsys.readouterr().out
    assert not target.exists() and not target.is_symlink()


@pytest.mark.parametrize("name", [".lease.json", "manifest.json", "errors.jsonl"])
def test_fifo_state_file_is_refused_in_bounded_time(case, name, capsys):
    dataset, out = case
    (out / name).unlink(missing_ok=True)
    os.mkfifo(out / name)
    start = time.monotonic()
    assert run_import(dataset, out, "--force") == 1
    assert f"error: [output_confinement] file {name}: {name} is a FIFO (named pipe), not a regular file" \
        in capsys.readouterr().out
    report, = verify.verify(str(out))
    assert [(p.path, p.kind) for p in report.problems] == [(name, "confinement")]
    assert time.monotonic() - start < 300  # a hang never ends; a loaded machine is slow


def test_user_files_under_media_index_are_kept_and_named(case):
    dataset, out = case
    (out / "media_index" / "README.md").write_text("ours")
    (out / "media_index" / "old").mkdir()
    (out / "media_index" / "old" / "part-00000.parquet").write_bytes(b"kept by a user")
    (out / "media_index" / ".x.parquet.tmp-mine").write_bytes(b"not a name the import gives")
    own_tmp = out / FRONT / (".chunk-000.parquet.tmp-" + "0" * 32)
    own_tmp.write_bytes(b"left by a crashed run")
    assert run_import(dataset, out, "--force") == 0
    assert (out / "media_index" / "README.md").read_text() == "ours"
    assert (out / "media_index" / "old" / "part-00000.parquet").read_bytes() == b"kept by a user"
    assert (out / "media_index" / ".x.parquet.tmp-mine").exists()
    assert not own_tmp.exists(), "the import's own temporary is its to remove"
    assert read_manifest(out)["notes"] == [
        "3 files under media_index/ that this import did not write were left as they are (media_index/.x.parquet"
        ".tmp-mine, media_index/README.md, media_index/old/part-00000.parquet): the import manages that folder, "
        "so keep other files elsewhere"]


def test_removed_episodes_file_deletes_only_its_listed_parts(case):
    dataset, out = case
    # the manifest records a second episodes file, gone from the dataset now, with one listed part
    listed = out / "episodes" / "chunk-000" / "file-009.parquet"
    unlisted = out / "episodes" / "chunk-000" / "file-009.part-0001.parquet"
    listed.write_bytes(b"a part the last run wrote")
    unlisted.write_bytes(b"a user's copy with a part name")
    _edit_manifest(out, lambda d: d["episodes_files"].__setitem__(
        "meta/episodes/chunk-000/file-009.parquet",
        {"status": "imported", "parts": ["episodes/chunk-000/file-009.parquet"], "episodes": 0}))
    os.utime(dataset / "meta" / "info.json")  # the dataset changed since: the run is not skipped
    assert run_import(dataset, out) == 0
    assert not listed.exists()
    assert unlisted.read_bytes() == b"a user's copy with a part name"
    assert read_manifest(out)["episodes_files"]["meta/episodes/chunk-000/file-009.parquet"]["status"] == "removed"


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_verify_never_reads_a_part_that_is_a_device_or_fifo(case, kind):
    _, out = case
    (out / PART).unlink()
    if kind == "device":
        (out / PART).symlink_to("/dev/zero")
        expected = f"{PART} is a symlink (to /dev/zero)"
    else:
        os.mkfifo(out / PART)
        expected = f"{PART} is a FIFO (named pipe), not a regular file"
    start = time.monotonic()
    report, = verify.verify(str(out))
    assert time.monotonic() - start < 300  # a hang never ends; a loaded machine is slow
    assert [(p.path, p.kind) for p in report.problems] == [(PART, "confinement")]
    assert report.problems[0].message.startswith(expected), report.problems[0].message


def test_moved_dataset_cannot_be_read_is_not_gone(case, capsys):
    dataset, out = case
    moved = dataset.with_name("so101-moved")
    dataset.rename(moved)
    report, = verify.verify(str(out), check_sources=True)
    stale = [p for p in report.problems if p.kind in ("stale", "sources")]
    assert [(p.path, p.kind) for p in stale] == [("manifest.json", "sources")]
    assert f"the dataset file://{dataset} cannot be read (" in stale[0].message
    assert "the next run fails it and removes none of this output" in stale[0].message
    assert "gone" not in stale[0].message
    assert plan.run(["--dataset", str(dataset), "--output", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "0 to remove" in printed and "cannot import: the dataset cannot be read (" in printed, printed
