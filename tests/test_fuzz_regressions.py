"""Inputs the fuzzer (tests/fuzz/) found, replayed in the default run: each must fail cleanly, fast,
and without allocating more than a small multiple of its size."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from transforms.mp4 import media_index
from transforms.mp4 import boxes as mp4_boxes
from transforms.errors import LeRobotImportError

CRASHES = sorted((Path(__file__).parent / "fuzz" / "crashes").glob("*"))


@pytest.mark.parametrize("path", CRASHES, ids=[p.name for p in CRASHES])
def test_fuzz_finding_is_a_clean_error(path):
    data = path.read_bytes()
    mode, body = data[0], data[1:]
    tracemalloc.start()
    started = time.process_time()
    try:
        with pytest.raises(LeRobotImportError) as err:
            if mode % 2 == 0:
                media_index.parse_media_index(body, file="fuzz.mp4", file_size=len(body))
            else:
                media_index.read_media_index_from(mp4_boxes.BytesRangeSource(body[1:]), uri="fuzz.mp4")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.rule in ("mp4_structure", "mp4_track")
    assert peak <= 256 * len(data) + (4 << 20), peak
    assert time.process_time() - started < 1.0
