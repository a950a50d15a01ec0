"""Per-episodes-file source fingerprints and the import / unchanged / removed decision, on local files and
memory://: what changes which episodes file's digest, and what a run would do about it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import fsspec
import pytest

from tests.dataset_factory import DatasetSpec, edit_info, write_dataset
from tests.helpers import SAMPLE, copy_dataset
from transforms.base import storage
from transforms.lerobot import sources
from transforms.lerobot.sources import IMPORT, REMOVED, UNCHANGED

OPTIONS = {"one_part": False, "data_span_limit": 64 * 1024 * 1024, "inline_index": False, "skip_videos": False}
EF = "meta/episodes/chunk-000/file-{:03d}.parquet"
DATA = "data/chunk-000/file-{:03d}.parquet"


def _dataset(root: Path) -> Path:
    """Three episodes files of two episodes; data files of three episodes, so file 1 spans data 0 and 1."""
    return write_dataset(root, DatasetSpec(lengths=(5, 7, 6, 4, 3, 8), episodes_per_meta_file=2,
                                           episodes_per_data_file=3))


def _touch(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def _manifest(scanned: sources.DatasetSources, status: str = "imported") -> dict:
    """What an import of `scanned` records (per episodes file: status and sources)."""
    return {"options": OPTIONS, "episodes_files": {f.episodes_file: {"status": status, **f.to_manifest()}
                                                    for f in scanned.files}}


def _actions(root, previous, **kw) -> list[tuple[str, str, str]]:
    scanned = sources.scan_dataset(str(root), OPTIONS, previous_manifest=previous)
    return [(d.episodes_file, d.action, d.reason) for d in sources.decide(scanned.files, previous, **kw)]


def test_references_and_sizes_per_episodes_file(tmp_path):
    root = _dataset(tmp_path / "ds")
    scanned = sources.scan_dataset(str(root), OPTIONS)
    assert scanned.root == f"file://{root}" and scanned.info_problem is None
    got = {f.episodes_file: (f.data_files, f.video_files, f.data_bytes, len(f.rows)) for f in scanned.files}
    size = {i: (root / DATA.format(i)).stat().st_size for i in (0, 1)}
    assert got == {EF.format(0): ((DATA.format(0),), (), size[0], 2),
                   EF.format(1): ((DATA.format(0), DATA.format(1)), (), size[0] + size[1], 2),
                   EF.format(2): ((DATA.format(1),), (), size[1], 2)}
    assert len({f.digest for f in scanned.files}) == 3


def test_sample_references_its_mp4s(tmp_path):
    root = copy_dataset(SAMPLE, tmp_path / "so101")
    (src,) = sources.scan_dataset(str(root), OPTIONS).files
    assert src.video_files == ("videos/observation.images.front/chunk-000/file-000.mp4",
                               "videos/observation.images.wrist/chunk-000/file-000.mp4")
    (no_videos,) = sources.scan_dataset(str(root), OPTIONS | {"skip_videos": True}).files
    assert no_videos.video_files == () and no_videos.digest != src.digest


def test_a_changed_data_file_makes_only_its_episodes_files_stale(tmp_path):
    root = _dataset(tmp_path / "ds")
    previous = _manifest(sources.scan_dataset(str(root), OPTIONS))
    assert {a for _, a, _ in _actions(root, previous)} == {UNCHANGED}
    _touch(root / DATA.format(1))
    assert _actions(root, previous) == [(EF.format(0), UNCHANGED, "unchanged"),
                                        (EF.format(1), IMPORT, "sources changed"),
                                        (EF.format(2), IMPORT, "sources changed")]


def test_appended_episodes_files_are_new_and_info_totals_change_nothing(tmp_path):
    root = _dataset(tmp_path / "ds")
    previous = _manifest(sources.scan_dataset(str(root), OPTIONS))
    shutil.copy(root / EF.format(2), root / EF.format(3))
    edit_info(root, lambda info: info.update(total_episodes=8, total_frames=99, splits={"train": "0:8"}))
    assert _actions(root, previous) == [(EF.format(0), UNCHANGED, "unchanged"), (EF.format(1), UNCHANGED, "unchanged"),
                                        (EF.format(2), UNCHANGED, "unchanged"), (EF.format(3), IMPORT, "new")]


def test_an_info_change_the_import_uses_makes_every_file_stale(tmp_path):
    root = _dataset(tmp_path / "ds")
    previous = _manifest(sources.scan_dataset(str(root), OPTIONS))
    edit_info(root, lambda info: info["features"]["action"].update(names=["a", "b", "c"]))
    assert {(a, r) for _, a, r in _actions(root, previous)} == {(IMPORT, "sources changed")}


def test_a_rewritten_episodes_file_and_a_deleted_one(tmp_path):
    root = _dataset(tmp_path / "ds")
    previous = _manifest(sources.scan_dataset(str(root), OPTIONS))
    _touch(root / EF.format(2))  # LeRobot's finalize rewrites the last episodes file
    (root / EF.format(0)).unlink()
    assert _actions(root, previous) == [(EF.format(0), REMOVED, "gone"), (EF.format(1), UNCHANGED, "unchanged"),
                                        (EF.format(2), IMPORT, "sources changed")]


def test_failed_files_are_retried_and_other_previous_states(tmp_path):
    root = _dataset(tmp_path / "ds")
    previous = _manifest(sources.scan_dataset(str(root), OPTIONS))
    entries = previous["episodes_files"]
    entries[EF.format(0)]["status"] = "failed"
    entries[EF.format(1)]["status"] = "unchanged"  # carried over by an earlier incremental run: still good
    entries[EF.format(2)].pop("source_digest")  # written by an import that recorded no sources
    entries[EF.format(7)] = {"status": "removed"}  # removed by an earlier run: nothing left to remove
    assert _actions(root, previous) == [(EF.format(0), IMPORT, "failed last run"),
                                        (EF.format(1), UNCHANGED, "unchanged"),
                                        (EF.format(2), IMPORT, "no recorded sources")]
    assert {(a, r) for _, a, r in _actions(root, previous, force=True)} == {(IMPORT, "forced")}
    assert {(a, r) for _, a, r in _actions(root, None)} == {(IMPORT, "new")}


def test_other_output_options_change_every_digest(tmp_path):
    root = _dataset(tmp_path / "ds")
    a = sources.scan_dataset(str(root), OPTIONS).files
    b = sources.scan_dataset(str(root), OPTIONS | {"inline_index": True}).files
    assert all(x.digest != y.digest and x.basis != y.basis for x, y in zip(a, b))


def test_recorded_references_spare_reading_unchanged_episodes_files(tmp_path, monkeypatch):
    root = _dataset(tmp_path / "ds")
    previous = _manifest(sources.scan_dataset(str(root), OPTIONS))
    reads = []
    real = storage.read_bytes

    def counted(uri, **kw):
        if kw["file"] != "meta/info.json":  # read every time: what the import uses of it is in each digest
            reads.append(kw["file"])
        return real(uri, **kw)

    monkeypatch.setattr(storage, "read_bytes", counted)
    again = sources.scan_dataset(str(root), OPTIONS, previous_manifest=previous)
    assert reads == [] and all(f.rows is None for f in again.files)
    assert [f.digest for f in again.files] == [e["source_digest"] for e in previous["episodes_files"].values()]
    _touch(root / EF.format(1))
    _touch(root / DATA.format(0))  # a data file change needs no episodes file read
    sources.scan_dataset(str(root), OPTIONS, previous_manifest=previous)
    assert reads == [EF.format(1)]


def test_a_missing_data_file_counts_as_a_source(tmp_path):
    root = _dataset(tmp_path / "ds")
    data1 = root / DATA.format(1)
    kept = data1.read_bytes()
    data1.unlink()
    before = sources.scan_dataset(str(root), OPTIONS).by_file()
    assert before[EF.format(2)].data_files == (DATA.format(1),) and before[EF.format(2)].data_bytes == 0
    data1.write_bytes(kept)
    after = sources.scan_dataset(str(root), OPTIONS, previous_manifest=_manifest_of(before)).by_file()
    assert after[EF.format(2)].digest != before[EF.format(2)].digest
    assert after[EF.format(0)].digest == before[EF.format(0)].digest


def _manifest_of(files: dict) -> dict:
    return {"episodes_files": {rel: {"status": "imported", **f.to_manifest()} for rel, f in files.items()}}


def test_unreadable_episodes_file_and_missing_info(tmp_path):
    root = _dataset(tmp_path / "ds")
    (root / EF.format(1)).write_bytes(b"not parquet")
    by_file = sources.scan_dataset(str(root), OPTIONS).by_file()
    assert by_file[EF.format(1)].problem.startswith("[episodes_file] ")
    assert "not readable Parquet" in by_file[EF.format(1)].problem
    assert by_file[EF.format(1)].data_files == () and by_file[EF.format(0)].problem is None
    (root / "meta/info.json").unlink()
    scanned = sources.scan_dataset(str(root), OPTIONS)
    assert scanned.info_problem.startswith("meta/info.json does not exist under file://")
    assert {f.problem for f in scanned.files} == {scanned.info_problem}


def test_wildcard_names_are_read_literally(tmp_path):
    root = _dataset(tmp_path / "ds")
    shutil.copy(root / EF.format(2), root / "meta/episodes/chunk-000/*.parquet")
    by_file = sources.scan_dataset(str(root), OPTIONS).by_file()
    assert sorted(by_file) == ["meta/episodes/chunk-000/*.parquet", EF.format(0), EF.format(1), EF.format(2)]
    assert by_file["meta/episodes/chunk-000/*.parquet"].data_files == (DATA.format(1),)


def test_a_symlinked_videos_folder_is_still_fingerprinted(tmp_path):
    root = copy_dataset(SAMPLE, tmp_path / "so101")
    shutil.move(root / "videos", tmp_path / "videos-elsewhere")
    (root / "videos").symlink_to(tmp_path / "videos-elsewhere")
    (src,) = sources.scan_dataset(str(root), OPTIONS).files
    listing = sources.list_sources(str(root))
    assert all(listing.token(v) != "missing" for v in src.video_files)


def test_changed_video_files(tmp_path):
    root = copy_dataset(SAMPLE, tmp_path / "so101")
    scanned = sources.scan_dataset(str(root), OPTIONS)
    (src,) = scanned.files
    recorded = sources.video_versions(scanned.listing, src.video_files)
    assert sources.changed_video_files(recorded, recorded) == ()
    assert sources.changed_video_files(recorded, None) == src.video_files
    _touch(root / src.video_files[1])
    now = sources.video_versions(sources.list_sources(str(root)), src.video_files)
    assert sources.changed_video_files(now, recorded) == (src.video_files[1],)


def test_an_unchanged_file_whose_mp4_index_is_not_recorded_is_imported(tmp_path):
    """Its MP4 is read again only by importing a file that uses it; an older output layout redoes all."""
    root = copy_dataset(SAMPLE, tmp_path / "so101")
    scanned = sources.scan_dataset(str(root), OPTIONS)
    (src,) = scanned.files
    tokens = sources.video_versions(scanned.listing, src.video_files)
    previous = _manifest(scanned)
    (same,) = sources.decide(scanned.files, previous, recorded_videos=tokens, video_tokens=tokens)
    assert (same.action, same.reason) == (UNCHANGED, "unchanged")
    partial = {src.video_files[0]: tokens[src.video_files[0]]}  # the other MP4's row was never written
    (again,) = sources.decide(scanned.files, previous, recorded_videos=partial, video_tokens=tokens)
    assert (again.action, again.reason) == (IMPORT, "MP4 index not recorded")
    (older,) = sources.decide(scanned.files, previous, rebuild="older media_index layout")
    assert (older.action, older.reason) == (IMPORT, "older media_index layout")


@pytest.fixture
def memory_root(tmp_path):
    fs = fsspec.filesystem("memory")
    root = _dataset(tmp_path / "ds")
    fs.put(str(root) + "/", "/sources-test/ds/", recursive=True)
    yield fs, "memory:///sources-test/ds"
    fs.rm("/sources-test", recursive=True)


def test_memory_store(memory_root):
    fs, root = memory_root
    scanned = sources.scan_dataset(root, OPTIONS)
    assert [f.episodes_file for f in scanned.files] == [EF.format(i) for i in range(3)]
    assert all(v.version.startswith("created=") for v in scanned.listing.files.values())
    previous = _manifest(scanned)
    fs.pipe_file(f"/sources-test/ds/{DATA.format(0)}", fs.cat_file(f"/sources-test/ds/{DATA.format(0)}"))
    fs.rm_file(f"/sources-test/ds/{EF.format(2)}")
    assert _actions(root, previous) == [(EF.format(0), IMPORT, "sources changed"),
                                        (EF.format(1), IMPORT, "sources changed"), (EF.format(2), REMOVED, "gone")]


def test_manifest_record_shape(tmp_path):
    root = _dataset(tmp_path / "ds")
    record = sources.scan_dataset(str(root), OPTIONS).files[1].to_manifest()
    assert sorted(record) == ["source_basis", "source_data_files", "source_digest", "source_video_files"]
    assert record["source_data_files"] == [DATA.format(0), DATA.format(1)]
    assert json.loads(json.dumps(record)) == record


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_object_store_fetches_episodes_files_concurrently_and_sees_rewrites(tmp_path, protocol):
    """On an object store the episodes files are fetched by several threads, and a file's version is the
    store's own (GCS generation, S3 ETag)."""
    import storage_emulators

    emulator, modules = {"gs": (storage_emulators.gcs_emulator, ("gcp_storage_emulator.server", "gcsfs")),
                         "s3": (storage_emulators.s3_emulator, ("moto.server", "s3fs"))}[protocol]
    reason = storage_emulators.missing(*modules)
    if reason:
        pytest.skip(reason)
    local = _dataset(tmp_path / "ds")
    with emulator():
        fs = fsspec.filesystem(protocol)
        fs.mkdir("sources-bucket")
        fs.put(str(local) + "/", "sources-bucket/ds/", recursive=True)
        root = f"{protocol}://sources-bucket/ds"
        scanned = sources.scan_dataset(root, OPTIONS)
        expected = sources.scan_dataset(str(local), OPTIONS)
        assert [(f.episodes_file, f.data_files, f.data_bytes) for f in scanned.files] == [
            (f.episodes_file, f.data_files, f.data_bytes) for f in expected.files]
        assert all(f.rows is not None for f in scanned.files)
        key = {"gs": "generation=", "s3": "ETag="}[protocol]
        assert all(v.version.startswith(key) for v in scanned.listing.files.values())
        previous = _manifest(scanned)
        fs.pipe_file(f"sources-bucket/ds/{DATA.format(0)}", b"rewritten" + (local / DATA.format(0)).read_bytes())
        fs.invalidate_cache()
        assert _actions(root, previous) == [(EF.format(0), IMPORT, "sources changed"),
                                            (EF.format(1), IMPORT, "sources changed"),
                                            (EF.format(2), UNCHANGED, "unchanged")]
