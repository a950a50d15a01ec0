"""Inputs the fuzzer (tests/fuzz/) found, and inputs crafted at the MP4 limits, replayed in the default run:
each must fail cleanly, fast, and without allocating more than a small multiple of its size."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from tests.fuzz import moov_target
from transforms.base.errors import LeRobotImportError

CRASHES = sorted((Path(__file__).parent / "fuzz" / "crashes").glob("*"))
#: The rule and words each reproducer must fail with (the fuzzer's own findings: any clean rule).
EXPECTED = {
    "crafted-constant-stsz-16M-samples": ("mp4_limits", "16,777,216 samples"),
    "crafted-three-tracks-of-2^24-constant-size-samples": ("mp4_limits", "50,331,648 samples"),
    "crafted-moov-with-4096-children": ("mp4_limits", "more than 1,024 child boxes"),
    "crafted-stbl-with-2048-children": ("mp4_limits", "`stbl` box"),
    "crafted-2000-top-level-boxes": ("mp4_limits", "more than 1,024 top-level boxes"),
}


def test_every_crafted_input_is_there():
    assert set(EXPECTED) <= {p.name for p in CRASHES}


@pytest.mark.parametrize("path", CRASHES, ids=[p.name for p in CRASHES])
def test_fuzz_finding_is_a_clean_error(path):
    data = path.read_bytes()
    tracemalloc.start()
    started = time.process_time()
    try:
        with pytest.raises(LeRobotImportError) as err:
            moov_target.run(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rule, words = EXPECTED.get(path.name, (None, ""))
    assert err.value.rule in ((rule,) if rule else ("mp4_structure", "mp4_track", "mp4_limits")), str(err.value)
    assert words in err.value.message
    assert peak <= 256 * len(data) + (4 << 20), peak
    assert time.process_time() - started < 1.0
