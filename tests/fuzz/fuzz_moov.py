"""Fuzz the moov parser: `tables.parse_media_index` and `boxes.read_moov` (atheris / libFuzzer).

    python tests/fuzz/fuzz_moov.py -atheris_runs=100000        # a fixed number of inputs
    python tests/fuzz/fuzz_moov.py -max_total_time=300         # a time budget (seconds)
    python tests/fuzz/fuzz_moov.py tests/fuzz/crashes/crash-*  # replay saved inputs

The first byte of an input picks the target and the limits (`tests/fuzz/moov_target.py`): bit 0 clear
-> `parse_media_index(rest)` on a moov box; set -> `read_moov` on a whole file (the second byte picks a
small or the default head size, so the multi-read paths run too), then `parse_media_index`; bit 1 set
-> with `moov_target.SMALL_LIMITS`, so that small inputs cross every bound of `mp4.limits.Limits`
(samples of all tracks together, children per box, boxes in moov, top-level boxes, range requests,
moov size). Seeds: the moov boxes and whole files of the corpus MP4s and of a few tests/mp4_factory
encodes (H.264 with B-frames, faststart, AAC, two video tracks, HEVC, AV1, co64 + 64-bit headers,
stz2, edit lists), each also under the small limits, plus files built to sit at those limits (three
tracks of constant-size samples, crowded stbl and moov, many top-level boxes), written to a
temporary folder passed to libFuzzer as the seed corpus.

Per input, a finding (libFuzzer saves it under tests/fuzz/crashes/) is:
* any exception other than `LeRobotImportError`, or one whose message is the parser's
  "(internal: ...)" safety net (a check that should have caught the input did not);
* a successful parse whose result `media_index_array` cannot hold;
* a tracemalloc peak above MEMORY_FACTOR x input bytes + MEMORY_CONSTANT;
* more than SLOW_SECONDS of CPU time.
The figures libFuzzer prints (cov, ft, exec/s) are on stderr; a summary of our own counters
(inputs, accepted, rejected, max memory ratio, slowest input) is printed at exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import atheris

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

with atheris.instrument_imports(include=["transforms"]):
    from transforms.base.errors import LeRobotImportError
    from transforms.mp4.arrow import media_index_array
    from tests.fuzz import moov_target

#: Allowed tracemalloc peak per input: this many times the input's bytes, plus the constant.
#: (Environment overrides: FUZZ_MOOV_MEMORY_FACTOR, FUZZ_MOOV_MEMORY_CONSTANT, FUZZ_MOOV_SLOW_SECONDS, e.g. to
#: look past a known amplification for other findings.)
MEMORY_FACTOR = int(os.environ.get("FUZZ_MOOV_MEMORY_FACTOR", 256))
MEMORY_CONSTANT = int(os.environ.get("FUZZ_MOOV_MEMORY_CONSTANT", 4 << 20))
#: CPU seconds above which an input is a hang.
SLOW_SECONDS = float(os.environ.get("FUZZ_MOOV_SLOW_SECONDS", 1.0))
CRASH_DIR = REPO / "tests" / "fuzz" / "crashes"


class Finding(Exception):
    """An input broke a property (libFuzzer reports it as a crash and saves the input)."""


_STATS = {"inputs": 0, "ok": 0, "rejected": 0, "max_ratio": 0.0, "max_peak": 0, "slowest": 0.0}


def _target(data: bytes) -> None:
    index = moov_target.run(data)
    if index is None:
        return
    try:
        media_index_array(index)
    except Exception as ex:  # noqa: BLE001
        raise Finding(f"parse_media_index accepted the input but media_index_array failed: "
                      f"{type(ex).__name__}: {ex}") from ex


def TestOneInput(data: bytes) -> None:  # noqa: N802 - the name atheris expects
    _STATS["inputs"] += 1
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    started = time.process_time()
    try:
        _target(data)
        _STATS["ok"] += 1
    except LeRobotImportError as ex:
        _STATS["rejected"] += 1
        if "(internal:" in ex.message:
            raise Finding(f"the parser's safety net fired: {ex}") from ex
    finally:
        seconds = time.process_time() - started
        peak = tracemalloc.get_traced_memory()[1] - base
    ratio = peak / max(1, len(data))
    _STATS["max_ratio"] = max(_STATS["max_ratio"], ratio)
    _STATS["max_peak"] = max(_STATS["max_peak"], peak)
    _STATS["slowest"] = max(_STATS["slowest"], seconds)
    if peak > MEMORY_FACTOR * len(data) + MEMORY_CONSTANT:
        raise Finding(f"peak memory {peak} bytes for a {len(data)}-byte input (limit "
                      f"{MEMORY_FACTOR} x input + {MEMORY_CONSTANT})")
    if seconds > SLOW_SECONDS:
        raise Finding(f"input took {seconds:.2f} s of CPU (limit {SLOW_SECONDS} s)")


# ------------------------------------------------------------------------------------------------
# Seeds
# ------------------------------------------------------------------------------------------------

def _mp4_sources() -> list[Path]:
    shared = Path(os.environ.get("LEROBOT_SHARED", REPO.parent / "shared"))
    found = sorted((shared / "corpus" / "third_party").rglob("*.mp4"))  # optional: never part of the project
    found += sorted((REPO / "tests" / "data" / "lerobot").rglob("*.mp4"))
    return found


def _factory_files(workdir: Path) -> list[bytes]:
    """A few encodes and box rewrites from tests/mp4_factory (each skipped if its encoder is missing)."""
    from tests import mp4_factory as f
    out = []
    recipes = [
        ("h264_bframes", dict(codec="libx264", frames=24, options={"bf": "2", "g": "6"})),
        ("h264_faststart", dict(codec="libx264", frames=12, faststart=True)),
        ("h264_audio", dict(codec="libx264", frames=12, audio=True)),
        ("h264_two_video", dict(codec="libx264", frames=10, second_video="libx264")),
        ("hevc", dict(codec="libx265", frames=10)),
        ("av1", dict(codec="libsvtav1", frames=10)),
    ]
    for name, kwargs in recipes:
        try:
            out.append(f.encode(workdir / f"{name}.mp4", **kwargs).read_bytes())
        except Exception as ex:  # noqa: BLE001 - an encoder this PyAV build lacks
            print(f"seed {name} skipped: {type(ex).__name__}: {ex}", file=sys.stderr)
    if out:
        base = out[0]
        edits = [
            lambda m: f.to_co64_and_large(m),
            lambda m: f.stsz_to_stz2(f.stbl_of(m), 16),
            lambda m: f.set_elst(f.video_traks(m)[0], [(1000, 512, 1 << 16)]),
            lambda m: f.set_stss(f.stbl_of(m), [1, 7, 13]),
        ]
        for edit in edits:
            try:
                out.append(f.edit_moov(base, edit))
            except Exception as ex:  # noqa: BLE001
                print(f"seed edit skipped: {type(ex).__name__}: {ex}", file=sys.stderr)
        out.append(f.large_top_level(base))
        out += _limit_files(f, base, workdir)
    return out


def _limit_files(f, base: bytes, workdir: Path) -> list[bytes]:
    """Files at the small limits (`moov_target.SMALL_LIMITS`): three tracks of 200 constant-size samples
    (600 in all, over 512), an stbl and a moov of 30 extra children (over 24), eight tracks (about 130
    boxes, over 96), 20 extra top-level boxes (over 12), ten 8 KiB boxes after the file (past the head,
    a request each: over 3), a moov grown by 20 KB (over 16 KiB)."""
    import copy
    sparse = f.constant_stsz_file(workdir / "three_tracks.mp4", base, 200, tracks=3)

    def eight_tracks(moov) -> None:
        trak = f.video_traks(moov)[0]
        for i in range(7):
            t = copy.deepcopy(trak)
            f.set_track_id(t, 10 + i)
            moov.children.append(t)
    spaced = f.serialize_file(f.parse_file(base) + [f.Box(b"free", bytes(8184)) for _ in range(10)])
    big_moov = f.edit_moov(base, lambda m: m.children.append(f.Box(b"free", bytes(20_000))))
    return [sparse.read_bytes(), f.with_children(base, "trak/mdia/minf/stbl", 30), f.with_children(base, "", 30),
            f.edit_moov(base, eight_tracks), f.with_children(base, None, 20), spaced, big_moov]


def write_seeds(folder: Path) -> int:
    from tests import mp4_factory as f
    files = [p.read_bytes() for p in _mp4_sources()]
    with tempfile.TemporaryDirectory() as tmp:
        files += _factory_files(Path(tmp))
    n = 0
    for i, data in enumerate(files):
        try:
            moov = f.moov_bytes(data)
        except Exception:  # noqa: BLE001
            moov = None
        for limits in (0, 2):  # default limits, small limits
            if moov is not None:
                (folder / f"moov-{limits}-{i:03d}").write_bytes(bytes([limits]) + moov)
                n += 1
            if len(data) <= 256 * 1024:
                (folder / f"file-{limits}-{i:03d}").write_bytes(bytes([1 | limits, 0]) + data)
                (folder / f"file-small-head-{limits}-{i:03d}").write_bytes(bytes([1 | limits, 5]) + data)
                n += 2
    return n


def _summary() -> None:
    s = _STATS
    if s["inputs"]:
        print(f"\nfuzz_moov: {s['inputs']} inputs, {s['ok']} parsed, {s['rejected']} rejected with "
              f"LeRobotImportError; max tracemalloc peak {s['max_peak']} bytes, max peak/input "
              f"{s['max_ratio']:.1f}x; slowest input {s['slowest']:.3f} s CPU", file=sys.stderr)


def main() -> None:
    argv = list(sys.argv)
    replay = any(not a.startswith("-") and Path(a).is_file() for a in argv[1:])
    if not any(a.startswith("-artifact_prefix") for a in argv):
        CRASH_DIR.mkdir(parents=True, exist_ok=True)
        argv.append(f"-artifact_prefix={CRASH_DIR}/")
    if not replay and not any(not a.startswith("-") for a in argv[1:]):
        # No corpus folder given: a fresh one (libFuzzer adds what it finds), plus the seeds.
        work = Path(tempfile.mkdtemp(prefix="fuzz_moov_corpus_"))
        seeds = Path(tempfile.mkdtemp(prefix="fuzz_moov_seeds_"))
        print(f"fuzz_moov: {write_seeds(seeds)} seeds in {seeds}; corpus {work}", file=sys.stderr)
        argv += [str(work), str(seeds)]
    if not any(a.startswith("-rss_limit_mb") for a in argv):
        argv.append("-rss_limit_mb=4096")
    tracemalloc.start()
    atexit.register(_summary)
    atheris.Setup(argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
