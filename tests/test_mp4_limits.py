"""Hostile MP4s: every bound of `mp4.limits.Limits`, timescale 0, git-LFS pointers, unsupported codecs.

Each file is built from the project's own data (tests/data/so101_av1's AV1 MP4, tests/mp4_factory
encodes) and must fail fast, with a bounded memory peak, naming the limit or the real cause. The time
and peak of each case, before and after the limits, are printed by tests/bench/bench_media_hostile.py.
"""

from __future__ import annotations

import copy
import struct
import time
import tracemalloc
from pathlib import Path

import fsspec
import pytest

import mp4_factory as F
from tests.helpers import SAMPLE
from transforms.base.errors import LeRobotImportError
from transforms.mp4.limits import DEFAULT_LIMITS, Limits
from transforms.mp4.media_index import NO_TRACK_MESSAGE, read_media_index, read_media_index_from
from transforms.mp4.ranges import BytesRangeReader

LOCAL = fsspec.filesystem("file")
FRONT = SAMPLE / "videos/observation.images.front/chunk-000/file-000.mp4"


@pytest.fixture(scope="module")
def base() -> bytes:
    return FRONT.read_bytes()


def _read(path: Path, **kw):
    return read_media_index(LOCAL, str(path), **kw)


def _fails(fn, rule: str, *words: str, peak_mb: float = 64, seconds: float = 6.0) -> LeRobotImportError:
    """`fn()` raises `rule` with `words` in its message, within `seconds` of CPU time (the process's, not the
    wall clock's: a busy machine must not fail the guard, a refusal that works its way through a hostile
    table does) and `peak_mb` of allocations."""
    tracemalloc.start()
    started = time.process_time()
    try:
        with pytest.raises(LeRobotImportError) as ex:
            fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.process_time() - started
    assert ex.value.rule == rule, str(ex.value)
    for w in words:
        assert w in ex.value.message, ex.value.message
    assert peak < peak_mb * 2 ** 20, f"peak {peak / 2 ** 20:.0f} MB"
    assert elapsed < seconds, f"{elapsed:.2f} s of CPU"
    return ex.value


# ------------------------------------------------------------------------------------------------
# Samples: all indexed tracks together
# ------------------------------------------------------------------------------------------------

def test_constant_stsz_of_2_24_samples_in_a_sparse_16_mib_file(base, tmp_path):
    path = F.constant_stsz_file(tmp_path / "x.mp4", base, 1 << 24)
    assert path.stat().st_size > 1 << 24  # the samples fit the file: only the sample limit stops them
    _fails(lambda: _read(path), "mp4_limits", "16,777,216 samples", "`max_samples` = 2,097,152")


def test_three_tracks_of_2_24_samples(base, tmp_path):
    path = F.constant_stsz_file(tmp_path / "x.mp4", base, 1 << 24, tracks=3)
    _fails(lambda: _read(path), "mp4_limits", "declare 50,331,648 samples",
           "track 1: 16,777,216, track 2: 16,777,216, track 3: 16,777,216")


def test_tracks_under_the_limit_each_but_over_it_together(base, tmp_path):
    path = F.constant_stsz_file(tmp_path / "x.mp4", base, 1_000_000, tracks=3)
    _fails(lambda: _read(path), "mp4_limits", "declare 3,000,000 samples", "`max_samples`")


def test_sample_limit_is_inclusive(base, tmp_path):
    limits = Limits(max_samples=1000)
    ok = F.constant_stsz_file(tmp_path / "ok.mp4", base, 500, tracks=2)
    index = _read(ok, limits=limits).index.storage.to_pylist()[0]
    assert [len(t["sizes"]) for t in index["tracks"]] == [500, 500]
    over = F.constant_stsz_file(tmp_path / "over.mp4", base, 501, tracks=2)
    _fails(lambda: _read(over, limits=limits), "mp4_limits", "declare 1,002 samples", "`max_samples` = 1,000")


# ------------------------------------------------------------------------------------------------
# moov size, box counts, range requests
# ------------------------------------------------------------------------------------------------

def test_moov_of_1_gib_is_refused_before_it_is_read(base, tmp_path):
    path = F.huge_moov_file(tmp_path / "x.mp4", base, 1 << 30)
    assert path.stat().st_size > 1 << 30
    ex = _fails(lambda: _read(path), "mp4_limits", "declares 1,073,7", "`max_moov_bytes` = 67,108,864")
    assert "moov box at byte" in ex.message


def test_moov_with_2m_children(base):
    data = F.with_children(base, "", 2_000_000)
    _fails(lambda: read_media_index_from(BytesRangeReader(data, "x.mp4"), uri="x.mp4"), "mp4_limits",
           "the `moov` box at moov byte 0 has more than 1,024 child boxes", "`max_children`", peak_mb=100)


def test_stbl_with_1m_children(base):
    data = F.with_children(base, "trak/mdia/minf/stbl", 1_000_000)
    _fails(lambda: read_media_index_from(BytesRangeReader(data, "x.mp4"), uri="x.mp4"), "mp4_limits",
           "the `stbl` box", "more than 1,024 child boxes", peak_mb=100)


def test_boxes_in_moov_all_levels_together(base):
    """1,000 tracks: under 1,024 children per box, but about 25,000 boxes in moov."""
    def edit(moov):
        trak = F.video_traks(moov)[0]
        moov.children.remove(trak)
        for i in range(1000):
            t = copy.deepcopy(trak)
            F.set_track_id(t, i + 1)
            moov.children.append(t)
    data = F.edit_moov(base, edit)
    _fails(lambda: read_media_index_from(BytesRangeReader(data, "x.mp4"), uri="x.mp4"), "mp4_limits",
           "moov holds more than 16,384 boxes", "`max_boxes`")


def test_4m_top_level_boxes_cost_one_request(base):
    src = BytesRangeReader(F.with_children(base, None, 4_000_000), "x.mp4")
    _fails(lambda: read_media_index_from(src, uri="x.mp4"), "mp4_limits", "more than 1,024 top-level boxes",
           "`max_top_level_boxes`")
    assert src.stats.requests == 1 and src.stats.bytes_read == 64 * 1024


def test_range_requests_are_bounded(base):
    """100 `free` boxes of 8 KiB after the file: each header lies past the last read."""
    filler = F.RawBytes(b"free", struct.pack(">I4s", 8192, b"free") + bytes(8184))
    data = F.serialize_file(F.parse_file(base) + [copy.deepcopy(filler) for _ in range(100)])
    src = BytesRangeReader(data, "x.mp4")
    _fails(lambda: read_media_index_from(src, uri="x.mp4"), "mp4_limits", "more than 32 range requests",
           "`max_requests` = 32")
    assert src.stats.requests == DEFAULT_LIMITS.max_requests


def test_fragmented_file_stops_at_its_first_moof(base, tmp_path):
    boxes = F.parse_file(base) + [F.Box(b"moof", b"\0" * 8), F.Box(b"mdat", b"\0" * 8)]
    ex = _fails(lambda: read_media_index_from(BytesRangeReader(F.serialize_file(boxes), "x.mp4"), uri="x.mp4"),
                "mp4_structure", "fragmented MP4 is not supported", "top-level `moof` box")
    assert "movie fragments" in ex.message


# ------------------------------------------------------------------------------------------------
# Timescale 0
# ------------------------------------------------------------------------------------------------

def test_mdhd_timescale_0(base):
    data = F.edit_moov(base, lambda m: F.set_timescale(F.video_traks(m)[0].find("mdia/mdhd"), 0))
    _fails(lambda: read_media_index_from(BytesRangeReader(data, "x.mp4"), uri="x.mp4"), "mp4_structure",
           "`mdhd` box of track 1 has timescale 0")


def test_mvhd_timescale_0(base):
    data = F.edit_moov(base, lambda m: F.set_timescale(m.find("mvhd"), 0))
    _fails(lambda: read_media_index_from(BytesRangeReader(data, "x.mp4"), uri="x.mp4"), "mp4_structure",
           "`mvhd` box has timescale 0")


# ------------------------------------------------------------------------------------------------
# Real causes: git-LFS pointers and other codecs
# ------------------------------------------------------------------------------------------------

def test_git_lfs_pointer_instead_of_the_mp4(tmp_path):
    path = tmp_path / "file-000.mp4"
    path.write_bytes(F.lfs_pointer())
    ex = _fails(lambda: _read(path, uri="videos/cam/file-000.mp4"), "lfs_pointer",
                "video file videos/cam/file-000.mp4 is a git-LFS pointer, not the file", "git lfs pull")
    assert ex.file == "videos/cam/file-000.mp4"


def test_mpeg4_part2_track_names_what_it_found_and_what_was_declared(tmp_path):
    path = F.encode(tmp_path / "mp4v.mp4", codec="mpeg4", frames=10)
    ex = _fails(lambda: _read(path, declared="h264"), "mp4_track")
    assert ex.message.startswith(f"{NO_TRACK_MESSAGE}: found mp4v (MPEG-4 Part 2), where info.json declares h264")
    assert "Re-encode the video as H.264, H.265 or AV1" in ex.message


@pytest.mark.parametrize("fourcc,name", [(b"avc3", "avc3 (H.264 with in-band parameter sets)"), (b"vp09", "vp09 (VP9)"),
                                         (b"zzzz", "zzzz")])
def test_other_sample_entries_are_named(base, fourcc, name):
    data = F.set_sample_entry_type(base, fourcc)
    ex = _fails(lambda: read_media_index_from(BytesRangeReader(data, "x.mp4"), uri="x.mp4"), "mp4_track")
    assert ex.message.startswith(f"{NO_TRACK_MESSAGE}: found {name}.")


def test_audio_only_file_names_the_audio(tmp_path):
    path = F.encode(tmp_path / "a.mp4", frames=10, audio=True)
    data = F.serialize_file(F.parse_file(path.read_bytes()))

    def drop_video(moov):
        moov.children = [c for c in moov.children if c not in F.video_traks(moov)]
    ex = _fails(lambda: read_media_index_from(BytesRangeReader(F.edit_moov(data, drop_video), "a.mp4"), uri="a.mp4"),
                "mp4_track")
    assert "found mp4a (audio (AAC or MPEG audio))" in ex.message


@pytest.mark.parametrize("codec,entry", [("libx264", "avc1"), ("libx265", "hev1")])
def test_result_names_the_track_codec(tmp_path, codec, entry):
    path = F.encode(tmp_path / "x.mp4", codec=codec, frames=10)
    assert _read(path).codec == entry


def test_result_codec_of_the_sample_dataset():
    assert _read(FRONT).codec == "av01"
