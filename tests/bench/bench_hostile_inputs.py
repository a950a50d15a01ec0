"""Benchmark: what each hostile input costs an import (time, peak memory), and what it reports.

    python tests/bench/bench_hostile_inputs.py                       # the input-side cases, this checkout
    python tests/bench/bench_hostile_inputs.py --code /tmp/before    # the same cases on another checkout
    python tests/bench/bench_hostile_inputs.py --cases lfs_pointer_data,v21_layout --timeout 60
    python tests/bench/bench_hostile_inputs.py --cases v2                # the v2.x metadata and tasks cases

Each case's dataset is built by this checkout's tests (tests/hostile_datasets.py and the layouts of
tests/test_input_checks.py) in a subprocess of its own, then imported by `python -m
pipelines.import_lerobot ... --runner FnApiRunner` run from `--code` in a fresh subprocess (that
process is the worker). Its peak memory is `ru_maxrss` from os.wait4 (Linux counts the forking
parent's size in a child's peak, so this script keeps itself small and builds nothing in-process); a
run over --timeout seconds (a hang) or over --max-rss-mb (runaway memory) is killed and reported.
Prints one row per case: exit status, seconds, peak MB, the rules in errors.jsonl and the start of
the first message. Targets: non-zero exit with a named rule (or a clean
import where the case is valid) within 5 s and 500 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[2]

#: The cases of the input side (special files, LFS pointers, hostile JSON, amplification, names).
HOSTILE = (
    "special_fifo_info", "special_fifo_episodes", "special_fifo_data", "special_chardev_data", "special_fifo_mp4",
    "special_folder_data", "lfs_pointer_info", "lfs_pointer_episodes", "lfs_pointer_data", "lfs_pointer_mp4",
    "info_nested_100k_deep", "info_5000_digit_number", "info_sparse_1gib", "info_template_width_50m",
    "info_template_width_overflow", "info_template_unknown_chained_scheme", "factory_image_width_2_40",
    "episodes_zstd_bomb_tasks", "episodes_dictionary_bomb_tasks", "episodes_200k_zero_length_rows",
    "episodes_from_timestamp_1e10", "episodes_duplicate_column", "data_duplicate_column",
    "camera_key_with_double_colon", "data_path_double_colon_file",
)


LAYOUTS = ("v21", "folder_of_datasets", "missing_root", "hf_cache_snapshot", "symlinked_chunk_folder",
           "unknown_scheme_root")

#: v2.x metadata that crashed or ran for minutes, the tasks file a v2.x dataset reads, and the quality pass
#: over a wide fixed-size list feature (`--cases v2` runs these alone).
V2_HOSTILE = ("v21_clean", "v21_lengths_past_int64", "v21_episodes_line_32mb", "v21_300k_episodes_missing_data",
              "v30_300k_episodes_missing_data", "v21_stray_tasks_parquet", "v21_tasks_jsonl_nan", "feature_100k_wide")


def _v2_cases(episodes: int = 300_000) -> dict[str, Callable[[Path], tuple[str, list[str]]]]:
    """The v2.x cases: the corpus dataset h264_multi_file repacked into v2.1 (five chunk folders of two
    episodes), broken one way each; name -> build(workdir) -> (root, extra args). `episodes`: how many
    episodes the missing-data cases list (the names say 300k, their default)."""
    sys.path.insert(0, str(REPO))
    from tests.helpers import lerobot_dataset
    from tests.v21_repack import repack_v21

    def v21(work: Path, name: str = "h264_multi_file") -> Path:
        return repack_v21(lerobot_dataset(name), work / "v21")

    def lines(root: Path) -> list[dict]:
        return [json.loads(x) for x in (root / "meta" / "episodes.jsonl").read_text().splitlines()]

    def write(root: Path, docs: list[dict]) -> None:
        (root / "meta" / "episodes.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))

    def v21_clean(work: Path):
        return str(v21(work)), []

    def v21_lengths_past_int64(work: Path):  # each below 2**62, their running sum past 2**63
        root = v21(work)
        docs = lines(root)
        for k in (3, 5, 7):
            docs[k]["length"] = 2 ** 62 - 1
        write(root, docs)
        return str(root), []

    def v21_episodes_line_32mb(work: Path):  # 600,000 task strings on one line
        root = v21(work)
        docs = lines(root)
        docs[4]["tasks"] = ["pick up the red cube and put it in the bowl %06d" % i for i in range(600_000)]
        write(root, docs)
        return str(root), []

    def v21_300k_episodes_missing_data(work: Path):  # 300 chunk folders that do not exist
        root = v21(work)
        shutil.rmtree(root / "data")
        shutil.rmtree(root / "videos")
        info = json.loads((root / "meta" / "info.json").read_text())
        (root / "meta" / "info.json").write_text(json.dumps({**info, "chunks_size": 1000}))
        write(root, [{"episode_index": i, "tasks": ["pick"], "length": 10} for i in range(episodes)])
        return str(root), []

    def v30_300k_episodes_missing_data(work: Path):  # 300 episodes files of 1,000 episodes, their data files gone
        from tests.dataset_factory import DatasetSpec, write_dataset
        root = write_dataset(work / "v30", DatasetSpec(lengths=(10,) * episodes, episodes_per_meta_file=1000,
                                                       episodes_per_data_file=1000))
        shutil.rmtree(root / "data")
        return str(root), []

    def v21_stray_tasks_parquet(work: Path):  # a half-finished conversion's tasks.parquet, tasks the other way
        import pyarrow as pa
        import pyarrow.parquet as pq
        root = v21(work, "so101_av1")
        tasks = [json.loads(x)["task"] for x in (root / "meta" / "tasks.jsonl").read_text().splitlines()]
        pq.write_table(pa.table({"task_index": list(range(len(tasks))), "task": tasks[::-1]}),
                       root / "meta" / "tasks.parquet")
        return str(root), []

    def v21_tasks_jsonl_nan(work: Path):
        root = v21(work, "so101_av1")
        path = root / "meta" / "tasks.jsonl"
        path.write_text(path.read_text() + '{"task_index": NaN, "task": "x"}\n')
        return str(root), []

    def feature_100k_wide(work: Path):  # a 100,000-wide float32 feature: 4 episodes x 40 frames, 61 MB
        from tests.dataset_factory import DatasetSpec, write_dataset
        spec = DatasetSpec(lengths=(40, 40, 40, 40), features={
            "observation.big": {"dtype": "float32", "shape": [100_000], "names": None}})
        return str(write_dataset(work / "wide", spec)), []

    return {f.__name__: f for f in (v21_clean, v21_lengths_past_int64, v21_episodes_line_32mb,
                                    v21_300k_episodes_missing_data, v30_300k_episodes_missing_data,
                                    v21_stray_tasks_parquet, v21_tasks_jsonl_nan, feature_100k_wide)}


def _layouts() -> dict[str, Callable[[Path], tuple[str, list[str]]]]:
    """Dataset layouts of tests/test_input_checks.py: name -> build(workdir) -> (root, extra args)."""
    sys.path.insert(0, str(REPO))
    from tests import test_input_checks as checks
    from tests.helpers import SAMPLE, lerobot_dataset

    def v21(work: Path):
        return str(checks.write_v21_layout(work / "v21")), []

    def folder_of_datasets(work: Path):
        shutil.copytree(SAMPLE, work / "repo" / "so101")
        return str(work / "repo"), []

    def missing_root(work: Path):
        return str(work / "nope"), []

    def hf_cache_snapshot(work: Path):
        return str(checks.write_hf_cache_snapshot(work / "hub", SAMPLE)), []

    def symlinked_chunk_folder(work: Path):
        root = Path(shutil.copytree(lerobot_dataset("h264_multi_file"), work / "ds",
                                    ignore=shutil.ignore_patterns("expected*")))
        checks._link_chunk(root, root / "meta" / "moved" / "chunk-001")
        return str(root), []

    def unknown_scheme_root(work: Path):
        return "hdfz://cluster/datasets/so101", []

    return {f.__name__: f for f in (v21, folder_of_datasets, missing_root, hf_cache_snapshot,
                                    symlinked_chunk_folder, unknown_scheme_root)}


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_case(code: Path, root: str, out: Path, extra: list[str], timeout: float, max_rss_mb: float) -> dict:
    """Import `root` with the checkout at `code`; returns status, seconds, peak MB and what it reported."""
    argv = [sys.executable, "-m", "pipelines.import_lerobot", "--dataset", root, "--output", str(out),
            "--runner", "FnApiRunner", *extra]
    env = dict(os.environ, PYTHONPATH=str(code), NO_GCE_CHECK="true")
    log = out.parent / "import.log"  # a file, not a pipe: a chatty run must neither block nor grow this process
    started = time.monotonic()
    with open(log, "wb") as sink:
        proc = subprocess.Popen(argv, cwd=code, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    verdict = None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        seconds = time.monotonic() - started
        if seconds > timeout:
            verdict = f"killed: no end after {timeout:.0f} s"
        elif _rss_mb(proc.pid) > max_rss_mb:
            verdict = f"killed: memory above {max_rss_mb:.0f} MB"
        if verdict:
            _kill_tree(proc)
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    seconds = time.monotonic() - started
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - 20_000))
        stderr = f.read().decode(errors="replace")
    rules, message = [], ""
    errors = out / "errors.jsonl"
    if errors.exists():  # line by line: a run may list hundreds of thousands of episodes
        found = set()
        with open(errors) as f:
            for line in f:
                row = json.loads(line) if line.strip() else {"rule": "file_failed"}
                if row["rule"] != "file_failed":
                    found.add(row["rule"])
                    message = message or row["message"]
        rules = sorted(found)
    elif not verdict:
        lines = [x for x in stderr.strip().splitlines() if x.strip()]
        message = lines[-1] if lines else ""
    exit_status = os.waitstatus_to_exitcode(status)
    return {"status": verdict or exit_status, "seconds": seconds, "peak_mb": usage.ru_maxrss / 1024,
            "rules": rules, "message": message, "errors_bytes": errors.stat().st_size if errors.exists() else 0}


def build_case(name: str, work: Path, episodes: int = 300_000) -> tuple[str, list[str]]:
    """Build case `name` under `work`: (dataset root, extra import arguments)."""
    layouts = {**_layouts(), **_v2_cases(episodes)}
    if name in layouts:
        return layouts[name](work)
    from tests.hostile_datasets import build, cases_by_name
    case = cases_by_name()[name]
    return str(build(case, work)), list(case.extra_args)


def _build_in_subprocess(name: str, work: Path, episodes: int) -> tuple[str, list[str]]:
    proc = subprocess.run([sys.executable, __file__, "--build", name, str(work), "--episodes", str(episodes)],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"building {name} failed: {proc.stderr.strip()[-2000:]}")
    root, extra = json.loads(proc.stdout.strip().splitlines()[-1])
    return root, extra


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", default=str(REPO), help="checkout whose import runs (default: this one)")
    parser.add_argument("--cases", default=None, help="comma-separated case names (default: all input-side)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--max-rss-mb", type=float, default=6000.0)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument("--episodes", type=int, default=300_000,
                        help="episodes listed by the *_300k_episodes_missing_data cases (default: 300,000)")
    parser.add_argument("--build", nargs=2, metavar=("CASE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build:
        print(json.dumps(build_case(args.build[0], Path(args.build[1]), args.episodes)))
        return 0
    names = (list(V2_HOSTILE) if args.cases == "v2" else args.cases.split(",") if args.cases else
             list(HOSTILE) + list(LAYOUTS) + list(V2_HOSTILE))
    rows = {}
    print(f"{'case':<38} {'exit':<28} {'s':>6} {'peak MB':>8}  rules / message")
    for name in names:
        with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
            work = Path(tmp)
            root, extra = _build_in_subprocess(name, work, args.episodes)
            row = run_case(Path(args.code), root, work / "out", extra, args.timeout, args.max_rss_mb)
        rows[name] = row
        text = ",".join(row["rules"]) or "-"
        print(f"{name:<38} {str(row['status']):<28} {row['seconds']:>6.1f} {row['peak_mb']:>8.0f}  {text}: "
              f"{row['message'][:150]!r}" + (f" [errors.jsonl {row['errors_bytes']:,} B]"
                                             if row["errors_bytes"] > 100_000 else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
