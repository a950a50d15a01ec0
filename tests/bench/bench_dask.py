"""Benchmark: the real-scale dataset imported on a Dask cluster of two worker processes vs the DirectRunner.

    python tests/bench/bench_dask.py [--rounds 2] [--workdir DIR --reuse]

The dataset is bench_real_scale.py's (`make_real_scale`): 2,000 episodes (~600k frames), 20 episodes files
of 100 episodes, data files rolled at 100 MB, 2 AV1 cameras (sparse MP4s). The cluster is a
dask.distributed LocalCluster on 127.0.0.1: 2 worker processes of 1 thread each (this machine has 2 cores).

Measured, each import its own `lerobot-import` process, in alternating rounds:
  * `--runner DaskRunner --dask_client_address tcp://127.0.0.1:PORT` (the cluster already running and warm);
  * no runner option: the DirectRunner's default.
Stated apart: the cluster's start-up (scheduler and workers ready) and the first import on fresh workers
(each worker process imports Beam, pyarrow and the project once). Printed per Dask round: the bundles each
worker ran (all steps, and the part writer's) and its compute seconds, from the scheduler's task stream;
then whether one Dask output equals the DirectRunner's (every file, manifest.json but for run id and times).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.bench_real_scale import compile_project, make_real_scale  # noqa: E402


def _import(root: Path, out: Path, *extra: str) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipelines.import_lerobot", "--dataset", str(root), "--output",
                           str(out), "-q", *extra], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the import failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall


def _per_worker(stream) -> str:
    bundles, writes, seconds = collections.Counter(), collections.Counter(), collections.Counter()
    for task in stream.data:
        key = task["key"][0] if isinstance(task["key"], tuple) else task["key"]
        worker = task["worker"].rsplit(":", 1)[-1]
        seconds[worker] += sum(s["stop"] - s["start"] for s in task["startstops"] if s["action"] == "compute")
        if key.startswith("beam_"):
            bundles[worker] += 1
            if "WriteParts_Write" in key:
                writes[worker] += 1
    return "; ".join(f"worker :{w}: {bundles[w]} bundles ({writes[w]} of the part writer), {seconds[w]:.1f} s "
                     "computing" for w in sorted(seconds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--reuse", action="store_true", help="reuse the dataset a former run left in --workdir")
    args = ap.parse_args()
    import distributed

    from tests.helpers import output_files

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-dask-"))
    work.mkdir(parents=True, exist_ok=True)
    root = work / "ds"
    try:
        if not (args.reuse and (root / "meta" / "info.json").exists()):
            make_real_scale(root)
        compile_project(REPO)
        print(f"dataset: bench_real_scale's, 2,000 episodes, "
              f"{len(list((root / 'meta' / 'episodes').rglob('*.parquet')))} episodes files, "
              f"{sum(p.stat().st_size for p in (root / 'data').rglob('*.parquet')) / 1e6:,.0f} MB of data files")
        print(f"machine: {os.cpu_count()} cores, shared with other work; load average at the start "
              f"{os.getloadavg()[0]:.2f}")
        t0 = time.perf_counter()
        with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                                      dashboard_address=None) as cluster, distributed.Client(cluster) as client:
            started = time.perf_counter() - t0
            dask = ["--runner", "DaskRunner", "--dask_client_address", cluster.scheduler_address]
            first = _import(root, work / "out-first", *dask)
            print(f"cluster start-up: {started:.2f} s; first import on fresh workers: {first:.2f} s "
                  "(not in the rounds)")
            walls: dict[str, list[float]] = {"dask": [], "direct": []}
            for i in range(args.rounds):
                with distributed.get_task_stream(client) as stream:
                    walls["dask"].append(_import(root, work / "out-dask", *dask))
                print(f"round {i + 1}: dask {walls['dask'][-1]:.2f} s ({_per_worker(stream)})")
                walls["direct"].append(_import(root, work / "out-direct"))
                print(f"round {i + 1}: direct {walls['direct'][-1]:.2f} s")
        same = output_files(work / "out-dask") == output_files(work / "out-direct")
        print(f"dask output equals the DirectRunner's (every file; manifest but for run id and times): {same}")
        for name, w in walls.items():
            print(f"{name}: best {min(w):.2f} s, median {statistics.median(w):.2f} s over {len(w)} rounds")
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
