"""Import LeRobot v3 datasets as typed episodes.

    python -m pipelines.import_lerobot --dataset ROOT --output OUT [options] [Beam pipeline options]
    python -m pipelines.import_lerobot --help          (the options, examples, and where Beam's are)

Runs locally by default (DirectRunner); `--runner DataflowRunner` with the usual Dataflow options
submits the same pipeline. Exit status 0 when every episodes file imported, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import sys
import time
import uuid
from typing import TYPE_CHECKING, Optional, Sequence

from pipelines import cli

if TYPE_CHECKING:  # imported where used: `--help` and `--version` load neither Beam nor pyarrow
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.options import ImportOptions
    from transforms import lease
    from transforms.messages import ImportConfig

_LOG = logging.getLogger("lerobot_import")


def config_from_options(options: ImportOptions, *, run_id: str = "", started_at: str = "") -> ImportConfig:
    """The run's ImportConfig: dataset roots resolved (lists and globs expanded) and their outputs."""
    from pipelines.targets import resolve_targets
    from transforms.errors import LeRobotImportError
    from transforms.messages import ImportConfig

    if not options.output:
        raise cli.UsageError("error: --output is required (see --help)")
    try:
        targets = resolve_targets(options.dataset or [], options.datasets, options.output)
    except LeRobotImportError as ex:
        if ex.rule == "url":  # a URL no filesystem reads: the command line is wrong
            raise cli.UsageError(f"error: {ex}") from None
        raise SystemExit(f"error: {ex}") from None
    if options.read_in_parts:
        if options.one_part:
            raise cli.UsageError("error: --read-in-parts and --one-part contradict each other; reading in parts is "
                             "the default now, so drop --read-in-parts")
        print("note: --read-in-parts is the default now and does nothing; it will be removed (--one-part gives "
              "the reference's one-part behaviour)", file=sys.stderr)
    from transforms import quality
    try:
        strict = quality.parse_strict(options.strict)
    except ValueError as ex:  # a check name that is no check: the command line is wrong
        raise cli.UsageError(f"error: {ex}") from None
    return ImportConfig(targets=targets, one_part=options.one_part,
                        data_span_limit=options.data_span_limit, inline_index=options.inline_index,
                        skip_videos=options.skip_videos, force=options.force, run_id=run_id,
                        started_at=started_at, strict=strict)


def build_pipeline(options: PipelineOptions, config: ImportConfig, started_at: Optional[str] = None) -> beam.Pipeline:
    """The import pipeline, not yet run (a Flex Template launcher runs it and returns)."""
    import apache_beam as beam

    from transforms.import_dataset import ImportLeRobotDatasets
    if started_at is not None and not config.started_at:
        config = dataclasses.replace(config, started_at=started_at)
    p = beam.Pipeline(options=options)
    _ = (p
         | "Datasets" >> beam.Create([root for root, _ in config.targets])
         | "Import" >> ImportLeRobotDatasets(config))
    return p


def run(argv: Optional[Sequence[str]] = None, *, wait: bool = True, verbosity: int = 0) -> int:
    """Parse options, build and run the pipeline, print the summary; returns the exit status.

    Two runs must never import into one output at once, so a waiting run first takes a lease on each
    dataset output (`OUT/.lease.json`; in bulk mode one per `OUT/<dataset name>`), keeps them renewed
    while the pipeline runs and releases them at the end, also when it fails. An output whose lease
    another run holds is skipped ("being imported by run X"), so two bulk runs over overlapping
    dataset lists share the work; when every output is held the run exits at once with status 1.
    `--wait-for-lease SECONDS` waits for held leases instead. An expired lease (a run that died) is
    taken over, and the run says so.

    With `wait=False` (the Flex Template launcher: it submits the job and returns before the job ends)
    no lease is taken: a lease released when the launcher returns would guard nothing.

    `verbosity` (-1 for -q) says whether a local run shows its progress (`pipelines.progress`).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    text = cli.help_requested(argv)
    if text is not None:
        print(text)
        return 0
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.options import ImportOptions, RunOptions
    from transforms.episode import output as sink

    options = PipelineOptions(argv)
    import_options = options.view_as(ImportOptions)
    config = config_from_options(import_options, run_id=uuid.uuid4().hex, started_at=sink.now_iso())
    config, refused = safe_targets(config)
    for line in refused:
        print(line)
    if not config.targets:
        return 1
    if not wait:
        build_pipeline(options, config).run()
        return 0
    with contextlib.ExitStack() as stack:
        keepers, held = take_leases(config, stack, options.view_as(RunOptions).wait_for_lease)
        for line in held:
            print(line)
        if not keepers:
            print("error: every output is being imported by another run; this run imports nothing "
                  "(--wait-for-lease SECONDS waits for them)")
            return 1
        config = dataclasses.replace(config, targets=tuple(keepers))
        from pipelines import progress
        with progress.showing(verbosity >= 0 and progress.local_run(options)):
            result = build_pipeline(options, config).run()
            result.wait_until_finish()
        status = summarize(result, config)
        lost = [keeper.lost for keeper in keepers.values() if keeper is not None and keeper.lost is not None]
        for ex in lost:  # another run took the output over while this one imported: its result is suspect
            print(f"error: {ex}; import that output again once the other run has finished")
        return 1 if lost or refused else status


def safe_targets(config: ImportConfig) -> tuple[ImportConfig, list[str]]:
    """The run without the outputs whose own state could turn the import against the user (a managed
    folder or file that is a symlink or not regular, an output that is a file or read-only), and one
    "error" line per output left out: nothing of those is written, leased or deleted."""
    from transforms import lease
    from transforms.episode import output_state
    from transforms.errors import LeRobotImportError

    kept, refused = [], []
    for root, out in config.targets:
        try:
            output_state.check_output(out)
            if lease.supported(out):
                lease.read_lease(out)  # a lease no run of this importer wrote (absurd values): named, not waited on
        except LeRobotImportError as ex:
            refused.append(f"{root}: error: {ex} -> {out}")
            continue
        kept.append((root, out))
    return dataclasses.replace(config, targets=tuple(kept)), refused


def take_leases(config: ImportConfig, stack: contextlib.ExitStack,
                wait_seconds: float) -> tuple[dict[tuple[str, str], lease.LeaseKeeper], list[str]]:
    """Take the lease of every output of `config`, all sharing one wait of `wait_seconds`.

    Args:
        config: the run (its run id names the holder).
        stack: each lease's `LeaseKeeper` is entered into it; leaving it releases the leases.
        wait_seconds: how long, in all, to wait for held leases.
    Returns:
        The keepers by target (dataset root, output; None where the storage has no lease), in the order
        of `config.targets`, and one
        "skipped" line per output another run holds.
    """
    from transforms import lease
    from transforms.errors import LeRobotImportError

    deadline = time.monotonic() + max(wait_seconds, 0.0)
    # A scheduler may name its task in LEROBOT_IMPORT_JOB; whoever finds the lease held then sees it.
    keepers: dict[tuple[str, str], Optional[lease.LeaseKeeper]] = {}
    skipped = []
    for root, out in config.targets:
        if not lease.supported(out):  # e.g. an fsspec filesystem with no conditional create
            _LOG.warning("%s: this storage offers no lease, so runs on this output are not guarded", out)
            keepers[(root, out)] = None
            continue
        try:
            got = lease.acquire(out, run_id=config.run_id, job=os.environ.get("LEROBOT_IMPORT_JOB", ""),
                                wait_seconds=max(0.0, deadline - time.monotonic()))
        except LeRobotImportError as ex:  # a lease that is no lease, a full disk, a read-only output
            skipped.append(f"{root}: error: {ex} -> {out}")
            continue
        except lease.LeaseHeld as ex:
            h = ex.holder
            skipped.append(f"{root}: skipped - being imported by run {h.run_id} on host {h.host} (pid {h.pid}), "
                           f"lease expires at {_iso(h.expires_at)} -> {out}")
            continue
        if got.took_over is not None:
            print(f"{root}: {got.takeover_message()}")
        keepers[(root, out)] = stack.enter_context(lease.LeaseKeeper(got))
    return keepers, skipped


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat(timespec="seconds")


def summarize(result, config: ImportConfig) -> int:
    """Print each dataset's outcome and the run's counters; 1 when any dataset failed."""
    from apache_beam.metrics.metric import MetricsFilter

    from transforms import storage
    from transforms.episode import output_state
    from transforms.import_dataset import NAMESPACE
    counters: dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        # one counter per step that counts it (hub_retries in any step that reads): the run's total is the sum
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + c.committed
    status = 0
    for root, out in config.targets:
        doc = output_state.read_manifest(out).doc
        if doc is None:
            print(f"{root}: FAILED - no manifest was written -> {out}")
            status = 1
            continue
        if doc.get("run_id") != config.run_id:
            print(f"{root}: skipped - unchanged since its import of {doc.get('finished_at')} (--force redoes it)")
            continue
        print(f"{root}: {summary_line(doc)} -> {out}")
        found = quality_line(doc)
        if found:
            print(f"  {found}: {storage.join(out, 'quality')}")
        if doc["status"] != "imported":
            status = 1
            print(f"  errors: {storage.join(out, 'errors.jsonl')}")
    if counters:
        print("metrics: " + ", ".join(f"{k}={v}" for k, v in sorted(counters.items())))
    return status


def summary_line(doc: dict) -> str:
    """A dataset's outcome in one line, every number taken from its manifest's totals (so the line, the
    manifest and errors.jsonl agree). A dataset that failed before its episodes files were listed has
    "0 episodes files", not "0/0"."""
    t = doc["totals"]
    files = (f"{t['episodes_files_imported']}/{t['episodes_files']} episodes files" if t["episodes_files"]
             else "0 episodes files")
    line = (f"{doc['status']} - {t['episodes_written']}/{t['episodes']} episodes, {t['frames']} frames, {files}, "
            f"{_count(t['errors'], 'error')}")
    kept = [f"{t[k]} {word}" for k, word in (("episodes_files_unchanged", "unchanged"),
                                              ("episodes_files_removed", "removed")) if t.get(k)]
    if kept:  # an incremental run: what it left alone and what it removed
        line += f" ({', '.join(kept)})"
    if t.get("warnings"):
        line += f", {_count(t['warnings'], 'warning')}"
    checks = (doc.get("quality") or {}).get("checks") or {}
    if checks:
        line += f", {_count(sum(int(c.get('findings') or 0) for c in checks.values()), 'quality finding')}"
    return line


def quality_line(doc: dict) -> str:
    """What the quality checks found, per check, and whether LeRobot's loader refuses the dataset ("" when
    nothing was found)."""
    from transforms import quality

    checks = (doc.get("quality") or {}).get("checks") or {}
    if not checks:
        return ""
    shown = ", ".join(f"{name} ({c.get('episodes') or c.get('findings')} "
                      f"{'episodes' if c.get('episodes') else 'findings'}"
                      f"{', error' if c.get('severity') == quality.ERROR else ''})" for name, c in checks.items())
    blocking = sorted(set(checks) & quality.LEROBOT_BLOCKING)
    refusal = f"; {quality.REFUSED} ({', '.join(blocking)})" if blocking else ""
    return f"quality: {shown}{refusal}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The `lerobot-import` command (`pipelines.cli.main`: an import, or its render, verify and plan)."""
    cli.main(argv)


if __name__ == "__main__":
    main()
