"""The input side's limits and literal reads, unit by unit: message lengths, URLs never chained, only
regular files read, git-LFS pointers recognised on any filesystem, sizes checked before reading,
episodes files refused from their footer, timestamps that fit int64 nanoseconds."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import SAMPLE
from tests.hostile_datasets import lfs_pointer_text
from transforms.base import storage
from transforms.base.errors import MAX_MESSAGE_CHARS, LeRobotImportError, quote
from transforms.lerobot import episodes_files
from transforms.lerobot.info import TEMPLATE_MAX_WIDTH, parse_info

EPISODES = SAMPLE / "meta" / "episodes" / "chunk-000" / "file-000.parquet"


def _info(**changes) -> bytes:
    doc = json.loads((SAMPLE / "meta" / "info.json").read_text())
    doc.update(changes)
    return json.dumps(doc).encode()


def _rule(fn) -> LeRobotImportError:
    with pytest.raises(LeRobotImportError) as raised:
        fn()
    return raised.value


# ---- messages ------------------------------------------------------------------------------------

def test_long_messages_are_cut_and_say_by_how_much():
    err = LeRobotImportError("info_json", "x" * 20_000, file="f" * 10_000)
    assert len(err.message) < MAX_MESSAGE_CHARS + 64
    assert err.message.endswith("… (16000 more characters)")
    assert err.file.endswith("… (5904 more characters)")
    again = pickle.loads(pickle.dumps(err))  # cut once, not again on the way through Beam
    assert (again.message, again.file) == (err.message, err.file)
    assert len(str(err.to_record().message)) < MAX_MESSAGE_CHARS + 4096 + 200  # message + file, each cut


def test_quote_never_prints_thousands_of_digits():
    assert quote(10 ** 5000) == "a 16610-bit integer"
    assert quote([10 ** 5000]) == "a list too large to print"
    assert quote("a" * 1000) == "'" + "a" * 200 + "'… (800 more characters)"
    assert quote(1e10) == "10000000000.0"


# ---- URLs are read literally ---------------------------------------------------------------------

def test_double_colon_is_part_of_a_name(tmp_path):
    (tmp_path / "a::b").mkdir()
    (tmp_path / "a::b" / "x.parquet::file").write_bytes(b"PAR1")
    fs, path = storage.filesystem(f"file://{tmp_path}/a::b/x.parquet::file")
    assert path == f"{tmp_path}/a::b/x.parquet::file" and fs.cat_file(path) == b"PAR1"
    _, local = storage.filesystem(str(tmp_path / "a::b"))
    assert local == f"{tmp_path}/a::b"
    mfs, mpath = storage.filesystem("memory://limits/cam::left/file.mp4")
    assert mpath == "/limits/cam::left/file.mp4"


def test_unknown_and_chained_schemes_are_the_url_rule():
    err = _rule(lambda: storage.filesystem("hdfz://x/y"))
    assert err.rule == "url" and "`hdfz://`, a URL scheme no filesystem is known for" in str(err)
    err = _rule(lambda: storage.filesystem("simplecache::gs://b/ds"))
    assert err.rule == "url" and "chains filesystems with `::`" in str(err)


# ---- only regular files, never more than asked ---------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "folder", "chardev"])
def test_special_files_are_named_not_opened(tmp_path, kind):
    path = tmp_path / "info.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        try:
            os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))
        except PermissionError:
            pytest.skip("creating a character device needs CAP_MKNOD")
    words = {"fifo": "a FIFO (named pipe)", "folder": "a folder", "chardev": "a character device"}[kind]
    uri = f"file://{path}"
    for read in (lambda: storage.read_bytes(uri, what="info file", file="meta/info.json"),
                 lambda: storage.open_counted(uri, storage.ReadCounter(), what="data file", file="d.parquet"),
                 lambda: storage.file_size(uri, what="video file", file="v.mp4")):
        err = _rule(read)
        assert err.rule == "not_a_file" and f"is {words}, not a regular file" in err.message


def test_read_bytes_checks_the_size_first(tmp_path):
    path = tmp_path / "info.json"
    path.write_bytes(b"{}")
    os.truncate(path, 1 << 40)  # a terabyte, sparse: reading it would never finish
    err = _rule(lambda: storage.read_bytes(f"file://{path}", what="info file", file="meta/info.json",
                                           max_bytes=1 << 20))
    assert err.rule == "limit" and "is 1,099,511,627,776 bytes; at most 1,048,576 bytes" in err.message


def test_lfs_pointer_is_recognised_on_an_object_store():
    fs = fsspec.filesystem("memory")
    data = EPISODES.read_bytes()
    fs.pipe("/limits-lfs/file-000.parquet", lfs_pointer_text(data).encode())
    try:
        uri = "memory://limits-lfs/file-000.parquet"
        for read in (lambda: storage.read_bytes(uri, what="episodes file", file="meta/episodes/x.parquet"),
                     lambda: storage.open_counted(uri, storage.ReadCounter(), what="data file", file="d.parquet")):
            err = _rule(read)
            assert err.rule == "lfs_pointer" and "is a git-LFS pointer, not the file" in err.message
        fs.pipe("/limits-lfs/file-000.parquet", data)
        assert storage.read_bytes(uri, what="episodes file", file="x") == data
    finally:
        fs.rm("/limits-lfs", recursive=True)


def test_small_real_files_are_not_pointers(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_bytes(b'{"version": "https://git-lfs is mentioned, not a pointer"}')
    assert storage.read_bytes(f"file://{path}", what="file", file="tiny.json").startswith(b'{"version"')


def test_hf_cache_blobs_only(tmp_path):
    repo = tmp_path / "hub" / "datasets--org--name"
    snapshot = repo / "snapshots" / "rev"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "blobs" / "abc").write_bytes(b"PAR1" * 300)
    (repo / "refs").mkdir()
    (repo / "refs" / "secret").write_bytes(b"not a blob" * 200)
    (snapshot / "ok.parquet").symlink_to("../../blobs/abc")
    (snapshot / "bad.parquet").symlink_to("../../refs/secret")
    root = f"file://{snapshot}"
    assert storage.dataset_file(root, "ok.parquet") == f"{root}/ok.parquet"
    err = _rule(lambda: storage.dataset_file(root, "bad.parquet"))
    assert err.rule == "path_outside_root"
    assert storage.hf_cache_blobs(str(tmp_path)) is None


# ---- episodes files ------------------------------------------------------------------------------

def _info_model():
    return parse_info((SAMPLE / "meta" / "info.json").read_bytes())


def _episodes_bytes(table: pa.Table, **kw) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **kw)
    return sink.getvalue().to_pybytes()


def test_footer_limits_refuse_before_decoding():
    raw = EPISODES.read_bytes()
    pf = pq.ParquetFile(pa.BufferReader(raw))
    episodes_files.check_footer(pf, ["tasks"], file="f")
    err = _rule(lambda: episodes_files.check_footer(pf, ["tasks"], file="f", max_rows=3))
    assert err.rule == "limit" and "has 4 rows" in err.message and "up to 3 episodes" in err.message
    err = _rule(lambda: episodes_files.check_footer(pf, ["tasks", "episode_index"], file="f", max_bytes=10))
    assert err.rule == "limit" and "more than 10 bytes once decompressed" in err.message


def test_bomb_is_refused_and_its_episodes_not_counted():
    table = pq.read_table(EPISODES)
    big = pa.array(["t" * (20 << 20)] * table.num_rows)
    tasks = pa.ListArray.from_arrays(pa.array(np.arange(table.num_rows + 1, dtype=np.int32)), big)
    raw = _episodes_bytes(table.set_column(table.schema.get_field_index("tasks"), "tasks", tasks),
                          compression="zstd")
    assert len(raw) < 200_000
    err = _rule(lambda: episodes_files.read_episode_rows(raw, _info_model(), file="E"))
    assert err.rule == "limit" and "decompressed" in err.message
    assert episodes_files.episode_indices(raw) == (0, 1, 2, 3)  # only episode_index is read for them
    assert episodes_files.episode_indices(_episodes_bytes(table.take(pa.array(np.zeros(100_001, np.int64))))) == ()


def test_first_bad_row_is_reported_in_row_order():
    table = pq.read_table(EPISODES)
    cam = "videos/observation.images.front/from_timestamp"
    frm = table.column(cam).to_pylist()
    frm[0] = 5e9  # beyond int64 nanoseconds with offsets
    table = table.set_column(table.schema.get_field_index(cam), cam, pa.array(frm))
    lengths = table.column("length").to_pylist()
    lengths[2] += 1
    table = table.set_column(table.schema.get_field_index("length"), "length", pa.array(lengths))
    err = _rule(lambda: episodes_files.read_episode_rows(table, _info_model(), file="E"))
    assert (err.rule, err.episode_index) == ("timestamps", 0)
    assert "spans 5000000000.0.." in err.message and "int64 nanoseconds" in err.message
    frm[0] = 4.0e9  # a long file, but it fits
    to = [max(4.0e9, t) if i == 0 else t for i, t in enumerate(table.column(cam.replace("from", "to")).to_pylist())]
    table = table.set_column(table.schema.get_field_index(cam), cam, pa.array(frm))
    to_col = cam.replace("from", "to")
    table = table.set_column(table.schema.get_field_index(to_col), to_col, pa.array(to))
    err = _rule(lambda: episodes_files.read_episode_rows(table, _info_model(), file="E"))
    assert (err.rule, err.episode_index) == ("length_mismatch", 2)


def test_rows_read_the_same_with_many_rows_sharing_files():
    info = _info_model()
    rows = episodes_files.read_episode_rows(EPISODES.read_bytes(), info, file="E")
    assert [(r.episode_index, r.length, r.data_file) for r in rows] == [
        (0, 12, "data/chunk-000/file-000.parquet"), (1, 9, "data/chunk-000/file-000.parquet"),
        (2, 15, "data/chunk-000/file-000.parquet"), (3, 10, "data/chunk-000/file-000.parquet")]
    assert rows[2].tasks == ("Put the cube in the bin.", "Pick up the red cube.")
    assert rows[1].videos[0].file == "videos/observation.images.front/chunk-000/file-000.mp4"


def test_duplicate_columns_are_named():
    table = pq.read_table(EPISODES)
    raw = _episodes_bytes(table.append_column("tasks", table.column("tasks")))
    err = _rule(lambda: episodes_files.read_episode_rows(raw, _info_model(), file="E"))
    assert err.rule == "episodes_file" and "has 2 columns named `tasks`" in err.message
    err = _rule(lambda: episodes_files.check_unique_columns(["index", "a", "index"], ["index"], what="data file",
                                                            file="d", rule="data_file"))
    assert err.rule == "data_file" and "the data file has 2 columns named `index`" in err.message


# ---- info.json -----------------------------------------------------------------------------------

def test_template_width_bound():
    path = "data/chunk-{chunk_index:0%dd}/file-{file_index:03d}.parquet"
    info = parse_info(_info(data_path=path % TEMPLATE_MAX_WIDTH))
    assert info.data_file(1, 2) == "data/chunk-" + "0" * (TEMPLATE_MAX_WIDTH - 1) + "1/file-002.parquet"
    err = _rule(lambda: parse_info(_info(data_path=path % (TEMPLATE_MAX_WIDTH + 1))))
    assert err.rule == "path_template" and "pads `chunk_index` to 33 digits; at most 32" in err.message


@pytest.mark.parametrize("raw, words", [
    (b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nests arrays or objects too deeply"),
    (b'{"fps": 1' + b"0" * 5000 + b"}", "an integer of more than 4,300 digits"),
])
def test_hostile_json_is_the_info_json_rule(raw, words):
    err = _rule(lambda: parse_info(raw))
    assert err.rule == "info_json" and words in err.message


def test_shapes_and_feature_counts_are_bounded():
    doc = json.loads(_info())
    doc["features"]["observation.images.front"]["shape"] = [2 ** 40, 640, 3]
    err = _rule(lambda: parse_info(json.dumps(doc).encode()))
    assert err.rule == "bad_feature" and "observation.images.front" in err.message
    many = {f"f{i}": {"dtype": "float32", "shape": [1]} for i in range(5000)}
    err = _rule(lambda: parse_info(_info(features=many)))
    assert err.rule == "limit" and "5,000 features" in err.message


def test_copied_sample_still_parses(tmp_path):
    root = Path(shutil.copytree(SAMPLE, tmp_path / "s"))
    assert parse_info((root / "meta" / "info.json").read_bytes()).codebase_version == "v3.0"
