"""The MP4 moov reader and spql.MediaIndex builder against the reference, PyAV, and broken files."""

from __future__ import annotations

import concurrent.futures
import os
import random
import struct
from pathlib import Path
import fsspec
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mp4_factory as F
from transforms.episode import spql_types
from transforms.base.errors import LeRobotImportError
from transforms.mp4 import tables
from transforms.mp4.boxes import HEAD_SIZE, read_moov
from transforms.mp4.media_index import (NO_TRACK_MESSAGE, media_index_array, parse_media_index, read_media_index,
                                        read_media_index_from)
from transforms.mp4.ranges import BytesRangeReader
from transforms.mp4.tables import MediaIndex

LOCAL = fsspec.filesystem("file")
CORPUS_MP4S = sorted(str(p) for p in F.CORPUS.glob("*/videos/**/*.mp4"))
needs_oracle = pytest.mark.skipif(not F.spiral_available(), reason="spiral-sdk (the reference) is not importable")


def ours(path: str | os.PathLike) -> dict:
    return read_media_index(LOCAL, str(path)).index.storage.to_pylist()[0]


def ours_or_error(path: str | os.PathLike):
    try:
        return ours(path)
    except LeRobotImportError as ex:
        return ex


def assert_same_index(got: dict, want: dict) -> None:
    """Field by field, so a failure names the table that differs."""
    assert got["primary_track_id"] == want["primary_track_id"]
    assert [t["track_id"] for t in got["tracks"]] == [t["track_id"] for t in want["tracks"]]
    for g, w in zip(got["tracks"], want["tracks"]):
        assert list(g) == list(w)
        for key in w:
            assert g[key] == w[key], f"track {w['track_id']} field {key}"


def _parallel(fn, items):
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(fn, items))


# ------------------------------------------------------------------------------------------------
# 1. Corpus MP4s equal the reference's index
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def corpus_reference(tmp_path_factory) -> dict[str, dict]:
    """{real path of each corpus MP4: the reference's MediaIndex}. Datasets the reference accepts are
    run as they are, one oracle call per episodes file; MP4s of a dataset it rejects (the `language`
    dtype) are indexed through a one-episode dataset around the file."""
    if not F.spiral_available():
        pytest.skip("spiral-sdk (the reference) is not importable")
    runs = [(root, str(ep.relative_to(root))) for root in sorted(F.CORPUS.iterdir()) if root.is_dir()
            for ep in sorted(root.glob("meta/episodes/*/*.parquet"))]

    def run(job):
        try:
            return F.indexes_of(F.run_oracle(*job))
        except F.OracleError:
            return {}
    found: dict[str, dict] = {}
    for part in _parallel(run, runs):
        found.update(part)
    missing = [p for p in CORPUS_MP4S if os.path.realpath(p) not in found]
    work = tmp_path_factory.mktemp("corpus_oracle")

    def single(path):
        label = "h264" if "h264" in path else "av1"  # the corpus holds H.264 and AV1 files
        return os.path.realpath(path), F.oracle_index(path, label, work / "_".join(Path(path).parts[-5:-1]))
    for real, index in _parallel(single, missing):
        found[real] = index
    return found


def test_corpus_is_there():
    """The project's LeRobot-writer datasets hold exactly the MP4s their episodes files point at."""
    import json

    import pyarrow.parquet as pq
    referenced = set()
    for root in sorted(p for p in F.CORPUS.iterdir() if (p / "meta" / "info.json").is_file()):
        info = json.loads((root / "meta" / "info.json").read_text())
        cameras = [key for key, feature in info["features"].items() if feature["dtype"] == "video"]
        for episodes in root.glob("meta/episodes/*/*.parquet"):
            table = pq.read_table(episodes)
            for key in cameras:
                for chunk, file in zip(table[f"videos/{key}/chunk_index"].to_pylist(),
                                       table[f"videos/{key}/file_index"].to_pylist()):
                    referenced.add(str(root / info["video_path"].format(video_key=key, chunk_index=chunk,
                                                                        file_index=file)))
    assert sorted(referenced) == CORPUS_MP4S
    assert len(CORPUS_MP4S) == 13  # so101_av1 2, language 2, h264_multi_file 5 top + 4 side


@needs_oracle
@pytest.mark.parametrize("mp4", CORPUS_MP4S, ids=lambda p: "/".join(Path(p).parts[-5:]))
def test_corpus_index_equals_reference(mp4, corpus_reference):
    assert_same_index(ours(mp4), corpus_reference[os.path.realpath(mp4)])


def test_arrow_type_is_spql_media_index():
    arr = read_media_index(LOCAL, CORPUS_MP4S[0]).index
    assert isinstance(arr, pa.ExtensionArray) and len(arr) == 1
    assert arr.type.extension_name == "spql.MediaIndex"
    assert spql_types.type_signature(arr.type) == spql_types.type_signature(spql_types.media_index())
    arr.validate(full=True)


# ------------------------------------------------------------------------------------------------
# 2. Generated and edited MP4s against the reference
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def encoded(tmp_path_factory) -> dict[str, Path]:
    """Base clips, encoded once per session with PyAV."""
    d = tmp_path_factory.mktemp("encoded")
    # one encoder thread: x264's frame threads make two encodes of the same frames differ on a busy
    # machine, and tests compare the faststart and moov-at-end clips sample for sample
    b = {"bframes": "3", "g": "30", "threads": "1"}
    return {
        "h264_end": F.encode(d / "h264_end.mp4", frames=60, options=b),
        "h264_faststart": F.encode(d / "h264_faststart.mp4", frames=60, options=b, faststart=True),
        "hevc": F.encode(d / "hevc.mp4", codec="libx265", frames=60, options={"g": "30"}),
        "av1": F.encode(d / "av1.mp4", codec="libsvtav1", frames=30),
        "audio": F.encode(d / "audio.mp4", frames=30, audio=True),
        "two_video": F.encode(d / "two_video.mp4", frames=30, second_video="libx265"),
    }


def _edit(src: Path, fn) -> bytes:
    return F.edit_moov(src.read_bytes(), fn)


def _first_not_sync(m):
    F.set_stss(F.stbl_of(m), [5, 31])


def _three_video(m):
    import copy
    t0 = next(c for c in m.children if c.type == b"trak")
    m.children.remove(t0)
    for tid in (1, 5, 3):
        t = copy.deepcopy(t0)
        tkhd = t.find("tkhd")
        tkhd.payload = tkhd.payload[:12] + struct.pack(">I", tid) + tkhd.payload[16:]
        m.children.append(t)


def _stco_extra(m):
    box = F.stbl_of(m).find("stco")
    F.write_chunk_offsets(box, F.read_chunk_offsets(box) + [1 << 20])


def _stsc_split_with_gaps(m):
    stbl = F.stbl_of(m)
    stbl.find("stsc").payload = F.full(0) + struct.pack(">IIII", 1, 1, 20, 1)
    n = struct.unpack_from(">I", stbl.find("stsz").payload, 8)[0]
    sizes = struct.unpack_from(">%dI" % n, stbl.find("stsz").payload, 12)
    o = F.read_chunk_offsets(stbl.find("stco"))[0]
    F.write_chunk_offsets(stbl.find("stco"), [o, o + sum(sizes[:20]) + 4, o + sum(sizes[:40]) + 8])


def _duplicate_track_id(m):
    t = [c for c in m.children if c.type == b"trak"][1]
    tkhd = t.find("tkhd")
    tkhd.payload = tkhd.payload[:12] + struct.pack(">I", 1) + tkhd.payload[16:]


def _hdlr_soun(m):
    h = F.video_traks(m)[0].find("mdia/hdlr")
    h.payload = h.payload[:8] + b"soun" + h.payload[12:]


def _mdhd_big_lang0(m):
    md = F.video_traks(m)[0].find("mdia/mdhd")
    md.payload = md.payload[:16] + struct.pack(">IH", 40000, 0) + md.payload[22:]


#: name -> (base clip, edit or None, declared codec). Every case is compared with the reference.
GENERATED = {
    "hevc": ("hevc", None, "hevc"),
    "av1": ("av1", None, "av1"),
    "h264_moov_at_end": ("h264_end", None, "h264"),
    "h264_faststart": ("h264_faststart", None, "h264"),
    "h264_declared_av1": ("h264_end", None, "av1"),
    "constant_stsz": ("h264_end", lambda m: F.set_constant_stsz(F.stbl_of(m), 100), "h264"),
    "constant_stsz_faststart": ("h264_faststart", lambda m: F.set_constant_stsz(F.stbl_of(m), 100), "h264"),
    "edit_list_media_time_2048": ("h264_end", lambda m: F.set_elst(F.video_traks(m)[0], [(2000, 2048, 65536)]),
                                  "h264"),
    "edit_list_v1_two_entries": ("h264_end", lambda m: F.set_elst(
        F.video_traks(m)[0], [(500, -1, 65536), (2000, 1024, 163840 + 0x8000)], version=1), "h264"),
    "audio_beside_video": ("audio", None, "h264"),
    "co64_and_64bit_boxes": ("h264_faststart", F.to_co64_and_large, "h264"),
    "co64_moov_at_end": ("h264_end", F.to_co64_and_large, "h264"),
    "sample0_not_sync": ("h264_end", _first_not_sync, "h264"),
    "two_video_tracks": ("two_video", None, "h264"),
    "three_video_tracks": ("h264_end", _three_video, "h264"),
    "stco_extra_chunk": ("h264_end", _stco_extra, "h264"),
    "stsc_three_chunks_with_gaps": ("h264_end", _stsc_split_with_gaps, "h264"),
    "hdlr_not_vide": ("h264_end", _hdlr_soun, "h264"),
    "mdhd_duration_and_language_0": ("h264_end", _mdhd_big_lang0, "h264"),
    "stss_unsorted": ("h264_end", lambda m: F.set_stss(F.stbl_of(m), [31, 1, 31]), "h264"),
}


@pytest.fixture(scope="session")
def generated(encoded, tmp_path_factory) -> dict[str, tuple[Path, str]]:
    d = tmp_path_factory.mktemp("generated")
    out = {}
    for name, (base, fn, codec) in GENERATED.items():
        path = d / f"{name}.mp4"
        path.write_bytes(_edit(encoded[base], fn) if fn else encoded[base].read_bytes())
        out[name] = (path, codec)
    big = d / "large_top_level.mp4"
    big.write_bytes(F.large_top_level(encoded["h264_faststart"].read_bytes()))
    out["large_top_level_headers"] = (big, "h264")
    return out


@pytest.fixture(scope="session")
def generated_reference(generated, tmp_path_factory) -> dict[str, object]:
    if not F.spiral_available():
        pytest.skip("spiral-sdk (the reference) is not importable")
    work = tmp_path_factory.mktemp("generated_oracle")

    def run(item):
        name, (path, codec) = item
        try:
            return name, F.oracle_index(path, codec, work / name)
        except F.OracleError as ex:
            return name, ex
    return dict(_parallel(run, sorted(generated.items())))


@needs_oracle
@pytest.mark.parametrize("name", sorted(GENERATED) + ["large_top_level_headers"])
def test_generated_index_equals_reference(name, generated, generated_reference):
    want = generated_reference[name]
    assert not isinstance(want, Exception), f"the reference rejected {name}: {want}"
    assert_same_index(ours(generated[name][0]), want)


def test_generated_shapes(generated):
    """What each edit is for, checked without the reference."""
    idx = {name: ours(path) for name, (path, _) in generated.items()}
    assert idx["hevc"]["tracks"][0]["codec"] == "h265"
    assert idx["av1"]["tracks"][0]["codec"] == "av1" and idx["av1"]["tracks"][0]["ctts"] is None
    assert idx["h264_declared_av1"]["tracks"][0]["codec"] == "h264"
    assert set(idx["constant_stsz"]["tracks"][0]["sizes"]) == {100}
    assert idx["edit_list_v1_two_entries"]["tracks"][0]["edit_list"] == [
        {"duration": 500, "media_time": -1, "rate": 65536}, {"duration": 2000, "media_time": 1024, "rate": 196608}]
    # the edit list shifts nothing
    assert [g["pts_start"] for g in idx["edit_list_media_time_2048"]["tracks"][0]["gops"]] == \
           [g["pts_start"] for g in idx["h264_moov_at_end"]["tracks"][0]["gops"]]
    assert [t["track_id"] for t in idx["audio_beside_video"]["tracks"]] == [1]
    assert [(t["track_id"], t["codec"]) for t in idx["two_video_tracks"]["tracks"]] == [(2, "h265"), (1, "h264")]
    assert [t["track_id"] for t in idx["three_video_tracks"]["tracks"]] == [5, 1, 3]
    assert idx["three_video_tracks"]["primary_track_id"] == 5
    t = idx["sample0_not_sync"]["tracks"][0]
    assert len(t["sizes"]) == 56 and [g["decode_start"] for g in t["gops"]] == [4, 30]
    assert idx["co64_and_64bit_boxes"]["tracks"][0]["sizes"] == idx["h264_faststart"]["tracks"][0]["sizes"]
    assert len(idx["stsc_three_chunks_with_gaps"]["tracks"][0]["chunks"]) == 3
    lang0 = idx["mdhd_duration_and_language_0"]["tracks"][0]
    assert lang0["language"] == "```" and lang0["dts_runs"][-1] == {"count": 1, "delta": 40000 - 59 * 512}


def test_faststart_and_moov_at_end_give_the_same_tables(generated):
    a, b = ours(generated["h264_faststart"][0]), ours(generated["h264_moov_at_end"][0])
    ta, tb = a["tracks"][0], b["tracks"][0]
    for key in ("dts_runs", "sizes", "ctts", "flags", "edit_list", "sample_entry"):
        assert ta[key] == tb[key]
    shift = ta["chunks"][0]["offset"] - tb["chunks"][0]["offset"]
    assert [g["byte_offset"] - shift for g in ta["gops"]] == [g["byte_offset"] for g in tb["gops"]]


def test_stz2_parses_but_is_rejected_like_the_reference(encoded, monkeypatch):
    plain = ours(encoded["h264_end"])["tracks"][0]
    for bits in (16, 8, 4):
        data = _edit(encoded["h264_end"], lambda m: F.stsz_to_stz2(F.stbl_of(m), bits))
        moov = F.moov_bytes(data)
        with pytest.raises(LeRobotImportError, match="stsz") as ex:
            parse_media_index(moov, file="x.mp4")
        assert ex.value.rule == "mp4_structure"
        monkeypatch.setattr(tables, "ACCEPT_STZ2", True)
        sizes = parse_media_index(moov, file="x.mp4").tracks[0].sizes
        monkeypatch.setattr(tables, "ACCEPT_STZ2", False)
        mask = {16: 0xFFFF, 8: 0xFF, 4: 0xF}[bits]
        assert list(sizes) == [s & mask for s in plain["sizes"]]


# ------------------------------------------------------------------------------------------------
# 3. Per-sample values equal PyAV's packets
# ------------------------------------------------------------------------------------------------

def samples_from_index(track: dict) -> dict[str, np.ndarray]:
    """Per-sample (dts, pts, key, offset, size) in decode order, from the index tables alone."""
    sizes = np.array(track["sizes"], dtype=np.int64)
    durations = np.repeat([r["delta"] for r in track["dts_runs"]], [r["count"] for r in track["dts_runs"]])
    dts = np.concatenate(([0], np.cumsum(durations)[:-1])).astype(np.int64)
    pts = dts + (np.array(track["ctts"], dtype=np.int64) if track["ctts"] is not None else 0)
    offsets = np.empty(len(sizes), dtype=np.int64)
    firsts = [c["first_sample"] for c in track["chunks"]] + [len(sizes)]
    for c, end in zip(track["chunks"], firsts[1:]):
        run = sizes[c["first_sample"]:end]
        offsets[c["first_sample"]:end] = c["offset"] + np.concatenate(([0], np.cumsum(run)[:-1]))
    return {"dts": dts, "pts": pts, "key": np.array(track["flags"]) & 1, "offset": offsets, "size": sizes}


def samples_from_pyav(path: str, track_id: int) -> dict[str, np.ndarray]:
    import av
    with av.open(path) as c:
        stream = next(s for s in c.streams.video if s.id == track_id)
        rows = [(p.dts, p.pts, int(p.is_keyframe), p.pos, p.size) for p in c.demux(stream) if p.size]
    dts, pts, key, pos, size = (np.array(col, dtype=np.int64) for col in zip(*rows))
    return {"dts": dts, "pts": pts, "key": key, "offset": pos, "size": size}


@pytest.mark.parametrize("mp4", CORPUS_MP4S, ids=lambda p: "/".join(Path(p).parts[-5:]))
def test_corpus_samples_equal_pyav_packets(mp4):
    _compare_with_pyav(mp4)


@pytest.mark.parametrize("name", ["hevc", "av1", "h264_end", "h264_faststart", "audio", "two_video"])
def test_encoded_samples_equal_pyav_packets(name, encoded):
    _compare_with_pyav(str(encoded[name]))


def _compare_with_pyav(path: str) -> None:
    index = ours(path)
    for track in index["tracks"]:
        got = samples_from_index(track)
        want = samples_from_pyav(path, track["track_id"])
        assert len(got["size"]) == len(want["size"])
        # FFmpeg applies the edit list (pts = dts + ctts - media_time, dts shifted the same way and by
        # its dts_shift for negative offsets); the index does not, and its ctts are shifted up by
        # max(0, -min offset). Both clocks are therefore the same up to one constant per track:
        # normalise every timeline so that its earliest presentation time (pts) and its first decode
        # time (dts) are 0, then compare tick for tick.
        for key, ref in (("pts", "pts"), ("dts", "dts")):
            g = got[key] - (got[key].min() if key == "pts" else got[key][0])
            w = want[ref] - (want[ref].min() if key == "pts" else want[ref][0])
            np.testing.assert_array_equal(g, w, err_msg=f"{key} of track {track['track_id']} in {path}")
        for key in ("key", "offset", "size"):
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} of track {track['track_id']}")
        # The index's own normalised pts is what gops use: the first GOP starts at 0.
        assert track["gops"][0]["pts_start"] == 0


# ------------------------------------------------------------------------------------------------
# 4. Errors
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def h264_bytes(encoded) -> bytes:
    return encoded["h264_end"].read_bytes()


def _read_bytes(data: bytes, name: str = "mem.mp4"):
    return read_media_index_from(BytesRangeReader(data, name), uri=name)


def _raises(data: bytes, rule: str, match: str) -> LeRobotImportError:
    with pytest.raises(LeRobotImportError) as ex:
        _read_bytes(data)
    assert ex.value.rule == rule, str(ex.value)
    assert ex.value.file == "mem.mp4"
    assert match in ex.value.message, ex.value.message
    return ex.value


def _without(data: bytes, type_: bytes) -> bytes:
    return F.serialize_file([b for b in F.parse_file(data) if b.type != type_])


def _set_table_count(data: bytes, box: str, count: int) -> bytes:
    def fn(m):
        b = F.stbl_of(m).find(box)
        at = 8 if box == "stsz" else 4
        b.payload = b.payload[:at] + struct.pack(">I", count) + b.payload[at + 4:]
    return F.edit_moov(data, fn, fix_offsets=False)


def test_error_no_ftyp(h264_bytes):
    _raises(_without(h264_bytes, b"ftyp"), "mp4_structure", "does not contain an ftyp box")


def test_error_no_moov(h264_bytes):
    _raises(_without(h264_bytes, b"moov"), "mp4_structure", "does not contain a moov box")


def test_error_truncated_inside_moov(h264_bytes):
    ex = _raises(h264_bytes[:-100], "mp4_structure", "invalid MP4 top-level box size")
    assert "`moov`" in ex.message


def test_error_truncated_mdat_of_faststart_file(encoded):
    _raises(encoded["h264_faststart"].read_bytes()[:-100], "mp4_structure", "box `mdat` would end")


def test_error_trailing_partial_header(h264_bytes):
    _raises(h264_bytes + b"\0\0\0\1", "mp4_structure", "truncated MP4 top-level box header")


def test_error_box_claiming_2_62_bytes(h264_bytes):
    boxes = F.parse_file(h264_bytes)
    data = b"".join(b.serialize() for b in boxes if b.type != b"mdat")
    at = len(boxes[0].serialize()) + len(boxes[1].serialize())
    huge = data[:at] + struct.pack(">I4sQ", 1, b"mdat", 1 << 62) + data[at:]
    src = BytesRangeReader(huge, "mem.mp4")
    with pytest.raises(LeRobotImportError) as ex:
        read_media_index_from(src, uri="mem.mp4")
    assert ex.value.rule == "mp4_structure" and str(1 << 62) in ex.value.message
    assert src.stats.requests == 1


def test_error_box_larger_than_parent(h264_bytes):
    def fn(m):
        stbl = F.stbl_of(m)
        stbl.children.append(F.Box(b"junk", b""))
    data = F.edit_moov(h264_bytes, fn)
    moov = bytearray(F.moov_bytes(data))
    at = moov.rindex(b"junk") - 4
    moov[at:at + 4] = struct.pack(">I", 1000)
    with pytest.raises(LeRobotImportError) as ex:
        parse_media_index(bytes(moov), file="m.mp4")
    assert ex.value.rule == "mp4_structure" and "past the end of its parent" in ex.value.message


@pytest.mark.parametrize("box,count", [("stsz", 1_000_000), ("stco", 1_000_000), ("stts", 2 ** 31),
                                       ("stss", 10 ** 9), ("ctts", 70_000), ("stsc", 4096)])
def test_error_table_count_larger_than_box(h264_bytes, box, count):
    moov = F.moov_bytes(_set_table_count(h264_bytes, box, count))
    with pytest.raises(LeRobotImportError) as ex:
        parse_media_index(moov, file="m.mp4")
    assert ex.value.rule == "mp4_structure"
    assert f"declares {count:,}" in ex.value.message and "holds only" in ex.value.message


def test_error_constant_stsz_with_absurd_count(h264_bytes):
    def fn(m):
        stsz = F.stbl_of(m).find("stsz")
        stsz.payload = F.full(0) + struct.pack(">II", 100, 0xFFFFFFFF)
    with pytest.raises(LeRobotImportError, match="declare 4,294,967,295 samples") as ex:
        parse_media_index(F.moov_bytes(F.edit_moov(h264_bytes, fn)), file="m.mp4")
    assert ex.value.rule == "mp4_limits" and "more than one file may hold" in ex.value.message


@pytest.mark.parametrize("fourcc", [b"mp4v", b"avc3"])
def test_error_unsupported_codec(h264_bytes, fourcc):
    def fn(m):
        sd = F.stbl_of(m).find("stsd")
        sd.payload = sd.payload.replace(b"avc1", fourcc, 1)
    ex = _raises(F.edit_moov(h264_bytes, fn), "mp4_track", NO_TRACK_MESSAGE)
    assert ex.message.startswith(f"{NO_TRACK_MESSAGE}: found {fourcc.decode()} (")


def test_error_zero_sample_track(h264_bytes):
    def fn(m):
        for c in F.stbl_of(m).children:
            if c.type in (b"stts", b"ctts", b"stss", b"stsc", b"stco"):
                c.payload = F.full(0) + struct.pack(">I", 0)
            if c.type == b"stsz":
                c.payload = F.full(0) + struct.pack(">II", 0, 0)
    _raises(F.edit_moov(h264_bytes, fn), "mp4_structure", "video track 1 contains no samples")


def test_error_duplicate_track_id(encoded):
    # Deliberately stricter than the reference, which mixes the two traks' tables.
    _raises(_edit(encoded["two_video"], _duplicate_track_id), "mp4_structure", "same track_ID 1")


def test_error_no_sync_sample(h264_bytes):
    _raises(F.edit_moov(h264_bytes, lambda m: F.set_stss(F.stbl_of(m), [])), "mp4_structure",
            "contains no sync samples")


def test_error_stts_too_short(h264_bytes):
    def fn(m):
        F.stbl_of(m).find("stts").payload = F.full(0) + struct.pack(">III", 1, 58, 512)
    _raises(F.edit_moov(h264_bytes, fn), "mp4_structure", "`stts` covers 58 samples but the track has 60")


def test_error_fragmented(tmp_path):
    path = F.encode(tmp_path / "frag.mp4", frames=10)
    import av
    out = tmp_path / "fragmented.mp4"
    with av.open(str(path)) as src, av.open(str(out), "w", format="mp4",
                                            options={"movflags": "frag_keyframe+empty_moov"}) as dst:
        s = dst.add_stream_from_template(src.streams.video[0])
        for p in src.demux(src.streams.video[0]):
            if p.size:
                p.stream = s
                dst.mux(p)
    _raises(out.read_bytes(), "mp4_structure", "fragmented MP4 is not supported")


def test_error_random_garbage():
    rng = random.Random(7)
    for n in (0, 3, 8, 100, 5000):
        with pytest.raises(LeRobotImportError) as ex:
            _read_bytes(bytes(rng.randrange(256) for _ in range(n)))
        assert ex.value.rule == "mp4_structure"


def test_error_file_missing(tmp_path):
    with pytest.raises(LeRobotImportError) as ex:
        read_media_index(LOCAL, str(tmp_path / "nope.mp4"), uri="file:///nope.mp4")
    assert ex.value.rule == "file_missing" and ex.value.file == "file:///nope.mp4"


def test_error_io():
    class Broken:
        def size(self, path):
            return 1000

        def cat_file(self, path, start=None, end=None):
            raise OSError("connection reset")
    with pytest.raises(LeRobotImportError) as ex:
        read_media_index(Broken(), "bucket/x.mp4", uri="gs://bucket/x.mp4")
    assert ex.value.rule == "io" and "connection reset" in ex.value.message


def test_parse_rejects_non_moov():
    with pytest.raises(LeRobotImportError) as ex:
        parse_media_index(b"\0\0\0\x08free", file="m.mp4")
    assert ex.value.rule == "mp4_structure"


# Property: whatever is done to a real moov or file, only LeRobotImportError comes out, and never
# through the safety net (every case is caught by an explicit check).

def _check_only_import_errors(fn) -> None:
    try:
        result = fn()
    except LeRobotImportError as ex:
        assert ex.rule in ("mp4_structure", "mp4_track", "mp4_limits", "lfs_pointer"), ex
        assert "internal:" not in ex.message, ex.message
        return
    if isinstance(result, MediaIndex):
        media_index_array(result).validate(full=True)


_MOOVS: list[bytes] = []


def _sample_moovs() -> list[bytes]:
    if not _MOOVS:
        paths = [p for p in CORPUS_MP4S if "h264" in p][:2] + [p for p in CORPUS_MP4S if "so101" in p][:1]
        _MOOVS.extend(F.moov_bytes(Path(p).read_bytes()) for p in paths)
    return _MOOVS


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 2), edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255),
                                                         st.sampled_from(["set", "insert", "delete", "u32"])),
                                               min_size=1, max_size=6),
       cut=st.one_of(st.none(), st.floats(0, 1)))
def test_mutated_moov_only_raises_import_errors(which, edits, cut):
    moov = bytearray(_sample_moovs()[which])
    for where, value, kind in edits:
        i = int(where * len(moov))
        if kind == "set" and moov:
            moov[i] = value
        elif kind == "insert":
            moov[i:i] = bytes([value])
        elif kind == "delete" and moov:
            del moov[i]
        elif kind == "u32":  # a count or size field blown up
            moov[i:i + 4] = struct.pack(">I", (value << 24) | 0xFFFFFF if value % 2 else value)
    if cut is not None:
        moov = moov[:int(cut * len(moov))]
    _check_only_import_errors(lambda: parse_media_index(bytes(moov), file="fuzz.mp4"))


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=64), at=st.floats(0, 1, exclude_max=True), truncate=st.booleans())
def test_mutated_file_only_raises_import_errors(data, at, truncate):
    raw = bytearray(Path(CORPUS_MP4S[-1]).read_bytes())
    i = int(at * len(raw))
    raw[i:i + len(data)] = data
    if truncate:
        raw = raw[:i]
    _check_only_import_errors(lambda: parse_media_index(read_moov(BytesRangeReader(bytes(raw)), file="f").data,
                                                        file="f"))


# ------------------------------------------------------------------------------------------------
# 5. Read cost
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def large_files(tmp_path_factory) -> dict[str, Path]:
    """~800 KB of mdat (noise), moov at the end and at the start."""
    d = tmp_path_factory.mktemp("large")
    return {"end": F.encode(d / "end.mp4", frames=40, width=160, height=120, noise=True, options={"crf": "5"}),
            "start": F.encode(d / "start.mp4", frames=40, width=160, height=120, noise=True, options={"crf": "5"},
                              faststart=True)}


@pytest.mark.parametrize("layout", ["end", "start"])
def test_read_cost(large_files, layout):
    path = large_files[layout]
    assert path.stat().st_size > 4 * HEAD_SIZE
    r = read_media_index(LOCAL, str(path))
    # moov (under 1 KB) at the end comes whole with the 4 KiB read at its header: head + 1 request.
    assert r.stats.requests == (2 if layout == "end" else 1)
    assert r.stats.bytes_read <= r.moov_size + HEAD_SIZE
    assert r.size == path.stat().st_size


@pytest.mark.parametrize("layout", ["end", "start"])
def test_read_cost_moov_larger_than_head(large_files, layout):
    data = large_files[layout].read_bytes()
    src = BytesRangeReader(data)
    moov = read_moov(src, file="x", head_size=512)
    assert moov.size > 512
    assert src.stats.requests <= (3 if layout == "end" else 2)
    assert src.stats.bytes_read <= moov.size + 512 + 32
    assert moov.data == F.moov_bytes(data)


def test_read_cost_corpus_and_memory_filesystem():
    mem = fsspec.filesystem("memory")
    for p in CORPUS_MP4S:
        data = Path(p).read_bytes()
        mem.pipe_file("/corpus/x.mp4", data)
        r = read_media_index(mem, "/corpus/x.mp4", uri="memory://corpus/x.mp4")
        assert r.stats.requests <= 2 and r.stats.bytes_read <= r.moov_size + HEAD_SIZE
        assert r.index.storage.to_pylist() == read_media_index(LOCAL, p).index.storage.to_pylist()


def test_read_never_scans_for_the_string_moov(h264_bytes):
    """A `moov` fourcc inside another box is never taken for the box."""
    fake = F.Box(b"free", b"\0\0\0\x10moov" + b"\0" * 8).serialize()
    assert _read_bytes(h264_bytes + fake).index.storage.to_pylist() == \
        _read_bytes(h264_bytes).index.storage.to_pylist()
    moovless = _without(h264_bytes, b"moov") + fake
    _raises(moovless, "mp4_structure", "does not contain a moov box")


# ---- media_index/ shards: one per MP4 folder, updated in place -------------------------------------------

def test_shard_path_is_the_mp4_folder():
    from transforms.output.paths import media_index_shard_path
    assert media_index_shard_path("videos/observation.images.top/chunk-003/file-012.mp4") == \
        "media_index/videos/observation.images.top/chunk-003.parquet"
    assert media_index_shard_path("cam.mp4") == "media_index/_root.parquet"
    assert media_index_shard_path("videos/.hidden/file-000.mp4") == "media_index/videos/_.hidden.parquet"


def _index_rows(n: int, version: str = "v1"):
    from transforms.output.index_shards import MediaIndexRow
    folder = Path(__file__).parent / "data/lerobot/h264_multi_file/videos/observation.images.top"
    mp4s = sorted(folder.glob("*/*.mp4"))[:n]
    files = [f"videos/cam/chunk-000/{i}-{p.parent.name}-{p.name}" for i, p in enumerate(mp4s)]
    return [MediaIndexRow.of("file:///ds", file, f"file:///ds/{file}", p.stat().st_size, version,
                             read_media_index(LOCAL, str(p)).index) for file, p in zip(files, mp4s)]


def test_shard_row_groups_hold_consecutive_rows_within_the_byte_budget(monkeypatch):
    import io

    import pyarrow.parquet as pq

    from transforms.reader.seek import TrackTables
    mit = _table_module()
    assert mit.row_group_bounds(np.array([10, 10, 10]), budget=25) == [(0, 2), (2, 3)]
    assert mit.row_group_bounds(np.array([30, 5, 5, 40]), budget=25) == [(0, 1), (1, 3), (3, 4)]
    assert mit.row_group_bounds(np.array([], np.int64)) == []
    rows = _index_rows(3)
    table = mit.media_index_table(rows)
    samples = [len(TrackTables.from_media_index(r.index).size) for r in rows]
    assert mit._row_bytes(table).tolist() == [n * mit._SAMPLE_BYTES + mit._INDEX_BYTES for n in samples]
    assert pq.ParquetFile(io.BytesIO(mit.shard_bytes(table))).metadata.num_row_groups == 1
    monkeypatch.setattr(mit, "ROW_GROUP_BYTES", mit._INDEX_BYTES + min(samples) * mit._SAMPLE_BYTES)
    md = pq.ParquetFile(io.BytesIO(mit.shard_bytes(table))).metadata
    assert [md.row_group(g).num_rows for g in range(md.num_row_groups)] == [1, 1, 1]


def test_update_shard_carries_kept_rows_replaces_read_ones_and_drops_the_rest(tmp_path):
    import pyarrow.parquet as pq
    mit = _table_module()
    out, shard = f"file://{tmp_path}", "media_index/videos/cam/chunk-000.parquet"
    a, b, c = _index_rows(3)
    first = mit.update_media_index_shard(out, shard, [c, a, b], keep=frozenset())
    path = tmp_path / shard
    assert (first.action, first.record.rows, first.record.bytes) == ("written", 3, path.stat().st_size)
    assert pq.read_table(path).column("uri").to_pylist() == [a.uri, b.uri, c.uri]  # sorted
    assert pq.ParquetFile(path).metadata.num_row_groups == 1  # small indexes share a row group
    mtime = path.stat().st_mtime_ns
    same = mit.update_media_index_shard(out, shard, [], keep=frozenset({a.uri, b.uri, c.uri}))
    assert (same.action, same.record) == ("unchanged", first.record) and path.stat().st_mtime_ns == mtime
    newer = dataclasses_replace(b, size=b.size + 16, version="v2")
    changed = mit.update_media_index_shard(out, shard, [newer], keep=frozenset({a.uri}))  # c is gone
    table = pq.read_table(path)
    assert changed.action == "written" and changed.record.rows == 2
    assert list(zip(*(table.column(k).to_pylist() for k in ("uri", "size", "version")))) == [
        (a.uri, a.size, "v1"), (b.uri, b.size + 16, "v2")]
    assert table.column("index").combine_chunks().storage.to_pylist() == \
        pa.concat_arrays([a.index, b.index]).storage.to_pylist()  # the carried row's index, unchanged
    assert mit.update_media_index_shard(out, shard, [], keep=frozenset()).action == "emptied"
    rows = mit.ShardRows(out)
    found = rows.get(a.dataset, a.file, a.uri)
    assert (found.size, found.version) == (a.size, "v1") and rows.get(c.dataset, c.file, c.uri) is None


def test_shard_rows_read_a_row_group_once_for_its_neighbours(tmp_path, monkeypatch):
    """Carrying the rows of neighbouring MP4s decodes their shared row group once, not once per row, and
    each row comes back as written."""
    import pyarrow.parquet as pq
    mit = _table_module()
    out, shard = str(tmp_path), "media_index/videos/cam/chunk-000.parquet"
    written = _index_rows(3)
    assert mit.update_media_index_shard(out, shard, written, keep=frozenset()).action == "written"
    assert pq.ParquetFile(tmp_path / shard).metadata.num_row_groups == 1
    reads = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, i, *a, **k: reads.append(i) or real(self, i, *a, **k))
    rows = mit.ShardRows(out)
    found = [rows.get(r.dataset, r.file, r.uri) for r in written]
    assert reads == [0]
    assert [(f.uri, f.size, f.version) for f in found] == [(r.uri, r.size, "v1") for r in written]
    assert [f.index.storage.to_pylist() for f in found] == [r.index.storage.to_pylist() for r in written]


def test_shard_keeps_uri_statistics_only_and_no_dictionary(tmp_path):
    """A shard's row groups carry `uri` statistics (a reader's lookup key) and nothing dictionary-encoded."""
    import pyarrow.parquet as pq
    mit = _table_module()
    rows = _index_rows(2)
    md = pq.ParquetFile(pa.BufferReader(mit.shard_bytes(mit.media_index_table(rows)))).metadata
    assert md.num_row_groups == 1  # two small indexes share a row group
    group = md.row_group(0)
    columns = [group.column(j) for j in range(group.num_columns)]
    assert [c.path_in_schema for c in columns if c.is_stats_set] == ["uri"]
    assert (columns[0].statistics.min, columns[0].statistics.max) == (rows[0].uri, rows[1].uri)
    assert not any("DICTIONARY" in e for c in columns for e in c.encodings)


def test_media_index_row_crosses_a_shuffle_as_ipc_bytes():
    """A MediaIndexRow pickles as its index's Arrow IPC bytes (no pyarrow object rebuilt child by child) and
    comes back equal, spql type and all."""
    import pickle
    from apache_beam.coders import PickleCoder
    from transforms.output.index_shards import MediaIndexRow
    (row,) = _index_rows(1)
    message = MediaIndexRow.of("file:///ds", "videos/cam/chunk-000/file-000.mp4", row.uri, row.size, "v1", row.index)
    coder = PickleCoder()
    back = coder.decode(coder.encode(message))
    assert (back.dataset, back.file, back.uri, back.size, back.version) == (
        message.dataset, message.file, message.uri, message.size, "v1")
    assert back.index.type == spql_types.media_index() and back.index.equals(row.index)
    pickled = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    assert b"pyarrow" not in pickled and spql_types.array_to_ipc(row.index) in pickled
    assert message.index.equals(row.index)  # decoded once asked, and still pickled as the bytes alone
    assert pickle.dumps(message, pickle.HIGHEST_PROTOCOL) == pickled


def dataclasses_replace(row, **changes):
    import dataclasses
    return dataclasses.replace(row, **changes)


def _table_module():
    """transforms.output.index_shards (the package exports a function of that name)."""
    import importlib
    return importlib.import_module("transforms.output.index_shards")


def test_plan_reads_only_new_or_changed_mp4s_and_touches_only_their_shards():
    mit = _table_module()
    old = {"videos/a/chunk-000/file-000.mp4": "1:m=1", "videos/a/chunk-000/file-001.mp4": "1:m=1",
           "videos/b/chunk-000/file-000.mp4": "1:m=1", "videos/b/chunk-001/file-000.mp4": "1:m=1"}
    now = {**old, "videos/a/chunk-000/file-001.mp4": "2:m=2", "videos/a/chunk-001/file-000.mp4": "1:m=3"}
    del now["videos/b/chunk-001/file-000.mp4"]  # no episodes file names it any more
    previous = mit.PreviousMediaIndex(old, (mit.ShardRecord("media_index/videos/b/chunk-000.parquet", 1, 1, "x"),))
    plan = mit.plan_media_index(now, ["videos/a/chunk-000/file-001.mp4", "videos/a/chunk-001/file-000.mp4",
                                      "videos/a/chunk-000/file-000.mp4"], now.__getitem__, previous,
                                dataset_file=lambda rel: "root/" + rel)
    assert plan.to_read == {"videos/a/chunk-000/file-001.mp4", "videos/a/chunk-001/file-000.mp4"}
    assert plan.carried == {"videos/a/chunk-000/file-000.mp4", "videos/b/chunk-000/file-000.mp4"}
    assert plan.touched == {"media_index/videos/a/chunk-000.parquet": {"root/videos/a/chunk-000/file-000.mp4"},
                            "media_index/videos/a/chunk-001.parquet": set(),
                            "media_index/videos/b/chunk-001.parquet": set()}
    assert plan.kept_shards == previous.shards
    forced = mit.plan_media_index(now, now, now.__getitem__, previous, dataset_file=str, force=True)
    assert forced.carried == set() and forced.to_read == set(now) and forced.kept_shards == ()
    inline = mit.plan_media_index(now, now, now.__getitem__, previous, dataset_file=str, inline_index=True)
    assert inline.to_read == set(now) and inline.touched == {}
