"""Command-line options of the import pipeline, as a Beam PipelineOptions subclass.

Being PipelineOptions, they travel with the pipeline (Dataflow shows them, Flex Templates map their
parameters onto them) and mix with Beam's own flags on one command line.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from transforms.lerobot.episodes_files import DATA_SPAN_LIMIT


class ImportOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument("--dataset", action="append", default=None,
                            help="Root of a LeRobot v3 dataset: a local path or an fsspec URL (gs://, s3://, "
                                 "memory://, ...). May be repeated.")
        parser.add_argument("--datasets", default=None,
                            help="Several dataset roots for a bulk import: comma-separated roots or glob "
                                 "patterns (gs://bucket/datasets/*), or @FILE listing one root or pattern per "
                                 "line. Each imports into OUT/<dataset name>/.")
        parser.add_argument("--force", action="store_true", default=False,
                            help="Re-import datasets whose last import is up to date (same files).")
        parser.add_argument("--output", required=False, default=None,
                            help="Output root (local path or fsspec URL).")
        parser.add_argument("--read_in_parts", "--read-in-parts", dest="read_in_parts", action="store_true",
                            default=False,
                            help="Import an episodes file that spans more than the data-span limit in ordered "
                                 "parts instead of failing (mapping §7).")
        parser.add_argument("--data_span_limit", "--data-span-limit", dest="data_span_limit", type=int,
                            default=DATA_SPAN_LIMIT,
                            help="Bytes of data files one part may span (default 64 MiB, the reference's limit).")
        parser.add_argument("--inline_index", "--inline-index", dest="inline_index", action="store_true",
                            default=False,
                            help="Write each file's MediaIndex inside every episode (the reference's exact "
                                 "records) instead of once under media_index/.")
        parser.add_argument("--skip_videos", "--skip-videos", dest="skip_videos", action="store_true",
                            default=False,
                            help="Import without the video features (for datasets whose MP4s are absent).")
