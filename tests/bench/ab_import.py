"""A/B of the import's wall time: two (or more) checkouts of the project against the pyarrow floor, alternating.

    python tests/bench/ab_import.py DATASET --code OLD_CHECKOUT --code . --rounds 6

Each round runs the floor (bench_real_scale's: `pq.read_table` every data file, write it once) and then the
import of each checkout (`python -m pipelines.import_lerobot --dataset DATASET --output TMP -q`, no options,
in a fresh process, the checkout's own modules first on the path), in that order, so a drift of the shared
machine's speed touches all of them alike. Printed: each side's best and median wall time, and both as
ratios to the floor's best and median. Every checkout's modules are compiled to bytecode first.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}) in {cwd}:\n{proc.stderr[-3000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a LeRobot v3 dataset (e.g. bench_real_scale's, in its --workdir)")
    parser.add_argument("--code", action="append", required=True, help="a checkout of the project (repeatable)")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    codes = [Path(c).resolve() for c in args.code]
    sys.path.insert(0, str(REPO))
    from tests.bench.bench_real_scale import compile_project
    for code in codes:
        compile_project(code)
    work = Path(tempfile.mkdtemp(prefix="ab_import_"))
    floor, walls = [], {code: [] for code in codes}
    try:
        for _ in range(args.rounds):
            shutil.rmtree(work / "floor", ignore_errors=True)
            floor.append(_timed([sys.executable, str(REPO / "tests/bench/bench_real_scale.py"), "--_floor",
                                 args.dataset, str(work / "floor")], REPO))
            for code in codes:
                shutil.rmtree(work / "out", ignore_errors=True)
                walls[code].append(_timed([sys.executable, "-m", "pipelines.import_lerobot", "--dataset",
                                           args.dataset, "--output", str(work / "out"), "-q"], code))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best, median = min(floor), statistics.median(floor)
    print(f"floor: best {best:.2f} s, median {median:.2f} s  [{' '.join(f'{w:.2f}' for w in floor)}]")
    for code, w in walls.items():
        print(f"{code}: best {min(w):.2f} s ({min(w) / best:.2f}x), median {statistics.median(w):.2f} s "
              f"({statistics.median(w) / median:.2f}x)  [{' '.join(f'{x:.2f}' for x in w)}]")


if __name__ == "__main__":
    main()
