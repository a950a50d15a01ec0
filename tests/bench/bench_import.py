"""Benchmark: import throughput on one worker against the pyarrow floor.

    python tests/bench/bench_import.py [--episodes 500] [--frames 150]

Generates a dataset (state/action float32[14], a float32[2,3] tensor, the 5 default columns), then
in the same run measures:
  * the import (FnApiRunner, one worker, default layout): wall time, frames/s, data bytes read;
  * the floor: pyarrow reading the same data files and writing the same number of output bytes
    (the frames as Parquet, zstd), the least any importer must do.
Targets: import <= 2x the floor; data bytes read <= 1.1x the data files' size.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


import pyarrow.parquet as pq  # noqa: E402

from pipelines.import_lerobot import run  # noqa: E402
from tests.dataset_factory import DatasetSpec, write_dataset  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-import-"))
    spec = DatasetSpec(lengths=(args.frames,) * args.episodes, features={
        "observation.state": {"dtype": "float32", "shape": [14], "names": None},
        "action": {"dtype": "float32", "shape": [14], "names": None},
        "observation.matrix": {"dtype": "float32", "shape": [2, 3], "names": ["rows", "cols"]},
    }, episodes_per_meta_file=50)
    root = write_dataset(tmp / "ds", spec)
    data_files = sorted((root / "data").rglob("*.parquet"))
    data_bytes = sum(p.stat().st_size for p in data_files)
    frames = args.episodes * args.frames

    import_times, read_bytes, out_bytes = [], None, None
    for i in range(args.repeat):
        out = tmp / f"out{i}"
        t0 = time.perf_counter()
        status = run(["--dataset", str(root), "--output", str(out), "--runner", "FnApiRunner"])
        import_times.append(time.perf_counter() - t0)
        assert status == 0
        manifest = json.loads((out / "manifest.json").read_text())
        out_bytes = manifest["totals"]["bytes"]
    # data bytes read, from the pipeline's own counter (printed by run); recompute via a counted run
    from apache_beam.metrics.metric import MetricsFilter
    from pipelines.import_lerobot import build_pipeline, config_from_options
    from apache_beam.options.pipeline_options import PipelineOptions
    from pipelines.options import ImportOptions
    opts = PipelineOptions(["--dataset", str(root), "--output", str(tmp / "outm"), "--runner", "FnApiRunner"])
    result = build_pipeline(opts, config_from_options(opts.view_as(ImportOptions)), "bench").run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(MetricsFilter())["counters"]}
    read_bytes = counters["data_bytes_read"]

    floor_times = []
    for i in range(args.repeat):
        t0 = time.perf_counter()
        tables = [pq.read_table(p) for p in data_files]
        written = 0
        for j, t in enumerate(tables):
            path = tmp / f"floor{i}-{j}.parquet"
            pq.write_table(t, path, compression="zstd")
            written += path.stat().st_size
        # top up to the import's output size so both write the same number of bytes
        if written < out_bytes:
            with open(tmp / f"floor{i}-pad.bin", "wb") as f:
                f.write(os.urandom(out_bytes - written))
        floor_times.append(time.perf_counter() - t0)

    best_import, best_floor = min(import_times), min(floor_times)
    print(f"dataset: {args.episodes} episodes x {args.frames} frames = {frames} frames, "
          f"{len(data_files)} data file(s), {data_bytes} bytes; output {out_bytes} bytes")
    print(f"import (1 worker, FnApiRunner, incl. pipeline start): best {best_import:.2f} s "
          f"= {frames / best_import:,.0f} frames/s  (runs: {', '.join(f'{t:.2f}' for t in import_times)})")
    print(f"floor (pyarrow read + write same bytes): best {best_floor:.2f} s = {frames / best_floor:,.0f} frames/s")
    print(f"import / floor = {best_import / best_floor:.2f}x (target <= 2x)")
    print(f"data bytes read = {read_bytes} = {read_bytes / data_bytes:.3f}x the data files (target <= 1.1x)")


if __name__ == "__main__":
    main()
