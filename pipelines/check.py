"""lerobot-import check: run the quality checks on datasets without importing them (nothing is written).

    lerobot-import check DATASET [DATASET ...] [--strict CHECK,...|all] [--skip-videos] [--json]

DATASET is a local path or a URL (gs://, s3://, memory://, hf://datasets/OWNER/NAME[@REVISION]). Only what
the checks need is read: info.json, meta/tasks.parquet, the episodes files, the numeric columns of the data
files, and each MP4's head and moov. Exit status 1 when a dataset has errors (findings of a `--strict`
check, or what the import itself would refuse), else 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, Optional, Sequence

from transforms.base import hub, storage
from transforms import quality
from transforms.base.errors import LeRobotImportError
from transforms.quality.dataset import CheckReport, check_dataset_quality

#: Findings printed per check (the rest are counted; --json gives them all).
SHOWN_PER_CHECK = 3

EXIT_STATUS = """\
exit status:
  0  no dataset has errors (warnings may have been found: they are printed)
  1  a dataset has errors: findings of a --strict check, or what the import itself would refuse (an
     unreadable file, a broken rule, a dataset that cannot be checked at all)
  2  the command line is wrong (an unknown option or check name)
"""


def report_json(report: CheckReport) -> dict[str, Any]:
    """A dataset's report as the JSON `--json` prints."""
    return {"dataset": report.dataset, "episodes_files": report.episodes_files, "episodes": report.episodes,
            "frames": report.frames, "data_bytes_read": report.bytes_read, "errors": report.errors,
            "quality": {"checks": quality.summarize(report.findings), "findings": len(report.findings)},
            "findings": [dataclasses.asdict(f) for f in report.findings],
            "problems": [dataclasses.asdict(p) for p in report.problems]}


def report_lines(report: CheckReport) -> list[str]:
    """A dataset's report for a person: a line per check with its first findings, the import's refusals."""
    summary = quality.summarize(report.findings)
    status = "errors" if report.errors else ("findings" if report.findings else "clean")
    lines = [f"{report.dataset}: {status} - {report.episodes} episodes, {report.frames} frames, "
             f"{report.episodes_files} episodes files: {len(report.findings)} quality findings, {report.errors} "
             f"errors ({report.bytes_read} data bytes read)"]
    for name, entry in summary.items():
        where = f"{entry['episodes']} episodes" if entry["episodes"] else f"{entry['findings']} findings"
        lines.append(f"  {name} ({entry['severity']}, {where}): {quality.CHECKS[name]}")
        found = [f for f in report.findings if f.check == name]
        lines += [f"    {f.episodes_file or '(dataset)'}: {f.detail}" for f in found[:SHOWN_PER_CHECK]]
        if len(found) > SHOWN_PER_CHECK:
            lines.append(f"    ... and {len(found) - SHOWN_PER_CHECK} more (--json lists them all)")
    blocking = sorted(set(summary) & quality.LEROBOT_BLOCKING)
    if blocking:
        lines.append(f"  {quality.REFUSED} ({', '.join(blocking)})")
    for p in report.problems:
        where = ", ".join(x for x in (p.episodes_file, None if p.episode_index is None else f"episode "
                                      f"{p.episode_index}", p.file) if x)
        lines.append(f"  error [{p.rule}] {where}: {p.message}")
    return lines


def check_one(root: str, *, strict: frozenset[str], skip_videos: bool) -> tuple[Optional[CheckReport], str]:
    """(the report, "") or (None, why the dataset cannot be checked at all)."""
    try:
        if hub.is_hub(root) and not storage.hub_commit(root):
            root = hub.pin(root)  # one commit for every read, as an import pins it
        return check_dataset_quality(root, strict=strict, skip_videos=skip_videos), ""
    except LeRobotImportError as ex:
        return None, f"{root}: cannot be checked: [{ex.rule}] {ex.message}"


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Check the datasets of the command line, print the reports; 1 when any has errors."""
    from pipelines.console import add_verbosity_arguments

    ap = argparse.ArgumentParser(prog="lerobot-import check",
                                 description="Run the import's quality checks on datasets, writing nothing.",
                                 epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", nargs="+", help="dataset roots: paths or URLs (gs://, s3://, hf://datasets/...)")
    ap.add_argument("--strict", default=None, metavar="CHECK,...",
                    help="checks whose findings are errors (comma-separated, or all): " + ", ".join(quality.CHECKS))
    ap.add_argument("--skip-videos", "--skip_videos", dest="skip_videos", action="store_true",
                    help="leave the cameras unchecked (for datasets whose MP4s were not published)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per dataset (a list)")
    add_verbosity_arguments(ap)
    args = ap.parse_args(argv)
    try:
        strict = quality.parse_strict(args.strict)
    except ValueError as ex:
        ap.error(str(ex))
    status, out = 0, []
    for root in args.dataset:
        report, why = check_one(root, strict=strict, skip_videos=args.skip_videos)
        if report is None:
            status = 1
            if args.json:
                out.append({"dataset": root, "error": why})
            else:
                print(why)
            continue
        status = max(status, 1 if report.errors else 0)
        if args.json:
            out.append(report_json(report))
        else:
            print("\n".join(report_lines(report)))
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
    return status


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
