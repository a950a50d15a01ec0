"""The import's own command-line options, declared once and Beam-free.

`ImportOptions` and `RunOptions` (the PipelineOptions the pipeline carries) add exactly these, and so do
`--help` and `lerobot-import plan`; declaring them here, away from Beam, is what lets `--help` and
`--version` answer without importing Beam (seconds otherwise).
"""

from __future__ import annotations

from transforms.lerobot.span import DATA_SPAN_LIMIT
from transforms.base.run_limits import (DEFAULT_DEADLINES_S, HUB_LIST_MAX_ITEMS, HUB_LIST_MAX_PAGES, MIN_READ_RATE,
                                        SLOW_READ_S)


def add_import_arguments(parser) -> None:
    """The options that say what an import reads and writes (`ImportOptions`)."""
    parser.add_argument("--dataset", action="append", default=None, metavar="ROOT",
                        help="Root of a LeRobot v3 dataset (the folder holding meta/info.json): a local path "
                             "or a URL (gs://, s3://, memory://), or a Hugging Face Hub dataset "
                             "hf://datasets/OWNER/NAME[@REVISION], read in place at the commit REVISION names "
                             "at the start (needs the [hub] extra; token from HF_TOKEN or `hf auth login`). "
                             "Repeat it to import several datasets, each into OUT/<dataset name>/.")
    parser.add_argument("--datasets", default=None, metavar="SPEC",
                        help="Bulk import: comma-separated roots or glob patterns (gs://bucket/datasets/*, "
                             "hf://datasets/OWNER/* for an owner's Hub datasets), "
                             "or @FILE listing one root or pattern per line. Each dataset imports into "
                             "OUT/<dataset name>/; one failing never stops the others.")
    parser.add_argument("--output", required=False, default=None, metavar="OUT",
                        help="Output root, a local path or a URL (required); never inside a dataset. Gets "
                             "episodes/, media_index/, errors.jsonl and manifest.json.")
    parser.add_argument("--force", action="store_true", default=False,
                        help="Import again datasets whose last import is up to date (same files, same "
                             "options). Default: skip them.")
    parser.add_argument("--verify_output", "--verify-output", dest="verify_output", action="store_true",
                        default=False,
                        help="Before leaving an imported episodes file or media_index shard alone, also "
                             "compare its sha256 with the manifest's (reads the whole output). Default: each "
                             "is checked for existence and its recorded size only. Either way a damaged "
                             "file is imported again by this run, and a note says so.")
    parser.add_argument("--one_part", "--one-part", dest="one_part", action="store_true", default=False,
                        help="The reference's one-part behaviour, for exact conformance: write each episodes "
                             "file as one part and fail one whose episodes span more than --data-span-limit "
                             "bytes of data files (whole files, rule data_span). Default: episodes files are "
                             "written in ordered parts of whole episodes, each holding at most "
                             "--data-span-limit bytes of its episodes' own data.")
    parser.add_argument("--read_in_parts", "--read-in-parts", dest="read_in_parts", action="store_true",
                        default=False,
                        help="Deprecated, does nothing: reading in parts is the default (--one-part turns it "
                             "off).")
    parser.add_argument("--data_span_limit", "--data-span-limit", dest="data_span_limit", type=int,
                        default=DATA_SPAN_LIMIT, metavar="BYTES",
                        help=f"Bytes of its episodes' data one part may hold (with --one-part: bytes of data "
                             f"files an episodes file may span). Default: {DATA_SPAN_LIMIT} (64 MiB, the "
                             "reference's limit).")
    parser.add_argument("--inline_index", "--inline-index", dest="inline_index", action="store_true",
                        default=False,
                        help="Write each MP4's MediaIndex inside every episode (the reference's exact "
                             "records). Default: once per MP4 under media_index/.")
    parser.add_argument("--skip_videos", "--skip-videos", dest="skip_videos", action="store_true",
                        default=False,
                        help="Import without the video features, for datasets whose MP4s were not "
                             "published. Default: cameras are imported and a missing MP4 fails its "
                             "episodes file.")
    parser.add_argument("--strict", default=None, metavar="CHECK,...",
                        help="Make the findings of these quality checks (comma-separated names, or `all`) "
                             "errors of their episodes files, which then fail (rule quality). Default: every "
                             "check only warns (OUT/quality/ and the manifest's `quality` list the findings). "
                             "The checks: timestamp_grid, timestamp_steps, video_samples, dataset_totals, "
                             "episode_tasks, undeclared_columns, non_finite, frozen_feature, episode_rows.")
    defaults = ",".join(f"{phase}={seconds:.0f}" for phase, seconds in DEFAULT_DEADLINES_S.items())
    parser.add_argument("--phase_deadline", "--phase-deadline", dest="phase_deadline", default=None,
                        metavar="PHASE=SECONDS,...",
                        help="Seconds one piece of a run phase may take before it fails with rule deadline (a "
                             "stuck or hostile source): check (a dataset), plan (an episodes file, an MP4's "
                             "index), write (a part), finish (a commit, a dataset's manifest); SECONDS alone "
                             f"sets every phase. Default: {defaults}.")
    parser.add_argument("--hub_list_max_pages", "--hub-list-max-pages", dest="hub_list_max_pages", type=int,
                        default=HUB_LIST_MAX_PAGES, metavar="N",
                        help="Pages a Hugging Face Hub listing may have before it is refused (rule limit). "
                             f"Default: {HUB_LIST_MAX_PAGES} (1,000 entries a page).")
    parser.add_argument("--hub_list_max_items", "--hub-list-max-items", dest="hub_list_max_items", type=int,
                        default=HUB_LIST_MAX_ITEMS, metavar="N",
                        help="Entries a Hugging Face Hub listing may have before it is refused (rule limit). "
                             f"Default: {HUB_LIST_MAX_ITEMS}.")
    parser.add_argument("--min_read_rate", "--min-read-rate", dest="min_read_rate", default=None,
                        metavar="BYTES_PER_S[/SECONDS]",
                        help="The floor rate of a read: one that gets fewer bytes a second than this over SECONDS "
                             "(a source trickling its bytes) fails with rule deadline, naming the file; 0 lets "
                             f"reads be as slow as they come. Default: {MIN_READ_RATE:.0f}/{SLOW_READ_S:.0f} "
                             "(1 KiB/s over 30 s).")


def add_run_arguments(parser) -> None:
    """The options of a run that waits for its job (`RunOptions`)."""
    parser.add_argument("--wait_for_lease", "--wait-for-lease", dest="wait_for_lease", type=float, default=0.0,
                        metavar="SECONDS",
                        help="When another run holds an output's lease, wait up to SECONDS for it to be "
                             "released or to expire. Default: 0 (that output is skipped at once; a run "
                             "whose every output is held exits with status 1).")
