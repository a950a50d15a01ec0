"""`lerobot-import plan`: what an import run would do, without writing anything.

    lerobot-import plan --dataset ROOT --output OUT [--force] [--one-part] [--inline-index] ...
    lerobot-import plan --datasets 'gs://bucket/datasets/*' --output OUT [--json] [--list]

Per dataset: the episodes files to import (new, changed, failed last time), unchanged, or whose output
is to be removed; the parts, episodes, data bytes and MP4s an import would read; an estimate of the
bytes it would write (from the last import's output bytes per data byte, or `DEFAULT_OUTPUT_RATIO`); and
who holds the output's lease, if anyone. It takes the import's own options (Beam options are ignored),
so the same command line with `plan` in front shows what that run would do.

A plan lists the dataset once and reads only the episodes files whose sources changed: for a dataset
whose last import is recorded, an unchanged episodes file costs one line of the listing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, Optional, Sequence

from pipelines.targets import resolve_targets
from transforms.output.lease import read_lease
from transforms.base import storage
from transforms.output.damage import OutputDamage, find_damage, without_damage
from transforms.output import safety
from transforms.output.incremental import decide_run
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import sources
from transforms.lerobot.data_files import read_row_group_layout
from transforms.lerobot.episodes_files import DATA_SPAN_LIMIT, RowGroupLayout, plan_parts
from transforms.lerobot.layouts import layout_of, read_unit_rows
from transforms.work.messages import ImportConfig

#: Output bytes per byte the episodes' data takes decoded (`PartPlan.decoded_bytes`), when no earlier import of
#: the output says better: the parts hold the same values, zstd. Counted on the decoded size, not on the data
#: files' bytes, because those depend on how the files were written: bench_real_scale.py's same frames take
#: 120 MB in one row group per episode and 82 MB in one row group per file (a dictionary per column), 99.6 MB
#: decoded either way, for 74.6 MB of output (0.75: random values, the least compressible). Measured on the
#: published datasets of the test corpus: 0.66 (unitree_g1_av1), 0.37 (rebot_devarm, 80 KB of data). The next
#: plan of an output learns its own ratio, per byte of data on disk, from the last import (whose files are
#: those it reads again).
DEFAULT_OUTPUT_RATIO = 0.65


@dataclasses.dataclass(frozen=True)
class PlanSettings:
    """The import options a plan needs (those that change what a run writes, and --force)."""

    one_part: bool = False
    data_span_limit: int = DATA_SPAN_LIMIT
    inline_index: bool = False
    skip_videos: bool = False
    force: bool = False
    verify_output: bool = False


def output_options(settings: PlanSettings) -> dict[str, Any]:
    """The options dict an import records and compares, exactly as the import makes it."""
    return ImportConfig(targets=(), one_part=settings.one_part, data_span_limit=settings.data_span_limit,
                        inline_index=settings.inline_index, skip_videos=settings.skip_videos).output_options()


@dataclasses.dataclass(frozen=True)
class FilePlan:
    """One episodes file in a plan."""

    episodes_file: str
    action: str  # sources.IMPORT | UNCHANGED | REMOVED
    reason: str
    episodes: int
    parts: int  # to write (import), kept (unchanged) or to remove (removed)
    data_bytes: int  # bytes of data its parts' episodes take (import)
    video_files: tuple[str, ...] = ()
    decoded_bytes: int = 0  # what that data takes decoded (import)
    problem: Optional[str] = None  # why importing it would fail, as far as planning can tell
    sources: Optional[sources.EpisodesFileSources] = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class DatasetPlan:
    """What a run would do with one dataset."""

    dataset: str
    output: str
    options: dict
    files: tuple[FilePlan, ...]
    mp4s_to_read: tuple[str, ...]  # MP4s whose MediaIndex would be read (used, and new, changed or unrecorded)
    data_bytes_to_read: int  # what the import would read of the data files the episodes files to import use
    output_ratio: float
    ratio_source: str  # "last import" | "default"
    video_versions: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    lease: Optional[str] = None  # who holds the output's lease now
    problem: Optional[str] = None  # why the dataset cannot be imported at all
    repairs: tuple[str, ...] = ()  # the damaged files of the output the run would import again

    @property
    def counts(self) -> dict[str, int]:
        out = {sources.IMPORT: 0, sources.UNCHANGED: 0, sources.REMOVED: 0}
        for f in self.files:
            out[f.action] += 1
        return out

    @property
    def failing(self) -> list[FilePlan]:
        """The episodes files to import whose import would fail, as far as planning can tell."""
        return [f for f in self._importing() if f.problem]

    def _importing(self) -> list[FilePlan]:
        return [f for f in self.files if f.action == sources.IMPORT]

    @property
    def parts(self) -> int:
        return sum(f.parts for f in self._importing())

    @property
    def episodes(self) -> int:
        return sum(f.episodes for f in self._importing())

    @property
    def data_bytes(self) -> int:
        return sum(f.data_bytes for f in self._importing())

    @property
    def decoded_bytes(self) -> int:
        return sum(f.decoded_bytes for f in self._importing())

    @property
    def estimated_output_bytes(self) -> int:
        """The last import's output bytes per data byte times the data bytes, or without one the default
        ratio times the decoded bytes (`DEFAULT_OUTPUT_RATIO`)."""
        basis = self.decoded_bytes if self.ratio_source == "default" else self.data_bytes
        return int(round(basis * self.output_ratio))

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset, "output": self.output, "options": self.options, "problem": self.problem,
            "lease": self.lease, "counts": self.counts, "parts": self.parts, "episodes": self.episodes,
            "data_bytes": self.data_bytes, "decoded_bytes": self.decoded_bytes,
            "data_bytes_to_read": self.data_bytes_to_read,
            "mp4s_to_read": list(self.mp4s_to_read), "estimated_output_bytes": self.estimated_output_bytes,
            "output_ratio": self.output_ratio, "ratio_source": self.ratio_source, "repairs": list(self.repairs),
            "episodes_files": [{k: v for k, v in dataclasses.asdict(f).items() if k != "sources"}
                               | {"video_files": list(f.video_files)} for f in self.files],
        }


def read_manifest(out: str) -> Optional[dict]:
    """The output's manifest.json, or None when there is none (or it is not a sound manifest)."""
    return safety.read_manifest(out).doc


def plan_dataset(root: str, out: str, options: dict[str, Any], *, force: bool = False,
                 verify_output: bool = False) -> DatasetPlan:
    """Plan the import of one dataset into `out`, reading only what is needed and writing nothing.

    Args:
        root: the dataset root.
        out: its output root.
        options: the run's output options (`output_options`).
        force: plan a run that redoes every episodes file.
        verify_output: look for damaged output files by their sha256 too, not by their sizes only.
    Returns:
        The plan.
    """
    root = storage.normalize_root(root)
    refused = _refused_output(out)
    if refused is not None:  # the import refuses it before writing or deleting anything: so does the plan
        return _unplannable(root, out, options, refused)
    previous = read_manifest(out)
    try:  # what the run would find damaged, and import again
        same = previous is not None and previous.get("options") == options  # else nothing is carried anyway
        damage = (find_damage(out, previous, checksums=verify_output) if same and not force
                  else OutputDamage())
    except LeRobotImportError as ex:
        return _unplannable(root, out, options, str(ex))
    except OSError as ex:
        return _unplannable(root, out, options, f"the output cannot be listed ({ex})")
    previous = without_damage(previous, damage)
    # The options are part of every source digest: a manifest made with other options matches nothing.
    scanned = sources.scan_dataset(root, options, previous_manifest=previous)
    unreadable = scanned.unreadable()
    if unreadable is not None:  # not "every file gone": the import fails such a dataset and removes nothing
        return _unplannable(root, out, options, f"the dataset cannot be read ({unreadable}); an import fails it "
                            "and removes none of its output: check the dataset root")
    decisions, media = decide_run(scanned.files, previous, scanned.listing.token,
                                  dataset_file=lambda rel: storage.join(root, rel),
                                  inline_index=bool(options.get("inline_index")), force=force,
                                  damaged=damage.shards)
    layouts: dict[str, Optional[RowGroupLayout]] = {}
    files = tuple(_file_plan(scanned, d, options, layouts) for d in decisions)
    used = sorted({v for f in files if f.action == sources.IMPORT for v in f.video_files})
    mp4s = tuple(sorted(media.to_read))
    data_files = {d for f in files if f.action == sources.IMPORT and f.sources for d in f.sources.data_files}
    ratio, ratio_source = _output_ratio(previous)
    problem = scanned.info_problem
    if problem is None and not scanned.files:
        problem = "the dataset has no meta/episodes/*/*.parquet files"
    # The import reads only the row groups its episodes lie in: an episodes file whose data files other
    # files share (LeRobot's v3.0 layout) costs its episodes' share of them, not the files whole.
    whole = sum(scanned.listing.size(d) for d in data_files)
    spanned = sum(f.data_bytes for f in files if f.action == sources.IMPORT)
    return DatasetPlan(dataset=root, output=out, options=options, files=files, mp4s_to_read=mp4s,
                       data_bytes_to_read=min(whole, spanned) if spanned else whole, output_ratio=ratio,
                       ratio_source=ratio_source, video_versions=sources.video_versions(scanned.listing, used),
                       lease=_lease_holder(out), problem=problem, repairs=tuple(damage.notes()))


def _refused_output(out: str) -> Optional[str]:
    """Why the import would refuse this output before touching it (its own state unsafe), else None."""
    try:
        safety.check_output(out)
    except LeRobotImportError as ex:
        return str(ex)
    return None


def _unplannable(root: str, out: str, options: dict[str, Any], problem: str) -> DatasetPlan:
    return DatasetPlan(dataset=root, output=out, options=options, files=(), mp4s_to_read=(), data_bytes_to_read=0,
                       output_ratio=DEFAULT_OUTPUT_RATIO, ratio_source="default", lease=_lease_holder(out),
                       problem=problem)


def _file_plan(scanned: sources.DatasetSources, decision: sources.EpisodesFileDecision,
               options: dict[str, Any], layouts: dict[str, Optional[RowGroupLayout]]) -> FilePlan:
    src, prev = decision.sources, decision.previous or {}
    if decision.action != sources.IMPORT:
        return FilePlan(decision.episodes_file, decision.action, decision.reason, int(prev.get("episodes") or 0),
                        len(prev.get("parts") or ()), 0, tuple(src.video_files) if src else (), sources=src)
    problem, episodes, parts, data_bytes, decoded = src.problem, 0, 0, src.data_bytes, src.data_bytes
    if problem is None:
        try:
            rows = src.rows if src.rows is not None else read_unit_rows(scanned.root, src.episodes_file,
                                                                        scanned.info)
            # a v2.x episode is its whole data file: sized by the file, as the import does
            row_groups = ((lambda f: _layout(scanned, f, layouts)) if layout_of(src.episodes_file).sized_by_footers
                          else (lambda f: None))
            plans = plan_parts(rows, lambda f: _listed_size(scanned.listing, f), row_groups,
                               limit=int(options["data_span_limit"]), one_part=bool(options["one_part"]),
                               file=src.episodes_file)
            episodes, parts, data_bytes = len(rows), len(plans), sum(p.data_bytes for p in plans)
            decoded = sum(p.decoded_bytes for p in plans)
        except LeRobotImportError as ex:
            problem = str(ex)
    if problem is None:  # a data file or MP4 its rows reference and the dataset does not hold
        missing = sources.missing_source(src, scanned.listing, scanned.root)
        problem = str(missing) if missing is not None else None
    return FilePlan(decision.episodes_file, decision.action, decision.reason, episodes, parts, data_bytes,
                    src.video_files, decoded, problem, sources=src)


def _layout(scanned: sources.DatasetSources, rel: str,
            layouts: dict[str, Optional[RowGroupLayout]]) -> Optional[RowGroupLayout]:
    """A data file's row-group layout, its footer read once per plan (the import reads it the same way)."""
    if rel not in layouts:
        layouts[rel] = read_row_group_layout(scanned.root, rel, scanned.info)
    return layouts[rel]


def _listed_size(listing: sources.SourceListing, rel: str) -> int:
    found = listing.get(rel)
    if found is None:
        raise LeRobotImportError("file_missing", f"data file {rel} does not exist", file=rel)
    return found.size


def _output_ratio(previous: Optional[dict]) -> tuple[float, str]:
    """Output bytes per data byte spanned, from the last import's imported episodes files."""
    entries = [e for e in ((previous or {}).get("episodes_files") or {}).values()
               if isinstance(e, dict) and e.get("status") in sources.GOOD_STATUSES]
    written = sum(int(e.get("bytes") or 0) for e in entries)
    spanned = sum(int(e.get("data_bytes") or 0) for e in entries)
    if written > 0 and spanned > 0:
        return written / spanned, "last import"
    return DEFAULT_OUTPUT_RATIO, "default"


def _lease_holder(out: str) -> Optional[str]:
    try:
        held = read_lease(out)
    except (OSError, LeRobotImportError) as ex:
        return f"cannot read the lease: {ex}"
    return held.describe() if held is not None else None


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------

def targets(dataset: Sequence[str], datasets: Optional[str], output: str) -> list[tuple[str, str]]:
    """(dataset root, output root) pairs, laid out exactly as the import lays them out."""
    return list(resolve_targets(dataset, datasets, output))


EXIT_STATUS = """\
exit status:
  0  every dataset can be imported (the plan is printed)
  1  a dataset cannot be imported, or an episodes file would fail (the plan says why)
  2  the command line is wrong
"""


def _parser() -> argparse.ArgumentParser:
    """The import's own options (the same declarations, so the same meanings and defaults), and --json, --list."""
    from pipelines.arguments import add_import_arguments
    from pipelines.console import add_verbosity_arguments

    ap = argparse.ArgumentParser(prog="lerobot-import plan", description="Show what an import run with the same "
                                 "options would do, without writing anything. Beam options are accepted and "
                                 "ignored.", epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_import_arguments(ap)
    ap.add_argument("--json", action="store_true", help="Print the plan as JSON.")
    ap.add_argument("--list", action="store_true", help="List every episodes file, unchanged ones included.")
    add_verbosity_arguments(ap)
    return ap


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Plan every dataset of the command line and print the plans; 1 when a dataset cannot be imported or
    an episodes file would fail."""
    ap = _parser()
    args, _beam_options = ap.parse_known_args(argv)
    if not args.output:
        ap.error("the following arguments are required: --output")
    settings = PlanSettings(one_part=args.one_part, data_span_limit=args.data_span_limit,
                            inline_index=args.inline_index, skip_videos=args.skip_videos, force=args.force,
                            verify_output=args.verify_output)
    options = output_options(settings)
    from transforms.base import run_limits
    try:  # the import's bounds: a stuck source or an endless Hub listing ends the plan as it ends a run
        limits = run_limits.from_values(args.phase_deadline, args.hub_list_max_pages, args.hub_list_max_items,
                                        getattr(args, "min_read_rate", None))
    except ValueError as ex:
        ap.error(str(ex))
    run_limits.install(limits)
    try:
        pairs = targets(args.dataset or [], args.datasets, args.output)
    except LeRobotImportError as ex:  # a Hub root that cannot be pinned (unreachable, private, no such revision)
        print(f"error: {ex}")
        return 1
    plans = []
    for root, out in pairs:
        with run_limits.piece(limits, "check", f"dataset {root}"):
            plans.append(_plan_or_problem(root, out, options, settings))
    if args.json:
        print(json.dumps([p.to_json() for p in plans], indent=2, sort_keys=True))
    else:
        for p in plans:
            print(render(p, every_file=args.list))
    return 1 if any(p.problem or p.failing for p in plans) else 0


def _plan_or_problem(root: str, out: str, options: dict[str, Any], settings: PlanSettings) -> DatasetPlan:
    """The plan of one dataset; one whose storage fails while it is planned is a dataset that cannot be
    imported, with that cause, never a traceback."""
    try:
        return plan_dataset(root, out, options, force=settings.force, verify_output=settings.verify_output)
    except LeRobotImportError as ex:
        return _unplannable(storage.normalize_root(root), out, options, str(ex))
    except OSError as ex:
        return _unplannable(root, out, options, f"the dataset cannot be read ({ex}); check the dataset root")


def render(p: DatasetPlan, *, every_file: bool = False) -> str:
    """A plan as text: a summary line, then one line per episodes file to import or remove."""
    c = p.counts
    lines = [f"{p.dataset} -> {p.output}: {c['import']} episodes files to import, {c['unchanged']} unchanged, "
             f"{c['removed']} to remove"]
    if p.problem:
        lines.append(f"  cannot import: {p.problem}")
    if p.failing:
        lines.append(f"  would fail: {len(p.failing)} of the {c['import']} episodes files to import (each named "
                     "below with why)")
    if p.lease:
        lines.append(f"  lease: {p.lease}")
    lines += [f"  {note}" for note in p.repairs]
    if c["import"]:
        lines.append(f"  would write {p.parts} parts of {p.episodes} episodes, reading {_size(p.data_bytes_to_read)} "
                     f"of data files and the MediaIndex of {len(p.mp4s_to_read)} MP4s; "
                     f"~{_size(p.estimated_output_bytes)} out ({p.output_ratio:.2f} output bytes per "
                     f"{'decoded ' if p.ratio_source == 'default' else ''}data byte, {p.ratio_source})")
    for f in p.files:
        if f.action == sources.UNCHANGED and not every_file:
            continue
        detail = (f"{f.parts} parts to remove" if f.action == sources.REMOVED else
                  f"{f.episodes} episodes, {f.parts} parts" + (f", {_size(f.data_bytes)} of data"
                                                               if f.action == sources.IMPORT else ""))
        lines.append(f"  {f.action:9} {f.episodes_file} ({f.reason}): {detail}")
        if f.problem:
            lines.append(f"            would fail: {f.problem}")
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


if __name__ == "__main__":  # `python -m pipelines.plan ...`: `lerobot-import plan ...`
    from pipelines import cli
    cli.main(["plan", *sys.argv[1:]])
