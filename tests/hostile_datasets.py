"""Broken LeRobot v3 datasets: one `HostileCase` per way a dataset can be hostile.

Most cases start from a copy of the corpus dataset `h264_multi_file` (5 episodes files, 4 data
files, 9 H.264 MP4s, one of them with moov at the end), so that breaking one file can be checked
to fail only the episodes files that use it while the others still import. A few start from a
`dataset_factory` dataset with image, bool and string features (two episodes files).

Where each episode of `h264_multi_file` lives (episodes file: episodes -> data files; top MP4s; side MP4s):

    E00 meta/episodes/chunk-000/file-000  eps 0,1 -> data 0/0;      top 0/0;      side 0/0
    E01 meta/episodes/chunk-000/file-001  eps 2,3 -> data 0/0, 0/1; top 0/0, 0/1; side 0/0, 0/1
    E10 meta/episodes/chunk-001/file-000  eps 4,5 -> data 0/1;      top 0/1, 1/0; side 0/1, 1/0
    E11 meta/episodes/chunk-001/file-001  eps 6,7 -> data 1/0;      top 1/0, 1/1; side 1/0
    E20 meta/episodes/chunk-002/file-000  eps 8,9 -> data 1/0, 1/1; top 1/1, 2/0; side 1/1

so data 1/1, top 2/0 (moov at the end) and side 1/1 are used by E20 alone.

`build(case, workdir)` writes the broken dataset and returns its root; `Expect` says what an import
of it must report. Nothing here runs the pipeline (tests/test_hostile_inputs.py does).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import stat
import struct
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests import mp4_factory as mp4
from tests.dataset_factory import DatasetSpec, edit_info, write_dataset

CORPUS_DATASET = "h264_multi_file"

E00 = "meta/episodes/chunk-000/file-000.parquet"
E01 = "meta/episodes/chunk-000/file-001.parquet"
E10 = "meta/episodes/chunk-001/file-000.parquet"
E11 = "meta/episodes/chunk-001/file-001.parquet"
E20 = "meta/episodes/chunk-002/file-000.parquet"
EPISODES_FILES = (E00, E01, E10, E11, E20)
EPISODES_OF = {E00: (0, 1), E01: (2, 3), E10: (4, 5), E11: (6, 7), E20: (8, 9)}

DATA_00 = "data/chunk-000/file-000.parquet"  # episodes 0, 1, 2
DATA_01 = "data/chunk-000/file-001.parquet"  # episodes 3, 4, 5
DATA_11 = "data/chunk-001/file-001.parquet"  # episode 9
TOP_20 = "videos/observation.images.top/chunk-002/file-000.mp4"  # episode 9, moov at the end
SIDE_11 = "videos/observation.images.side/chunk-001/file-001.mp4"  # episodes 8, 9, moov at the start
INFO = "meta/info.json"

# The factory dataset: episodes 0-1 in F0 (data file 0), 2-3 in F1 (data file 1).
F0 = "meta/episodes/chunk-000/file-000.parquet"
F1 = "meta/episodes/chunk-000/file-001.parquet"
FACTORY_DATA0 = "data/chunk-000/file-000.parquet"
FACTORY_DATA1 = "data/chunk-000/file-001.parquet"
FACTORY_SPEC = DatasetSpec(lengths=(5, 7, 6, 4), episodes_per_meta_file=2, episodes_per_data_file=2, features={
    "observation.state": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
    "observation.image": {"dtype": "image", "shape": [4, 6, 3], "names": ["height", "width", "channels"]},
    "observation.note": {"dtype": "string", "shape": [1], "names": None},
    "next.done": {"dtype": "bool", "shape": [1], "names": None},
})
FACTORY_FILES = (F0, F1)
FACTORY_EPISODES_OF = {F0: (0, 1), F1: (2, 3)}

ALL = None  # Expect.failed for a dataset-level failure: every episodes file fails


@dataclasses.dataclass(frozen=True)
class Expect:
    """What the import of a hostile dataset must report.

    rules: acceptable rule ids of the row that reports the breakage (the first is the expected one).
    failed: the episodes files that must fail (ALL: every one); the others must import.
    file: the `file` the row must name (None: not checked beyond the episodes file in the message).
    episode: the `episode_index` the row must name, or None where there is no episode.
    words: substrings the message must contain.
    """

    rules: tuple[str, ...]
    failed: Optional[frozenset[str]]
    file: Optional[str] = None
    episode: Optional[int] = None
    words: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class HostileCase:
    name: str
    base: str  # CORPUS_DATASET or "factory"
    breaker: Callable[[Path, Path], None]  # (dataset root, scratch folder outside the root)
    expect: Expect
    extra_args: tuple[str, ...] = ()
    #: For factory datasets: a `mutate_data(table, file_number)` hook for write_dataset.
    mutate_data: Optional[Callable[[pa.Table, int], pa.Table]] = None
    #: "empty": the case is not a failure; the test checks its own expectation. "imports": a dataset that
    #: looks hostile but is valid (a name holding `::`): every episodes file must import. "refused": not a
    #: dataset at all (no meta/info.json): the run stops with one line before writing anything.
    kind: str = "failure"
    #: A known bug: the case is expected to fail its checks (strict xfail), with this reason.
    xfail: Optional[str] = None

    @property
    def episodes_files(self) -> tuple[str, ...]:
        return FACTORY_FILES if self.base == "factory" else EPISODES_FILES


def build(case: HostileCase, workdir: Path) -> Path:
    """Write `case`'s broken dataset under `workdir` (`workdir/ds`); returns the root."""
    root = Path(workdir) / "ds"
    scratch = Path(workdir) / "outside"
    scratch.mkdir(parents=True, exist_ok=True)
    if case.base == "factory":
        write_dataset(root, FACTORY_SPEC, mutate_data=case.mutate_data)
    else:
        src = corpus_dataset()
        shutil.copytree(src, root, ignore=shutil.ignore_patterns("expected"))
    case.breaker(root, scratch)
    return root


def corpus_dataset() -> Path:
    return Path(__file__).resolve().parent / "data" / "lerobot" / CORPUS_DATASET


# ------------------------------------------------------------------------------------------------
# Breakers
# ------------------------------------------------------------------------------------------------

def _write_info_bytes(data: bytes):
    return lambda root, _: (root / INFO).write_bytes(data)


def _edit_info(fn: Callable[[dict], None]):
    return lambda root, _: edit_info(root, fn)


def _truncate(rel: str, fraction: float = 0.5):
    def breaker(root: Path, _: Path) -> None:
        data = (root / rel).read_bytes()
        (root / rel).write_bytes(data[:int(len(data) * fraction)])
    return breaker


def _empty_file(rel: str):
    return lambda root, _: (root / rel).write_bytes(b"")


def _garbage(rel: str):
    """The file's bytes replaced by the same number of random bytes (no Parquet/MP4 magic)."""
    def breaker(root: Path, _: Path) -> None:
        n = (root / rel).stat().st_size
        (root / rel).write_bytes(np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8).tobytes())
    return breaker


def _corrupt_parquet_footer(rel: str):
    """Keep the size and both `PAR1` magics; scramble the Thrift footer metadata in between."""
    def breaker(root: Path, _: Path) -> None:
        data = bytearray((root / rel).read_bytes())
        (footer_len,) = struct.unpack_from("<I", data, len(data) - 8)
        start = len(data) - 8 - footer_len
        rng = np.random.default_rng(11)
        data[start:len(data) - 8] = rng.integers(0, 256, footer_len, dtype=np.uint8).tobytes()
        (root / rel).write_bytes(bytes(data))
    return breaker


def _corrupt_parquet_footer_length(rel: str):
    """The footer length field claims more bytes than the file has."""
    def breaker(root: Path, _: Path) -> None:
        data = bytearray((root / rel).read_bytes())
        struct.pack_into("<I", data, len(data) - 8, 0x7FFFFFF0)
        (root / rel).write_bytes(bytes(data))
    return breaker


def _edit_table(rel: str, fn: Callable[[pa.Table], pa.Table]):
    def breaker(root: Path, _: Path) -> None:
        pq.write_table(fn(pq.read_table(root / rel)), root / rel)
    return breaker


def _set_column(name: str, array: pa.Array):
    def fn(t: pa.Table) -> pa.Table:
        return t.set_column(t.schema.get_field_index(name), pa.field(name, array.type), array)
    return fn


def _map_column(name: str, fn: Callable[[list], list], type_: Optional[pa.DataType] = None):
    def edit(t: pa.Table) -> pa.Table:
        col = t.column(name)
        return _set_column(name, pa.array(fn(col.to_pylist()), type_ or col.type))(t)
    return edit


def _reorder_rows(order: list[int]):
    return lambda t: t.take(pa.array(order))


def _symlink_outside(rel: str):
    """Move the file outside the root and leave a symlink to it in its place."""
    def breaker(root: Path, scratch: Path) -> None:
        target = scratch / rel.replace("/", "__")
        shutil.move(str(root / rel), target)
        (root / rel).symlink_to(target)
    return breaker


def _edit_mp4(rel: str, fn: Callable[[bytes], bytes]):
    def breaker(root: Path, _: Path) -> None:
        (root / rel).write_bytes(fn((root / rel).read_bytes()))
    return breaker


def _moov_span(data: bytes) -> tuple[int, int]:
    moov = mp4.moov_bytes(data)
    start = data.index(moov)
    return start, start + len(moov)


def _truncate_inside_moov(data: bytes) -> bytes:
    start, end = _moov_span(data)
    return data[:start + (end - start) // 2]


def _box_claims_huge(path: str):
    """The box at `path` (inside moov, e.g. "trak") gets a 64-bit size header claiming 2**62 bytes."""
    def fn(data: bytes) -> bytes:
        boxes = mp4.parse_file(data)
        moov = next(b for b in boxes if b.type == b"moov")
        target = moov.find(path)
        target.large = True
        out = bytearray(mp4.serialize_file(boxes))
        at = out.index(b"\x00\x00\x00\x01" + target.type)
        struct.pack_into(">Q", out, at + 8, 1 << 62)
        return bytes(out)
    return fn


def _mdat_claims_huge(data: bytes) -> bytes:
    """The top-level `mdat` gets a 64-bit size header claiming 2**62 bytes."""
    boxes = mp4.parse_file(data)
    mdat = next(b for b in boxes if b.type == b"mdat")
    mdat.large = True
    out = bytearray(mp4.serialize_file(boxes))
    at = out.index(b"\x00\x00\x00\x01mdat")
    struct.pack_into(">Q", out, at + 8, 1 << 62)
    return bytes(out)


def _patch_table_count(box_type: str, offset: int, value: int):
    """Overwrite the u32 at payload `offset` of the first `box_type` box of the video track."""
    def fn(data: bytes) -> bytes:
        def edit(moov: mp4.Box) -> None:
            box = mp4.video_traks(moov)[0].find("mdia/minf/stbl/" + box_type)
            payload = bytearray(box.payload)
            struct.pack_into(">I", payload, offset, value)
            box.payload = bytes(payload)
        return mp4.edit_moov(data, edit, fix_offsets=False)
    return fn


def _zero_samples(data: bytes) -> bytes:
    """The video track's sample tables all say zero samples (stsz, stts, stsc, stco, stss, ctts)."""
    def edit(moov: mp4.Box) -> None:
        stbl = mp4.video_traks(moov)[0].find("mdia/minf/stbl")
        empty = {b"stsz": mp4.full(0) + struct.pack(">II", 0, 0)}
        for child in stbl.children:
            if child.type in (b"stts", b"stsc", b"stco", b"co64", b"stss", b"ctts"):
                child.payload = mp4.full(0) + struct.pack(">I", 0)
            elif child.type in empty:
                child.payload = empty[child.type]
    return mp4.edit_moov(data, edit, fix_offsets=False)


def _not_a_video_codec(data: bytes) -> bytes:
    """The sample entry `avc1` becomes `mp4v` (MPEG-4 Part 2): no supported track."""
    def edit(moov: mp4.Box) -> None:
        stsd = mp4.video_traks(moov)[0].find("mdia/minf/stbl/stsd")
        assert b"avc1" in stsd.payload
        stsd.payload = stsd.payload.replace(b"avc1", b"mp4v", 1)
    return mp4.edit_moov(data, edit)


def _drop_top_level(box_type: bytes):
    def fn(data: bytes) -> bytes:
        boxes = [b for b in mp4.parse_file(data) if b.type != box_type]
        return mp4.serialize_file(boxes)
    return fn


def _invalid_utf8_strings(values: list) -> pa.Array:
    """A string array whose first value is not UTF-8 (Arrow does not validate a binary -> string view)."""
    raw = [b"\xff\xfe not utf-8 \xc3\x28"] + [v.encode() for v in values[1:]]
    return pa.array(raw, pa.binary()).view(pa.string())


def _tasks_not_utf8(t: pa.Table) -> pa.Table:
    tasks = t.column("tasks").combine_chunks()
    flat = _invalid_utf8_strings(tasks.values.to_pylist())
    return _set_column("tasks", pa.ListArray.from_arrays(tasks.offsets, flat))(t)


def _data_timestamps(rel: str, edit: Callable[[np.ndarray], None]):
    def fn(t: pa.Table) -> pa.Table:
        ts = t.column("timestamp").to_numpy().copy()
        edit(ts)
        return _set_column("timestamp", pa.array(ts, t.schema.field("timestamp").type))(t)
    return _edit_table(rel, fn)


def _factory_data(file_number: int, fn: Callable[[pa.Table], pa.Table]):
    return lambda t, n: fn(t) if n == file_number else t


def _nothing(root: Path, _: Path) -> None:
    pass


def _swap_first_timestamps_of_ep0(ts: np.ndarray) -> None:
    ts[3], ts[4] = ts[4], ts[3]


def _nan_in_ep9(ts: np.ndarray) -> None:
    ts[3] = np.nan


def _video_to_before_from(t: pa.Table) -> pa.Table:
    col = "videos/observation.images.top/to_timestamp"
    frm = t.column("videos/observation.images.top/from_timestamp").to_pylist()
    return _set_column(col, pa.array([frm[0] - 0.25] + t.column(col).to_pylist()[1:], pa.float64()))(t)


def _overlapping_ranges(t: pa.Table) -> pa.Table:
    # E10: episode 4 = 42..52, episode 5 = 52..60 -> episode 5 starts at 50 (length kept consistent).
    frm = t.column("dataset_from_index").to_pylist()
    length = t.column("length").to_pylist()
    frm[1] -= 2
    length[1] += 2
    t = _set_column("dataset_from_index", pa.array(frm, pa.int64()))(t)
    return _set_column("length", pa.array(length, pa.int64()))(t)


def _as_list_of_words(t: pa.Table) -> pa.Table:
    values = [[f"x{i}" for i, _ in enumerate(row)] for row in t.column("observation.state").to_pylist()]
    return _set_column("observation.state", pa.array(values, pa.list_(pa.string())))(t)


def _bool_as_words(t: pa.Table) -> pa.Table:
    return _set_column("next.done", pa.array(["maybe"] * t.num_rows, pa.string()))(t)


def _image_bytes_int(t: pa.Table) -> pa.Table:
    n = t.num_rows
    arr = pa.StructArray.from_arrays([pa.array(range(n), pa.int64()), pa.array(["x.png"] * n)],
                                     names=["bytes", "path"])
    return _set_column("observation.image", arr)(t)


def _note_not_utf8(t: pa.Table) -> pa.Table:
    return _set_column("observation.note", _invalid_utf8_strings(t.column("observation.note").to_pylist()))(t)


def _empty_episodes(t: pa.Table) -> pa.Table:
    return t.slice(0, 0)


# ---- special files, git-LFS pointers, hostile JSON, amplification ------------------------------

def _fifo(rel: str):
    """The file replaced by a FIFO: a reader that opens it waits for a writer that never comes."""
    def breaker(root: Path, _: Path) -> None:
        (root / rel).unlink()
        os.mkfifo(root / rel)
    return breaker


def _char_device(rel: str):
    """The file replaced by a character device with /dev/zero's numbers: a reader never reaches its end."""
    def breaker(root: Path, _: Path) -> None:
        (root / rel).unlink()
        try:
            os.mknod(root / rel, stat.S_IFCHR | 0o644, os.makedev(1, 5))
        except PermissionError:
            import pytest
            pytest.skip("creating a character device needs CAP_MKNOD")
    return breaker


def _folder_instead(rel: str):
    def breaker(root: Path, _: Path) -> None:
        (root / rel).unlink()
        (root / rel).mkdir()
    return breaker


def lfs_pointer_text(data: bytes) -> str:
    """What a clone without git-LFS holds instead of `data`."""
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n")


def _lfs_pointer(rel: str):
    def breaker(root: Path, _: Path) -> None:
        (root / rel).write_text(lfs_pointer_text((root / rel).read_bytes()))
    return breaker


def _info_with_raw_value(key: str, raw_json: str):
    """info.json with one more key whose value is `raw_json` written as is (not re-encoded)."""
    def breaker(root: Path, _: Path) -> None:
        text = (root / INFO).read_text().rstrip()
        assert text.endswith("}")
        (root / INFO).write_text(text[:-1].rstrip() + f', "{key}": {raw_json}' + "}")
    return breaker


def _sparse_info(size: int):
    """info.json followed by a hole up to `size` bytes (sparse on disk: cheap to make, costly to read)."""
    def breaker(root: Path, _: Path) -> None:
        os.truncate(root / INFO, size)
    return breaker


def zstd_bomb_tasks(rel: str, nbytes: int):
    """Each row's `tasks` becomes one string of `nbytes` repeated letters: kilobytes once zstd-compressed."""
    def fn(t: pa.Table) -> pa.Table:
        flat = pa.array(["a" * nbytes] * t.num_rows, pa.string())
        tasks = pa.ListArray.from_arrays(pa.array(np.arange(t.num_rows + 1, dtype=np.int32)), flat)
        return _set_column("tasks", tasks)(t)

    def breaker(root: Path, _: Path) -> None:
        pq.write_table(fn(pq.read_table(root / rel)), root / rel, compression="zstd")
    return breaker


def dictionary_bomb_tasks(rel: str, rows: int, nbytes: int):
    """`rows` rows (the file's first row repeated, without its stats) whose `tasks` all hold the same
    string of `nbytes` letters: written once in the file's dictionary, decoded once per row."""
    def breaker(root: Path, _: Path) -> None:
        t = pq.read_table(root / rel)
        t = t.select([c for c in t.column_names if not c.startswith("stats/")])
        t = t.take(pa.array(np.zeros(rows, np.int64)))
        tasks = pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32)),
                                         pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)),
                                                                        pa.array(["a" * nbytes])))
        t = _set_column("tasks", tasks)(t)
        pq.write_table(t, root / rel, compression="zstd", dictionary_pagesize_limit=4 * nbytes)
    return breaker


def _many_zero_length_rows(rel: str, n: int):
    """`n` rows of zero-length episodes (ids past every real one) in place of the file's rows."""
    def fn(t: pa.Table) -> pa.Table:
        t = t.select([c for c in t.column_names if not c.startswith("stats/")]).take(pa.array(np.zeros(n, np.int64)))
        zeros = pa.array(np.zeros(n, np.int64))
        t = _set_column("episode_index", pa.array(np.arange(1_000_000, 1_000_000 + n, dtype=np.int64)))(t)
        for name in ("length", "dataset_from_index", "dataset_to_index"):
            t = _set_column(name, zeros)(t)
        return t
    return _edit_table(rel, fn)


def _duplicate_column(rel: str, name: str):
    def breaker(root: Path, _: Path) -> None:
        t = pq.read_table(root / rel)
        pq.write_table(t.append_column(pa.field(name, t.schema.field(name).type), t.column(name)), root / rel)
    return breaker


def _rename_camera(old: str, new: str):
    """Camera `old` renamed `new` everywhere: info.json, the episodes files' columns, the videos folder."""
    def breaker(root: Path, _: Path) -> None:
        edit_info(root, lambda i: i.update(features={(new if k == old else k): v for k, v in i["features"].items()}))
        for rel in EPISODES_FILES:
            t = pq.read_table(root / rel)
            pq.write_table(t.rename_columns([c.replace(f"/{old}/", f"/{new}/") for c in t.column_names]), root / rel)
        (root / "videos" / old).rename(root / "videos" / new)
    return breaker


def _data_path_suffix(suffix: str):
    """`data_path` gets `suffix` appended, and every data file is renamed to the name it now renders."""
    def breaker(root: Path, _: Path) -> None:
        edit_info(root, lambda i: i.update(data_path=i["data_path"] + suffix))
        for path in sorted((root / "data").rglob("*.parquet")):
            path.rename(path.with_name(path.name + suffix))
    return breaker


# ------------------------------------------------------------------------------------------------
# The cases
# ------------------------------------------------------------------------------------------------

def _c(name, breaker, rules, failed, file=None, episode=None, words=(), **kw) -> HostileCase:
    rules = (rules,) if isinstance(rules, str) else tuple(rules)
    failed = ALL if failed is ALL else frozenset(failed)
    return HostileCase(name, kw.pop("base", CORPUS_DATASET), breaker,
                       Expect(rules, failed, file, episode, tuple(words)), **kw)


CASES: list[HostileCase] = [
    # ---- info.json: dataset-level, every episodes file fails -----------------------------------
    _c("info_not_json", _write_info_bytes(b'{"codebase_version": "v3.0", "fps": 15,'), "info_json", ALL, INFO,
       words=["not JSON"]),
    _c("info_not_utf8", lambda r, _: (r / INFO).write_bytes(
        (r / INFO).read_bytes().replace(b'"synthetic"', b'"synth\xff\xfetic"')), "info_json", ALL, INFO,
       words=["not UTF-8"]),
    _c("info_json_array", _write_info_bytes(b"[1, 2, 3]"), "info_json", ALL, INFO, words=["JSON object"]),
    _c("info_missing", lambda r, _: (r / INFO).unlink(), "info_json", ALL, INFO, words=["does not exist"],
       kind="refused"),
    _c("info_empty", _write_info_bytes(b""), "info_json", ALL, INFO),
    _c("info_features_not_object", _edit_info(lambda i: i.update(features=["action"])),
       ("bad_feature", "info_json"), ALL, INFO),
    _c("info_feature_entry_string", _edit_info(lambda i: i["features"].update(action="float32")),
       "bad_feature", ALL, INFO, words=["action"]),
    _c("info_codebase_v21", _edit_info(lambda i: i.update(codebase_version="v2.1")), "codebase_version", ALL, INFO,
       words=["v2.1"]),
    _c("info_video_path_null", _edit_info(lambda i: i.update(video_path=None)), "missing_video_path", ALL, INFO,
       words=["video_path"]),
    _c("info_bool_shape", _edit_info(lambda i: i["features"].update(
        {"next.done": {"dtype": "bool", "shape": [2], "names": None}})), "scalar_shape", ALL, INFO,
       words=["next.done"]),
    _c("info_template_escapes", _edit_info(lambda i: i.update(
        video_path="../../{video_key}/{chunk_index}/{file_index}.mp4")), "path_template", ALL, INFO),
    _c("info_symlink_outside", _symlink_outside(INFO), ("path_outside_root",), ALL, INFO),

    # ---- episodes files: only the broken one fails ---------------------------------------------
    _c("episodes_truncated", _truncate(E01, 0.6), "episodes_file", {E01}, E01, words=["Parquet"]),
    _c("episodes_empty_bytes", _empty_file(E10), "episodes_file", {E10}, E10),
    _c("episodes_garbage", _garbage(E00), "episodes_file", {E00}, E00, words=["Parquet"]),
    _c("episodes_corrupt_footer", _corrupt_parquet_footer(E11), "episodes_file", {E11}, E11),
    _c("episodes_footer_length_huge", _corrupt_parquet_footer_length(E20), "episodes_file", {E20}, E20),
    _c("episodes_tasks_int", _edit_table(E11, _set_column("tasks", pa.array([1, 2], pa.int64()))),
       "episodes_file", {E11}, E11, words=["tasks"]),
    _c("episodes_tasks_not_utf8", _edit_table(E01, _tasks_not_utf8), ("episodes_file",), {E01}, E01,),
    _c("episodes_from_index_strings", _edit_table(E10, _set_column(
        "dataset_from_index", pa.array(["forty-two", "fifty-two"]))), "episodes_file", {E10}, E10,
       words=["dataset_from_index"]),
    _c("episodes_from_index_float", _edit_table(E10, _set_column(
        "dataset_from_index", pa.array([42.5, 52.0]))), "episodes_file", {E10}, E10,
       words=["dataset_from_index"]),
    _c("episodes_index_null", _edit_table(E00, _set_column("episode_index", pa.array([0, None], pa.int64()))),
       "episodes_file", {E00}, E00, words=["episode_index"]),
    _c("episodes_missing_length", _edit_table(E01, lambda t: t.drop_columns(["length"])),
       "episodes_file", {E01}, E01, words=["length"]),
    _c("episodes_missing_video_column", _edit_table(E20, lambda t: t.drop_columns(
        ["videos/observation.images.side/to_timestamp"])), "episodes_file", {E20}, E20,
       words=["videos/observation.images.side/to_timestamp"]),
    _c("episodes_out_of_order", _edit_table(E20, _reorder_rows([1, 0])), "episode_order", {E20}, E20, 8,
       words=["increasing"]),
    _c("episodes_duplicate_in_file", _edit_table(E01, _map_column("episode_index", lambda v: [2, 2])),
       "duplicate_episode", {E01}, E01, 2,),
    _c("episodes_duplicate_across_files", _edit_table(E20, _map_column("episode_index", lambda v: [7, 9])),
       "duplicate_episode", {E11, E20}, None, 7, words=["episode 7"]),
    _c("episodes_overlapping_ranges", _edit_table(E10, _overlapping_ranges), "episode_order", {E10}, E10, 5,
       words=["overlapping"]),
    _c("episodes_to_before_from", _edit_table(E10, _video_to_before_from), "timestamps", {E10}, E10, 4,
       words=["observation.images.top"]),
    _c("episodes_from_timestamp_nan", _edit_table(E00, _map_column(
        "videos/observation.images.side/from_timestamp", lambda v: [v[0], float("nan")])),
       "timestamps", {E00}, E00, 1),
    _c("episodes_data_file_index_missing", _edit_table(E11, _map_column("data/file_index", lambda v: [7, 7])),
       "file_missing", {E11}, "data/chunk-001/file-007.parquet", 6),
    _c("episodes_chunk_index_negative", _edit_table(E11, _map_column("data/chunk_index", lambda v: [-1, -1])),
       ("path_template", "file_missing", "episodes_file"), {E11}, None),
    _c("episodes_file_index_2_62", _edit_table(E11, _map_column(
        "videos/observation.images.top/file_index", lambda v: [1 << 62, 1 << 62])),
       ("file_missing", "path_template"), {E11}, None),
    _c("episodes_symlink_outside", _symlink_outside(E01), "path_outside_root", {E01}, E01),

    # ---- data files ----------------------------------------------------------------------------
    _c("data_truncated", _truncate(DATA_11), "data_file", {E20}, DATA_11, 9),
    _c("data_empty_bytes", _empty_file(DATA_11), "data_file", {E20}, DATA_11, 9),
    _c("data_corrupt_footer", _corrupt_parquet_footer(DATA_11), "data_file", {E20}, DATA_11, 9),
    _c("data_garbage_shared_file", _garbage(DATA_01), "data_file", {E01, E10}, DATA_01),
    _c("data_timestamp_nan", _data_timestamps(DATA_11, _nan_in_ep9), "timestamps", {E20}, DATA_11, 9,
       words=["NaN"]),
    _c("data_timestamp_backwards", _data_timestamps(DATA_00, _swap_first_timestamps_of_ep0), "timestamps",
       {E00}, DATA_00, 0, words=["backwards"],),
    _c("data_symlink_outside", _symlink_outside(DATA_11), "path_outside_root", {E20}, DATA_11),
    _c("data_span_limit", _nothing, "data_span", {E01, E20}, None,
       extra_args=("--one-part", "--data-span-limit", "10000")),

    # ---- MP4s (both used by E20 only) ----------------------------------------------------------
    _c("mp4_truncated_in_moov_at_end", _edit_mp4(TOP_20, _truncate_inside_moov), "mp4_structure", {E20},
       TOP_20, 9),
    _c("mp4_truncated_in_moov_at_start", _edit_mp4(SIDE_11, _truncate_inside_moov), "mp4_structure", {E20},
       SIDE_11, 8),
    _c("mp4_trak_claims_2_62", _edit_mp4(SIDE_11, _box_claims_huge("trak")), "mp4_structure", {E20}, SIDE_11, 8),
    _c("mp4_stbl_claims_2_62", _edit_mp4(TOP_20, _box_claims_huge("trak/mdia/minf/stbl")), "mp4_structure",
       {E20}, TOP_20, 9),
    _c("mp4_mdat_claims_2_62", _edit_mp4(SIDE_11, _mdat_claims_huge), "mp4_structure", {E20}, SIDE_11, 8),
    _c("mp4_stsz_count_too_large", _edit_mp4(SIDE_11, _patch_table_count("stsz", 8, 0x00FFFFFF)),
       ("mp4_limits", "mp4_structure"), {E20}, SIDE_11, 8, words=["16,777,215 samples"]),
    _c("mp4_stco_count_too_large", _edit_mp4(TOP_20, _patch_table_count("stco", 4, 0x7FFFFFFF)),
       "mp4_structure", {E20}, TOP_20, 9, words=["stco"]),
    _c("mp4_stts_count_too_large", _edit_mp4(SIDE_11, _patch_table_count("stts", 4, 0xFFFFFFFF)),
       "mp4_structure", {E20}, SIDE_11, 8, words=["stts"]),
    _c("mp4_zero_samples", _edit_mp4(SIDE_11, _zero_samples), ("mp4_structure", "mp4_track"), {E20}, SIDE_11, 8,
       words=["no samples"]),
    _c("mp4_no_supported_track", _edit_mp4(TOP_20, _not_a_video_codec), "mp4_track", {E20}, TOP_20, 9),
    _c("mp4_no_moov", _edit_mp4(SIDE_11, _drop_top_level(b"moov")), "mp4_structure", {E20}, SIDE_11, 8,
       words=["moov"]),
    _c("mp4_no_ftyp", _edit_mp4(TOP_20, _drop_top_level(b"ftyp")), "mp4_structure", {E20}, TOP_20, 9,
       words=["ftyp"]),
    _c("mp4_empty", _empty_file(SIDE_11), "mp4_structure", {E20}, SIDE_11, 8),
    _c("mp4_garbage", _garbage(TOP_20), "mp4_structure", {E20}, TOP_20, 9),
    _c("mp4_missing", lambda r, _: (r / TOP_20).unlink(), "file_missing", {E20}, TOP_20, 9),
    _c("mp4_symlink_outside", _symlink_outside(TOP_20), "path_outside_root", {E20}, TOP_20, 9),

    # ---- factory datasets (image, bool and string features) ------------------------------------
    _c("factory_state_as_words", _nothing, "column_type", {F0}, FACTORY_DATA0, 0, base="factory",
       mutate_data=_factory_data(0, _as_list_of_words), words=["observation.state"]),
    _c("factory_bool_as_words", _nothing, "column_type", {F1}, FACTORY_DATA1, 2, base="factory",
       mutate_data=_factory_data(1, _bool_as_words), words=["next.done"]),
    _c("factory_image_bytes_int", _nothing, "image_column", {F0}, FACTORY_DATA0, 0, base="factory",
       mutate_data=_factory_data(0, _image_bytes_int), words=["observation.image"]),
    _c("factory_string_not_utf8", _nothing, ("column_type", "data_file"), {F1}, FACTORY_DATA1, 2, base="factory",
       mutate_data=_factory_data(1, _note_not_utf8), words=["observation.note"],),
    _c("factory_string_shape", _edit_info(lambda i: i["features"]["observation.note"].update(shape=[3])),
       "scalar_shape", ALL, INFO, base="factory", words=["observation.note"]),

    # ---- special files: only regular files are read, and the message says what the path is -----
    _c("special_fifo_info", _fifo(INFO), "not_a_file", ALL, INFO, words=["FIFO", "regular file"]),
    _c("special_fifo_episodes", _fifo(E10), "not_a_file", {E10}, E10, words=["FIFO", "regular file"]),
    _c("special_fifo_data", _fifo(DATA_11), "not_a_file", {E20}, DATA_11, 9, words=["FIFO"]),
    _c("special_chardev_data", _char_device(DATA_11), "not_a_file", {E20}, DATA_11, 9,
       words=["character device"]),
    _c("special_fifo_mp4", _fifo(TOP_20), "not_a_file", {E20}, TOP_20, 9, words=["FIFO"]),
    _c("special_folder_data", _folder_instead(DATA_11), "not_a_file", {E20}, DATA_11, 9, words=["a folder"]),

    # ---- git-LFS pointers where the content should be ------------------------------------------
    _c("lfs_pointer_info", _lfs_pointer(INFO), "lfs_pointer", ALL, INFO, words=["git-LFS pointer", "git lfs pull"]),
    _c("lfs_pointer_episodes", _lfs_pointer(E10), "lfs_pointer", {E10}, E10, words=["git-LFS pointer", "git lfs pull"]),
    _c("lfs_pointer_data", _lfs_pointer(DATA_11), "lfs_pointer", {E20}, DATA_11, 9,
       words=["git-LFS pointer", "git lfs pull"]),
    _c("lfs_pointer_mp4", _lfs_pointer(TOP_20), "lfs_pointer", {E20}, TOP_20, 9, words=["git-LFS pointer"]),

    # ---- info.json that costs more than it says --------------------------------------------------
    _c("info_nested_100k_deep", _info_with_raw_value("deep", "[" * 100_000 + "]" * 100_000), "info_json", ALL, INFO,
       words=["nests"]),
    _c("info_5000_digit_number", _info_with_raw_value("total_frames", "1" + "0" * 5000), "info_json", ALL, INFO,
       words=["4,300 digits"]),
    _c("info_sparse_1gib", _sparse_info(1 << 30), "limit", ALL, INFO, words=["1,073,741,824 bytes"]),
    _c("info_template_width_50m", _edit_info(lambda i: i.update(
        data_path="data/chunk-{chunk_index:050000000d}/file-{file_index:03d}.parquet")), "path_template", ALL, INFO,
       words=["50000000 digits", "at most 32"]),
    _c("info_template_width_overflow", _edit_info(lambda i: i.update(
        data_path="data/chunk-{chunk_index:0" + "9" * 30 + "d}/file-{file_index:03d}.parquet")), "path_template",
       ALL, INFO, words=["digits", "at most 32"]),
    _c("info_template_unknown_chained_scheme", _edit_info(lambda i: i.update(
        data_path="data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet::foo")), "file_missing",
       EPISODES_FILES, DATA_00 + "::foo", 0, words=["does not exist"]),
    _c("factory_image_width_2_40", _edit_info(lambda i: i["features"]["observation.image"].update(
        shape=[4, 2 ** 40, 3])), "bad_feature", ALL, INFO, base="factory",
       words=["observation.image", "2,147,483,647"]),

    # ---- episodes files that decompress or multiply without bound -------------------------------
    _c("episodes_zstd_bomb_tasks", zstd_bomb_tasks(E10, 40 << 20), "limit", {E10}, E10,
       words=["decompressed", "67,108,864 bytes"]),
    _c("episodes_dictionary_bomb_tasks", dictionary_bomb_tasks(E10, 2000, 1 << 20), "limit", {E10}, E10,
       words=["decoded", "67,108,864 bytes"]),
    _c("episodes_200k_zero_length_rows", _many_zero_length_rows(E10, 200_000), "limit", {E10}, E10,
       words=["200,000 rows", "100,000"]),
    _c("episodes_from_timestamp_1e10", _edit_table(E10, lambda t: _map_column(
        "videos/observation.images.top/to_timestamp", lambda v: [1e10 + 1, v[1]])(_map_column(
            "videos/observation.images.top/from_timestamp", lambda v: [1e10, v[1]])(t))), "timestamps", {E10}, E10, 4,
       words=["10000000000.0", "int64"]),
    _c("episodes_duplicate_column", _duplicate_column(E10, "length"), "episodes_file", {E10}, E10,
       words=["2 columns named `length`"]),
    _c("data_duplicate_column", _duplicate_column(DATA_11, "observation.state"), ("data_file", "missing_column"),
       {E20}, DATA_11, 9, words=["2 columns named `observation.state`"]),

    # ---- names fsspec would read as URL syntax: read literally, as named -------------------------
    _c("camera_key_with_double_colon", _rename_camera("observation.images.top", "observation.images.top::left"),
       (), EPISODES_FILES, kind="imports"),
    _c("data_path_double_colon_file", _data_path_suffix("::file"), (), EPISODES_FILES, kind="imports"),

    # ---- not a failure: an episodes file with no rows imports as an empty part -----------------
    _c("episodes_zero_rows", _edit_table(E10, _empty_episodes), (), {E10}, kind="empty",),
]


def cases_by_name() -> dict[str, HostileCase]:
    out = {c.name: c for c in CASES}
    assert len(out) == len(CASES), "case names must be unique"
    return out
