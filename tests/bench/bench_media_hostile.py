"""Time and peak memory of hostile MP4s and tampered import outputs (a script, not a test).

    python tests/bench/bench_media_hostile.py                    # this checkout
    python tests/bench/bench_media_hostile.py --tree OTHER_TREE  # e.g. an older checkout, for "before"

Each case runs in a subprocess of its own (address space capped at --cap-gb, wall time at --timeout),
so a case that would allocate tens of GB fails there and not on the machine; the figures are the
subprocess's wall time and peak RSS (`os.wait4`). The inputs are built once from the project's data
(tests/data/so101_av1, tests/mp4_factory.py); the import output the reader cases tamper with is
written by the tree under test. Prints one row per case: what happened (the error's first words, or
what was returned), seconds, peak MB, and for MP4 reads the range requests issued.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.append(str(REPO))  # `tests.helpers`, for the test helpers the inputs are built with
SO101 = REPO / "tests" / "data" / "lerobot" / "so101_av1"
FRONT = "videos/observation.images.front/chunk-000/file-000.mp4"
CAM = "observation.images.front"

MP4_CASES = ["2^21_samples_at_the_limit", "stsz_2^24_samples_sparse_16MiB", "three_tracks_of_2^24_samples",
             "moov_of_1GiB", "moov_with_2M_children", "stbl_with_1M_children", "4M_top_level_boxes", "mdhd_timescale_0",
             "mvhd_timescale_0", "lfs_pointer_instead_of_mp4", "mp4v_track_(MPEG-4_Part_2)"]
READER_CASES = ["part_path_with_dotdot", "clip_uri_outside_roots", "dts_runs_count_2^32_x3",
                "media_index_timescale_0", "manifest_nested_100k", "last_frame_of_one_frame_short_clip",
                "episode_not_in_import", "camera_absent_skip_videos", "time_outside_clip_message"]


# ------------------------------------------------------------------------------------------------
# Inputs (built in the parent with the current tests/ helpers)
# ------------------------------------------------------------------------------------------------

def build_mp4s(work: Path) -> None:
    import mp4_factory as F
    base = (SO101 / FRONT).read_bytes()
    F.constant_stsz_file(work / "2^21_samples_at_the_limit.mp4", base, 1 << 21)
    F.constant_stsz_file(work / "stsz_2^24_samples_sparse_16MiB.mp4", base, 1 << 24)
    F.constant_stsz_file(work / "three_tracks_of_2^24_samples.mp4", base, 1 << 24, tracks=3)
    F.huge_moov_file(work / "moov_of_1GiB.mp4", base, 1 << 30)
    (work / "moov_with_2M_children.mp4").write_bytes(F.with_children(base, "", 2_000_000))
    (work / "stbl_with_1M_children.mp4").write_bytes(F.with_children(base, "trak/mdia/minf/stbl", 1_000_000))
    (work / "4M_top_level_boxes.mp4").write_bytes(F.with_children(base, None, 4_000_000))
    (work / "mdhd_timescale_0.mp4").write_bytes(F.edit_moov(base, lambda m: F.set_timescale(
        F.video_traks(m)[0].find("mdia/mdhd"), 0)))
    (work / "mvhd_timescale_0.mp4").write_bytes(F.edit_moov(base, lambda m: F.set_timescale(m.find("mvhd"), 0)))
    (work / "lfs_pointer_instead_of_mp4.mp4").write_bytes(F.lfs_pointer())
    F.encode(work / "mp4v_track_(MPEG-4_Part_2).mp4", codec="mpeg4", frames=10)


def build_dataset(work: Path) -> Path:
    """so101_av1 with episode 3's clips one frame short (`to_timestamp = from + (length - 1) / fps`)."""
    from test_reader_hostile import one_frame_short
    copied = shutil.copytree(SO101, work / "so101_short", ignore=shutil.ignore_patterns("expected*"))
    return one_frame_short(Path(copied))


# ------------------------------------------------------------------------------------------------
# Cases (run in the child, against the tree under test)
# ------------------------------------------------------------------------------------------------

class Counting:
    """Counts the range requests local fsspec reads make (cat_file, and each range of cat_ranges)."""

    requests = 0

    @classmethod
    def install(cls) -> None:
        import fsspec
        local = type(fsspec.filesystem("file"))
        cat_file, cat_ranges = local.cat_file, local.cat_ranges

        def counted_cat_file(self, *a, **k):
            cls.requests += 1
            return cat_file(self, *a, **k)

        def counted_cat_ranges(self, paths, *a, **k):
            cls.requests += len(paths)
            return cat_ranges(self, paths, *a, **k)
        local.cat_file, local.cat_ranges = counted_cat_file, counted_cat_ranges


def run_mp4(work: Path, case: str) -> str:
    import fsspec
    from transforms.mp4.media_index import read_media_index
    import pyarrow.compute as pc
    r = read_media_index(fsspec.filesystem("file"), str(work / f"{case}.mp4"))
    sizes = r.index.storage.field("tracks").values.field("sizes")
    return f"accepted: index of {pc.sum(pc.list_value_length(sizes)).as_py():,} samples"


def _tamper_output(out: Path, case: str, work: Path) -> None:
    """Edit the import output at `out` for one reader case (with tests/test_reader_hostile.py's helpers)."""
    from test_reader_hostile import edit_index, edit_manifest, replace_uris
    if case == "part_path_with_dotdot":
        outside = work / "outside"
        outside.mkdir(exist_ok=True)
        shutil.copyfile(out / "episodes/chunk-000/file-000.parquet", outside / "stolen.parquet")
        rel = os.path.relpath(outside / "stolen.parquet", out)
        edit_manifest(out, lambda doc: {**doc, "episodes_files": {
            k: {**v, "parts": [rel]} for k, v in doc["episodes_files"].items()}})
    elif case == "clip_uri_outside_roots":
        secret = work / "secret" / "secret.mp4"
        secret.parent.mkdir(exist_ok=True)
        shutil.copyfile(SO101 / FRONT, secret)
        replace_uris(out, lambda u: "file://" + str(secret) if u.endswith(FRONT) else u)
    elif case == "dts_runs_count_2^32_x3":
        edit_index(out, lambda t: t.update(dts_runs=[{"count": (1 << 32) - 1, "delta": 512}] * 3))
    elif case == "media_index_timescale_0":
        edit_index(out, lambda t: t.update(timescale=0))
    elif case == "manifest_nested_100k":
        (out / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)


def run_reader(work: Path, case: str) -> str:
    from transforms.reader.import_reader import ImportReader
    out = work / "outputs" / case
    if case == "episode_not_in_import":
        ImportReader(str(out)).episode(7)
        return "found"
    if case == "camera_absent_skip_videos":
        ImportReader(str(out)).episode(0).video(CAM)
        return "found"
    if case == "time_outside_clip_message":
        ImportReader(str(out)).episode(0).video(CAM).frame_at(13.1)
        return "found"
    if case == "last_frame_of_one_frame_short_clip":
        import av
        import numpy as np
        ep = ImportReader(str(out)).episode(3)
        video = ep.video(CAM)
        got = video.frame_at(float(ep["timestamp"][-1]))
        with av.open(str(work / "so101_short" / FRONT)) as c:
            frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        same = np.array_equal(got, frames[36 + 9])
        return f"returned the last frame ({'equal to' if same else 'DIFFERENT from'} a sequential decode)"
    reader = ImportReader(str(out))
    eps = list(reader)
    frame = eps[0].video(CAM).frame_at(0.0)
    return f"read {len(eps)} episodes and a {frame.shape} frame"


# ------------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------------

def child(args) -> None:
    sys.path.insert(0, args.tree)
    os.environ.setdefault("AV_LOG_LEVEL", "quiet")
    Counting.install()
    work = Path(args.work)
    try:
        outcome = run_mp4(work, args.run) if args.run in MP4_CASES else run_reader(work, args.run)
    except BaseException as ex:  # noqa: BLE001 - the outcome is what the row reports
        rule = getattr(ex, "rule", None)
        msg = str(ex).splitlines()[0] if str(ex) else ""
        outcome = f"{type(ex).__name__}{f' [{rule}]' if rule else ''}: {msg}"
    print(json.dumps({"outcome": outcome, "requests": Counting.requests}))


def run_case(args, case: str, work: Path) -> tuple[str, float, float, int]:
    cap = int(args.cap_gb * (1 << 30))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(HERE), "--run", case, "--tree", args.tree, "--work", str(work)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit)
    try:
        out, err = proc.communicate(timeout=args.timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    seconds = time.perf_counter() - started
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # max over children so far
    if timed_out:
        return f"still running after {args.timeout:.0f} s (killed)", seconds, rss_mb, -1
    lines = out.decode().strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = err.decode().strip().splitlines()[-1:] or [""]
        return f"crashed (exit {proc.returncode}): {tail[0][:150]}", seconds, rss_mb, -1
    doc = json.loads(lines[-1])
    return doc["outcome"], seconds, rss_mb, doc["requests"]


def import_outputs(args, work: Path) -> None:
    """One import of so101_av1 (one-frame-short episode 3) per reader case, then each tampered."""
    dataset = build_dataset(work)
    base = work / "outputs" / "_base"
    skip = work / "outputs" / "_skip"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from pipelines.import_lerobot import run; "
            "sys.exit(run(['--dataset', sys.argv[2], '--output', sys.argv[3], '--runner', 'FnApiRunner'] "
            "+ sys.argv[4:]))")
    for out, extra in ((base, []), (skip, ["--skip-videos"])):
        subprocess.run([sys.executable, "-c", code, args.tree, str(dataset), str(out), *extra], check=True,
                       capture_output=True)
    for case in READER_CASES:
        out = work / "outputs" / case
        shutil.copytree(skip if case == "camera_absent_skip_videos" else base, out)
        _tamper_output(out, case, work)


def measure_one(args, case: str, work: Path) -> tuple[str, float, float, int]:
    """Peak RSS of one child alone: RUSAGE_CHILDREN keeps the maximum over all children, so each case
    runs from a fresh parent process."""
    cmd = [sys.executable, str(HERE), "--one", case, "--tree", args.tree, "--work", str(work),
           "--cap-gb", str(args.cap_gb), "--timeout", str(args.timeout)]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()
    return tuple(json.loads(out[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", default=str(REPO), help="the checkout whose transforms/ is measured")
    ap.add_argument("--cap-gb", type=float, default=6.0, help="address-space cap of each case")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--cases", nargs="*", help="only these cases")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        return child(args)
    if args.one:
        print(json.dumps(run_case(args, args.one, Path(args.work))))
        return
    cases = args.cases or MP4_CASES + READER_CASES
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build_mp4s(work)
        if any(c in READER_CASES for c in cases):
            import_outputs(args, work)
        print(f"tree: {args.tree}; each case capped at {args.cap_gb:g} GB of address space, {args.timeout:g} s")
        print(f"{'case':<38} {'seconds':>8} {'peak MB':>8} {'requests':>9}  outcome")
        for case in cases:
            outcome, seconds, rss, requests = measure_one(args, case, work)
            req = "" if requests < 0 else str(requests)
            print(f"{case:<38} {seconds:>8.2f} {rss:>8.0f} {req:>9}  {outcome[:230]}", flush=True)


if __name__ == "__main__":
    main()
