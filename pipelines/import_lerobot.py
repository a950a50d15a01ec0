"""Import LeRobot v3 datasets as typed episodes.

    python -m pipelines.import_lerobot --dataset ROOT --output OUT [options] [Beam pipeline options]

Runs locally by default (DirectRunner); `--runner DataflowRunner` with the usual Dataflow options
submits the same pipeline. Exit status 0 when every episodes file imported, 1 otherwise.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.options import ImportOptions
from transforms import sink, storage
from transforms.import_dataset import NAMESPACE, ImportLeRobotDatasets
from transforms.import_plan import ImportConfig

_LOG = logging.getLogger("lerobot_import")


def config_from_options(options: ImportOptions) -> ImportConfig:
    if not options.dataset:
        raise SystemExit("error: --dataset is required")
    if not options.output:
        raise SystemExit("error: --output is required")
    roots = [storage.normalize_root(d) for d in options.dataset]
    out = storage.normalize_root(options.output)
    if len(roots) == 1:
        targets = ((roots[0], out),)
    else:
        targets = tuple((r, storage.join(out, dataset_name(r))) for r in roots)
    return ImportConfig(targets=targets, read_in_parts=options.read_in_parts,
                        data_span_limit=options.data_span_limit, inline_index=options.inline_index,
                        skip_videos=options.skip_videos)


def dataset_name(root: str) -> str:
    return root.rstrip("/").rsplit("/", 1)[-1]


def build_pipeline(options: PipelineOptions, config: ImportConfig, started_at: str) -> beam.Pipeline:
    """The import pipeline, not yet run (a Flex Template launcher runs it and returns)."""
    p = beam.Pipeline(options=options)
    _ = (p
         | "Datasets" >> beam.Create([root for root, _ in config.targets])
         | "Import" >> ImportLeRobotDatasets(config, started_at))
    return p


def run(argv: Optional[Sequence[str]] = None, *, wait: bool = True) -> int:
    """Parse options, build and run the pipeline, print the summary; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    options = PipelineOptions(argv)
    import_options = options.view_as(ImportOptions)
    config = config_from_options(import_options)
    started_at = sink.now_iso()
    pipeline = build_pipeline(options, config, started_at)
    result = pipeline.run()
    if not wait:
        return 0
    result.wait_until_finish()
    return summarize(result, config)


def summarize(result, config: ImportConfig) -> int:
    counters = {c.key.metric.name: c.committed for c in
                result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]}
    status = 0
    for root, out in config.targets:
        doc = json.loads(storage.read_bytes(storage.join(out, "manifest.json"), what="manifest",
                                            file="manifest.json"))
        t = doc["totals"]
        print(f"{root}: {doc['status']} - {t['episodes_written']}/{t['episodes']} episodes, {t['frames']} frames, "
              f"{t['episodes_files_imported']}/{t['episodes_files']} episodes files, {t['errors']} errors "
              f"-> {out}")
        if doc["status"] != "imported":
            status = 1
            print(f"  errors: {storage.join(out, 'errors.jsonl')}")
    if counters:
        print("metrics: " + ", ".join(f"{k}={v}" for k, v in sorted(counters.items())))
    return status


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("apache_beam", "fsspec", "gcsfs", "urllib3", "google"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    sys.exit(run())


if __name__ == "__main__":
    main()
