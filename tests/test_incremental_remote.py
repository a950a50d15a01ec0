"""Incremental re-imports with the dataset and the output in an object store (the gs:// emulator, and S3 on
moto): a grown or edited dataset imported again imports only the episodes files whose sources changed,
removes the output of the ones that are gone, retries the ones that failed, and leaves every other output
object as it was: the same bytes, the same version (GCS generation, S3 version id: a new one for every
write) and the same update time (the object store's mtime).

Each case runs on a generated dataset without cameras and on `h264_multi_file` (LeRobot's writer: five
episodes files over nine MP4s of two cameras), where the media_index/ table must be left alone too, but
for the rows of the MP4s that changed. Two import processes started together on one gs:// output are
raced in tests/test_lease_runs.py.
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from pathlib import Path
from typing import Iterable, Optional

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import storage_emulators
from tests.dataset_factory import DatasetSpec, edit_info, write_dataset
from tests.helpers import lerobot_dataset, run_import
from tests.test_lease import _gcs
from transforms.output.lease import LEASE_NAME

BACKENDS = {
    "gs": (_gcs, ("gcp_storage_emulator.server", "gcsfs")),
    "s3": (storage_emulators.s3_emulator, ("moto.server", "s3fs")),
}
BUCKET = "incremental-runs"


@dataclasses.dataclass(frozen=True)
class Stored:
    """One output object as the store holds it."""

    data: bytes
    version: str  # GCS generation / S3 version id: changes with every write, even of the same bytes
    updated: str  # GCS `updated` / S3 LastModified: the store's mtime


@dataclasses.dataclass
class Store:
    """A bucket on one emulator; each test works under its own key (`KEY/ds`, `KEY/out`)."""

    protocol: str
    fs: fsspec.AbstractFileSystem
    versions: Optional[fsspec.AbstractFileSystem]  # S3: a version-aware view, whose info() has VersionId

    def url(self, key: str) -> str:
        return f"{self.protocol}://{BUCKET}/{key}"

    def upload(self, local: Path, key: str, rels: Iterable[str]) -> None:
        for rel in rels:
            self.fs.put_file(str(local / rel), f"{BUCKET}/{key}/{rel}")

    def remove(self, key: str, rel: str) -> None:
        self.fs.rm_file(f"{BUCKET}/{key}/{rel}")

    def objects(self, key: str) -> dict[str, Stored]:
        """Every object under `key` (the lease, run bookkeeping, left out), by path relative to it."""
        root = f"{BUCKET}/{key}"
        self.fs.invalidate_cache()
        found = {}
        for path, detail in sorted(self.fs.find(root, detail=True).items()):
            rel = path[len(root) + 1:]
            if rel.rsplit("/", 1)[-1].startswith(LEASE_NAME):
                continue
            if self.versions is not None:
                self.versions.invalidate_cache()
                detail = self.versions.info(path)
                version, updated = detail["VersionId"], detail["LastModified"]
            else:
                version, updated = detail["generation"], detail["updated"]
            found[rel] = Stored(self.fs.cat_file(path), str(version), str(updated))
        return found


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def store(request):
    """One emulator per backend for the module, with an empty bucket (versioned on S3)."""
    emulator, modules = BACKENDS[request.param]
    reason = storage_emulators.missing(*modules)
    if reason:
        pytest.skip(reason)
    with emulator():
        fs = fsspec.filesystem(request.param)
        fs.mkdir(BUCKET)
        versions = None
        if request.param == "s3":
            fs.make_bucket_versioned(BUCKET)
            versions = fsspec.filesystem("s3", version_aware=True)
        yield Store(request.param, fs, versions)


@dataclasses.dataclass
class Run:
    """One import run: its exit status, summary line, counters and the output it left."""

    code: int
    summary: str
    metrics: dict[str, int]
    objects: dict[str, Stored]

    @property
    def manifest(self) -> dict:
        return json.loads(self.objects["manifest.json"].data)

    @property
    def errors(self) -> list[dict]:
        return [json.loads(line) for line in self.objects["errors.jsonl"].data.decode().splitlines() if line]

    def statuses(self) -> dict[str, str]:
        return {rel: e["status"] for rel, e in self.manifest["episodes_files"].items()}

    def written_by(self, episodes_file: str) -> str:
        """The run that wrote an episodes file's output (recorded on the entry when not this manifest's run)."""
        doc = self.manifest
        return doc["episodes_files"][episodes_file].get("run_id") or doc["run_id"]


def run(store: Store, key: str, capsys) -> Run:
    capsys.readouterr()
    dataset = store.url(f"{key}/ds")
    code = run_import(dataset, store.url(f"{key}/out"))
    printed = capsys.readouterr().out.splitlines()
    summary = [line[len(dataset) + 2:].split(" -> ")[0] for line in printed if line.startswith(dataset + ": ")]
    metrics = [line[len("metrics: "):] for line in printed if line.startswith("metrics: ")]
    assert len(summary) == 1 and len(metrics) == 1, printed
    counters = {k: int(v) for k, v in (item.split("=") for item in metrics[0].split(", "))}
    return Run(code, summary[0], counters, store.objects(f"{key}/out"))


def source_files(root: Path) -> list[str]:
    """A dataset's files an import reads (the LeRobot copies also hold what LeRobot returned for them)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.relative_to(root).parts[0] in ("meta", "data", "videos"))


def parts(run: Run, episodes_file: str) -> list[str]:
    return run.manifest["episodes_files"][episodes_file]["parts"]


def assert_left_alone(before: Run, after: Run, episodes_files: Iterable[str]) -> None:
    """Each episodes file's output objects are the ones `before` left: bytes, version and mtime."""
    for rel in episodes_files:
        assert after.statuses()[rel] == "unchanged", rel
        assert after.written_by(rel) == before.written_by(rel), rel
        assert parts(after, rel) == parts(before, rel) and parts(before, rel), rel
        for part in parts(before, rel):
            assert after.objects[part] == before.objects[part], part


def assert_imported_again(before: Run, after: Run, episodes_files: Iterable[str]) -> None:
    """Each episodes file's output was written by `after`'s run: every part a new object version."""
    for rel in episodes_files:
        assert after.statuses()[rel] == "imported", rel
        assert after.written_by(rel) == after.manifest["run_id"] != before.manifest["run_id"]
        for part in parts(after, rel):
            assert part in after.objects, part
            if part in before.objects:
                assert after.objects[part].version != before.objects[part].version, part


def states(run: Run, part: str) -> dict[int, np.ndarray]:
    """observation.state of every frame of a part's episodes, by episode index."""
    table = pq.read_table(io.BytesIO(run.objects[part].data))
    out = {}
    for row in table.select(["episode_index", "frames"]).to_pylist():
        out[row["episode_index"]] = np.array([f["observation.state"] for f in row["frames"]], np.float32)
    return out


def negate_state(table: pa.Table) -> pa.Table:
    """The same rows with observation.state negated (an edit tool correcting a sign)."""
    column = table.column("observation.state").combine_chunks()
    values = pa.array(-column.flatten().to_numpy(zero_copy_only=False))
    negated = pa.FixedSizeListArray.from_arrays(values, column.type.list_size)
    return table.set_column(table.schema.get_field_index("observation.state"), "observation.state",
                            negated.cast(column.type))


def corrupt(path: Path) -> None:
    """Cut a Parquet file in half: its footer is gone, as after an interrupted upload."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def set_totals(root: Path, episodes: int, frames: int) -> None:
    def edit(info: dict) -> None:
        info.update(total_episodes=episodes, total_frames=frames, splits={"train": f"0:{episodes}"})
    edit_info(root, edit)


# ------------------------------------------------------------------------------------------------
# A dataset without cameras: four episodes of 5, 7, 6 and 4 frames, one per episodes file; two
# episodes per data file (data file-000: episodes 0-1, file-001: episodes 2-3)
# ------------------------------------------------------------------------------------------------

EF = "meta/episodes/chunk-000/file-{:03d}.parquet"
OUT = "episodes/chunk-000/file-{:03d}.parquet"
DATA = "data/chunk-000/file-{:03d}.parquet"
SPEC = DatasetSpec(lengths=(5, 7, 6, 4), episodes_per_meta_file=1, episodes_per_data_file=2)


def _first_import(store: Store, key: str, local: Path, capsys) -> Run:
    store.upload(local, key + "/ds", source_files(local))
    first = run(store, key, capsys)
    assert first.code == 0, first.summary
    assert first.summary.startswith("imported - ") and set(first.statuses().values()) == {"imported"}
    return first


def test_appended_episodes_files_are_the_only_ones_imported(store, tmp_path, capsys):
    key = "plain-append"
    grown = write_dataset(tmp_path / "grown", dataclasses.replace(SPEC, lengths=(5, 7, 6, 4, 3, 8)))
    small = tmp_path / "small"
    shutil.copytree(grown, small)
    appended = [EF.format(4), EF.format(5), DATA.format(2)]
    for rel in appended:
        (small / rel).unlink()
    set_totals(small, 4, 22)
    first = _first_import(store, key, small, capsys)
    assert first.summary == "imported - 4/4 episodes, 22 frames, 4/4 episodes files, 0 errors"

    store.upload(grown, key + "/ds", appended + ["meta/info.json"])  # a recording session's new files
    second = run(store, key, capsys)
    assert second.code == 0
    assert second.statuses() == {**{EF.format(i): "unchanged" for i in range(4)},
                                 EF.format(4): "imported", EF.format(5): "imported"}
    assert second.summary == "imported - 6/6 episodes, 33 frames, 2/6 episodes files, 0 errors (4 unchanged)"
    assert (second.metrics["episodes"], second.metrics["frames"]) == (2, 11)
    assert_left_alone(first, second, [EF.format(i) for i in range(4)])
    assert_imported_again(first, second, [EF.format(4), EF.format(5)])
    assert sorted(p for p in second.objects if p.startswith("episodes/")) == [OUT.format(i) for i in range(6)]
    totals = second.manifest["totals"]
    assert (totals["episodes_files_imported"], totals["episodes_files_unchanged"], totals["episodes_written"]) == (
        2, 4, 6)

    third = run(store, key, capsys)  # nothing changed since: the whole output is left as it is
    assert third.code == 0
    finished = second.manifest["finished_at"]
    assert third.summary == f"skipped - unchanged since its import of {finished} (--force redoes it)"
    assert third.objects == second.objects


def test_rewritten_last_episodes_file_is_the_only_one_imported(store, tmp_path, capsys):
    """LeRobot's `finalize` rewrites the last episodes file with the episodes appended to it."""
    key = "plain-finalize"
    spec = dataclasses.replace(SPEC, lengths=(5, 7, 6, 4, 3), episodes_per_meta_file=2)
    small = write_dataset(tmp_path / "small", spec)  # episodes files: [0, 1], [2, 3], [4]
    grown = write_dataset(tmp_path / "grown", dataclasses.replace(spec, lengths=(5, 7, 6, 4, 3, 8)))
    first = _first_import(store, key, small, capsys)

    store.upload(grown, key + "/ds", [EF.format(2), DATA.format(2), "meta/info.json"])
    second = run(store, key, capsys)
    assert second.code == 0
    assert second.statuses() == {EF.format(0): "unchanged", EF.format(1): "unchanged", EF.format(2): "imported"}
    assert second.summary == "imported - 6/6 episodes, 33 frames, 1/3 episodes files, 0 errors (2 unchanged)"
    assert (second.metrics["episodes"], second.metrics["frames"]) == (2, 11)
    assert_left_alone(first, second, [EF.format(0), EF.format(1)])
    assert_imported_again(first, second, [EF.format(2)])
    assert sorted(states(second, OUT.format(2))) == [4, 5]


def test_changed_data_file_reimports_only_the_episodes_files_using_it(store, tmp_path, capsys):
    key = "plain-data"
    local = write_dataset(tmp_path / "ds", SPEC)
    edited = write_dataset(tmp_path / "edited", SPEC, mutate_data=lambda t, n: negate_state(t) if n == 1 else t)
    first = _first_import(store, key, local, capsys)

    store.upload(edited, key + "/ds", [DATA.format(1)])
    second = run(store, key, capsys)
    assert second.code == 0
    assert second.statuses() == {EF.format(0): "unchanged", EF.format(1): "unchanged",
                                 EF.format(2): "imported", EF.format(3): "imported"}
    assert second.summary == "imported - 4/4 episodes, 22 frames, 2/4 episodes files, 0 errors (2 unchanged)"
    assert (second.metrics["episodes"], second.metrics["frames"]) == (2, 10)
    assert_left_alone(first, second, [EF.format(0), EF.format(1)])
    assert_imported_again(first, second, [EF.format(2), EF.format(3)])
    for i in (2, 3):  # the edit arrived
        (was,), (now,) = states(first, OUT.format(i)).values(), states(second, OUT.format(i)).values()
        assert now.shape == was.shape and np.array_equal(now, -was)


def test_deleted_episodes_file_loses_its_output(store, tmp_path, capsys):
    key = "plain-delete"
    local = write_dataset(tmp_path / "ds", SPEC)
    first = _first_import(store, key, local, capsys)

    store.remove(key + "/ds", EF.format(3))
    set_totals(local, 3, 18)
    store.upload(local, key + "/ds", ["meta/info.json"])
    second = run(store, key, capsys)
    assert second.code == 0
    assert second.statuses() == {**{EF.format(i): "unchanged" for i in range(3)}, EF.format(3): "removed"}
    assert second.manifest["episodes_files"][EF.format(3)] == {"status": "removed", "parts": []}
    assert second.summary == "imported - 3/3 episodes, 18 frames, 0/3 episodes files, 0 errors (3 unchanged, 1 removed)"
    assert second.metrics.get("episodes", 0) == 0
    assert_left_alone(first, second, [EF.format(i) for i in range(3)])
    assert OUT.format(3) in first.objects and OUT.format(3) not in second.objects
    assert sorted(p for p in second.objects if p.startswith("episodes/")) == [OUT.format(i) for i in range(3)]


def _assert_failed_then_retried(first: Run, second: Run, *, bad: str, rule: str = "data_file") -> None:
    """`first` failed the two episodes files reading data file-001 (`bad`); `second` imported them only."""
    assert first.code == 1
    assert first.statuses() == {EF.format(0): "imported", EF.format(1): "imported",
                                EF.format(2): "failed", EF.format(3): "failed"}
    assert first.summary == "failed - 2/4 episodes, 12 frames, 2/4 episodes files, 2 errors"
    assert sorted((e["episodes_file"], e["episode_index"], e["file"], e["rule"]) for e in first.errors) == [
        (EF.format(2), 2, bad, rule), (EF.format(3), 3, bad, rule)]
    assert OUT.format(2) not in first.objects and OUT.format(3) not in first.objects

    assert second.code == 0
    assert second.statuses() == {EF.format(0): "unchanged", EF.format(1): "unchanged",
                                 EF.format(2): "imported", EF.format(3): "imported"}
    assert second.summary == "imported - 4/4 episodes, 22 frames, 2/4 episodes files, 0 errors (2 unchanged)"
    assert (second.metrics["episodes"], second.metrics["frames"]) == (2, 10)
    assert second.errors == []
    assert_left_alone(first, second, [EF.format(0), EF.format(1)])
    assert_imported_again(first, second, [EF.format(2), EF.format(3)])


def test_failed_episodes_files_are_retried_once_the_data_file_is_fixed(store, tmp_path, capsys):
    key = "plain-fixed"
    local = write_dataset(tmp_path / "ds", SPEC)
    broken = tmp_path / "broken"
    shutil.copytree(local, broken)
    corrupt(broken / DATA.format(1))
    store.upload(broken, key + "/ds", source_files(broken))
    first = run(store, key, capsys)
    store.upload(local, key + "/ds", [DATA.format(1)])  # fixed
    second = run(store, key, capsys)
    _assert_failed_then_retried(first, second, bad=DATA.format(1))
    digests = {r.manifest["episodes_files"][EF.format(2)]["source_digest"] for r in (first, second)}
    assert len(digests) == 2  # the fix changed the sources


def test_failed_episodes_files_are_retried_though_their_sources_did_not_change(store, tmp_path, capsys):
    """Reading a data file was refused (access lost for a while): nothing changed once it is back, and the
    episodes files that failed are imported all the same."""
    key = "plain-denied"
    local = write_dataset(tmp_path / "ds", SPEC)
    store.upload(local, key + "/ds", source_files(local))
    with storage_emulators.deny_reads(store.url(f"{key}/ds/{DATA.format(1)}")):
        first = run(store, key, capsys)
    second = run(store, key, capsys)
    _assert_failed_then_retried(first, second, bad=DATA.format(1), rule="io")
    denied = [e for e in first.errors if e["file"] == DATA.format(1)]
    assert denied and all(e["rule"] == "io" and "storage refused access" in e["message"]
                          and "credentials" in e["message"] for e in denied), denied
    for rel in (EF.format(2), EF.format(3)):  # same sources, recorded by the failed run and by the retry
        assert first.manifest["episodes_files"][rel]["source_digest"] == \
            second.manifest["episodes_files"][rel]["source_digest"]


# ------------------------------------------------------------------------------------------------
# A dataset with MP4s: h264_multi_file, five episodes files of two episodes each.
#   episodes file        episodes  data files                   MP4s (top | side)
#   chunk-000/file-000   0 1       000/000                      top 000/000 | side 000/000
#   chunk-000/file-001   2 3       000/000 000/001              top 000/000 000/001 | side 000/000 000/001
#   chunk-001/file-000   4 5       000/001                      top 000/001 001/000 | side 000/001 001/000
#   chunk-001/file-001   6 7       001/000                      top 001/000 001/001 | side 001/000
#   chunk-002/file-000   8 9       001/000 001/001              top 001/001 002/000 | side 001/001
# Only the last episodes file uses data 001/001, top 002/000 and side 001/001.
# ------------------------------------------------------------------------------------------------

H264 = lerobot_dataset("h264_multi_file")
#: The MP4 cases run on gs:// only, to keep this file within a minute: the S3 side of the same decisions
#: (source versions by ETag, output versions by version id) is covered by the cases above.
MP4_STORES = pytest.mark.parametrize("store", ["gs"], indirect=True)
MF = ["meta/episodes/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-001.parquet",
      "meta/episodes/chunk-001/file-000.parquet", "meta/episodes/chunk-001/file-001.parquet",
      "meta/episodes/chunk-002/file-000.parquet"]
LAST = MF[4]
LAST_DATA = "data/chunk-001/file-001.parquet"
LAST_TOP = "videos/observation.images.top/chunk-002/file-000.mp4"
LAST_SIDE = "videos/observation.images.side/chunk-001/file-001.mp4"
H264_LENGTHS = (8, 11, 9, 14, 10, 8, 12, 9, 13, 10)  # episodes 0-9, 104 frames


def _out(episodes_file: str) -> str:
    return "episodes/" + episodes_file[len("meta/episodes/"):]


def media_rows(run: Run) -> dict[str, tuple[str, dict]]:
    """MP4 uri -> (the media_index/ file holding its row, the row)."""
    rows = {}
    for rel, obj in run.objects.items():
        if rel.startswith("media_index/") and rel.endswith(".parquet"):
            for row in pq.read_table(io.BytesIO(obj.data)).to_pylist():
                assert row["uri"] not in rows, f"{row['uri']} is in {rows[row['uri']][0]} and in {rel}"
                rows[row["uri"]] = (rel, row)
    return rows


def assert_media_index_left_alone(store: Store, key: str, before: Run, after: Run, changed: Iterable[str]) -> None:
    """The media_index/ rows of the MP4s that did not change are the same, and no media_index file was
    written (or removed) unless it holds (or held) the row of an MP4 that changed, appeared or went."""
    changed = {store.url(f"{key}/ds/{rel}") for rel in changed}
    was, now = media_rows(before), media_rows(after)
    assert was and changed <= set(now), sorted(changed - set(now))
    affected = changed | (set(was) ^ set(now))
    for uri in (set(was) & set(now)) - affected:
        assert now[uri][1] == was[uri][1], uri
    files = {rel for rel in {**before.objects, **after.objects}
             if rel.startswith("media_index/") and rel.endswith(".parquet")}
    for rel in sorted(files):
        if before.objects.get(rel) != after.objects.get(rel):
            held = {uri for rows in (was, now) for uri, (where, _) in rows.items() if where == rel}
            assert held & affected, f"{rel} was rewritten though none of its MP4s changed: {sorted(held)}"


def _h264_copy(dest: Path) -> Path:
    shutil.copytree(H264, dest, ignore=lambda folder, names: [n for n in names if Path(folder) == H264
                                                              and n not in ("meta", "data", "videos")])
    return dest


@MP4_STORES
def test_mp4_dataset_appended_episodes_file_is_the_only_one_imported(store, tmp_path, capsys):
    key = "mp4-append"
    small = _h264_copy(tmp_path / "small")
    appended = [LAST, LAST_DATA, LAST_TOP, LAST_SIDE]
    for rel in appended:
        (small / rel).unlink()
    set_totals(small, 8, sum(H264_LENGTHS[:8]))
    first = _first_import(store, key, small, capsys)
    assert first.summary == "imported - 8/8 episodes, 81 frames, 4/4 episodes files, 0 errors"

    store.upload(H264, key + "/ds", appended + ["meta/info.json"])
    second = run(store, key, capsys)
    assert second.code == 0
    assert second.statuses() == {**{rel: "unchanged" for rel in MF[:4]}, LAST: "imported"}
    assert second.summary == "imported - 10/10 episodes, 104 frames, 1/5 episodes files, 0 errors (4 unchanged)"
    assert (second.metrics["episodes"], second.metrics["frames"]) == (2, 23)
    assert second.metrics.get("mp4_files", 0) == 2  # only the two new MP4s are read
    assert_left_alone(first, second, MF[:4])
    assert_imported_again(first, second, [LAST])
    assert_media_index_left_alone(store, key, first, second, [LAST_TOP, LAST_SIDE])


@MP4_STORES
def test_mp4_dataset_rewritten_last_episodes_file_is_the_only_one_imported(store, tmp_path, capsys):
    """Before `finalize`: the last episodes file holds episode 8 only; then episode 9 is appended to it,
    with its data file and top MP4 (its side frames go to the side MP4 episode 8 already uses)."""
    key = "mp4-finalize"
    small = _h264_copy(tmp_path / "small")
    for rel in (LAST_DATA, LAST_TOP):
        (small / rel).unlink()
    pq.write_table(pq.read_table(small / LAST).slice(0, 1), small / LAST)
    set_totals(small, 9, sum(H264_LENGTHS[:9]))
    first = _first_import(store, key, small, capsys)
    assert first.summary == "imported - 9/9 episodes, 94 frames, 5/5 episodes files, 0 errors"

    store.upload(H264, key + "/ds", [LAST, LAST_DATA, LAST_TOP, "meta/info.json"])
    second = run(store, key, capsys)
    assert second.code == 0
    assert second.statuses() == {**{rel: "unchanged" for rel in MF[:4]}, LAST: "imported"}
    assert second.summary == "imported - 10/10 episodes, 104 frames, 1/5 episodes files, 0 errors (4 unchanged)"
    assert (second.metrics["episodes"], second.metrics["frames"]) == (2, 23)
    assert second.metrics.get("mp4_files", 0) == 1  # the new top MP4; the side one did not change
    assert_left_alone(first, second, MF[:4])
    assert_imported_again(first, second, [LAST])
    assert sorted(states(second, _out(LAST))) == [8, 9]
    assert_media_index_left_alone(store, key, first, second, [LAST_TOP])


@MP4_STORES
def test_mp4_dataset_changed_data_file_reimports_only_the_episodes_files_using_it(store, tmp_path, capsys):
    key = "mp4-data"
    edited_rel = "data/chunk-000/file-001.parquet"  # episodes 3, 4 and 5
    edited = tmp_path / "edited"
    edited.mkdir()
    table = pq.read_table(H264 / edited_rel)
    pq.write_table(negate_state(table), edited / "data.parquet")
    first = _first_import(store, key, H264, capsys)

    store.fs.put_file(str(edited / "data.parquet"), f"{BUCKET}/{key}/ds/{edited_rel}")
    second = run(store, key, capsys)
    assert second.code == 0
    assert second.statuses() == {MF[0]: "unchanged", MF[1]: "imported", MF[2]: "imported", MF[3]: "unchanged",
                                 MF[4]: "unchanged"}
    assert second.summary == "imported - 10/10 episodes, 104 frames, 2/5 episodes files, 0 errors (3 unchanged)"
    assert (second.metrics["episodes"], second.metrics["frames"]) == (4, sum(H264_LENGTHS[2:6]))
    assert second.metrics.get("mp4_files", 0) == 0
    assert_left_alone(first, second, [MF[0], MF[3], MF[4]])
    assert_imported_again(first, second, [MF[1], MF[2]])
    # Read through the manifest's parts: the rewritten data file holds one row group shared by its three
    # episodes, so the episodes file spanning both data files is now written in a part per data file.
    was = {k: v for rel in MF[1:3] for part in parts(first, rel) for k, v in states(first, part).items()}
    now = {k: v for rel in MF[1:3] for part in parts(second, rel) for k, v in states(second, part).items()}
    assert sorted(now) == [2, 3, 4, 5]
    assert np.array_equal(now[2], was[2])  # episode 2 reads data file 000/000
    for ep in (3, 4, 5):
        assert now[ep].shape == (H264_LENGTHS[ep], 4) and np.array_equal(now[ep], -was[ep])
    assert_media_index_left_alone(store, key, first, second, [])


@MP4_STORES
def test_mp4_dataset_deleted_episodes_file_loses_its_output(store, tmp_path, capsys):
    key = "mp4-delete"
    local = _h264_copy(tmp_path / "ds")
    first = _first_import(store, key, local, capsys)

    store.remove(key + "/ds", LAST)
    set_totals(local, 8, sum(H264_LENGTHS[:8]))
    store.upload(local, key + "/ds", ["meta/info.json"])
    second = run(store, key, capsys)
    assert second.code == 0
    assert second.statuses() == {**{rel: "unchanged" for rel in MF[:4]}, LAST: "removed"}
    assert second.summary == "imported - 8/8 episodes, 81 frames, 0/4 episodes files, 0 errors (4 unchanged, 1 removed)"
    assert second.metrics.get("mp4_files", 0) == 0
    assert_left_alone(first, second, MF[:4])
    assert _out(LAST) in first.objects and _out(LAST) not in second.objects
    assert_media_index_left_alone(store, key, first, second, [])


def _assert_mp4_failed_then_retried(store: Store, key: str, first: Run, second: Run, *,
                                    rule: str = "data_file") -> None:
    """`first` failed the last episodes file (its data file 001/001 unreadable); `second` imported it only."""
    assert first.code == 1
    assert first.statuses() == {**{rel: "imported" for rel in MF[:4]}, LAST: "failed"}
    assert first.summary.startswith("failed - 8/10 episodes, 81 frames, 4/5 episodes files, ")
    assert (LAST, 9, LAST_DATA, rule) in {(e["episodes_file"], e["episode_index"], e["file"], e["rule"])
                                                 for e in first.errors}
    assert {e["episodes_file"] for e in first.errors} == {LAST}
    assert _out(LAST) not in first.objects

    assert second.code == 0
    assert second.statuses() == {**{rel: "unchanged" for rel in MF[:4]}, LAST: "imported"}
    assert second.summary == "imported - 10/10 episodes, 104 frames, 1/5 episodes files, 0 errors (4 unchanged)"
    assert (second.metrics["episodes"], second.metrics["frames"]) == (2, 23)
    assert_left_alone(first, second, MF[:4])
    assert_imported_again(first, second, [LAST])
    assert_media_index_left_alone(store, key, first, second, [])


@MP4_STORES
def test_mp4_dataset_failed_episodes_file_is_retried_once_fixed(store, tmp_path, capsys):
    key = "mp4-fixed"
    broken = _h264_copy(tmp_path / "broken")
    corrupt(broken / LAST_DATA)
    store.upload(broken, key + "/ds", source_files(broken))
    first = run(store, key, capsys)
    store.upload(H264, key + "/ds", [LAST_DATA])
    second = run(store, key, capsys)
    _assert_mp4_failed_then_retried(store, key, first, second)


@MP4_STORES
def test_mp4_dataset_failed_episodes_file_is_retried_though_unchanged(store, tmp_path, capsys):
    key = "mp4-denied"
    store.upload(H264, key + "/ds", source_files(H264))
    with storage_emulators.deny_reads(store.url(f"{key}/ds/{LAST_DATA}")):
        first = run(store, key, capsys)
    second = run(store, key, capsys)
    _assert_mp4_failed_then_retried(store, key, first, second, rule="io")
    assert first.manifest["episodes_files"][LAST]["source_digest"] == \
        second.manifest["episodes_files"][LAST]["source_digest"]
