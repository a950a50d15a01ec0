"""Import LeRobot v3 datasets as typed episodes.

    python -m pipelines.import_lerobot --dataset ROOT --output OUT [options] [Beam pipeline options]
    python -m pipelines.import_lerobot --help          (the options, examples, and where Beam's are)

Runs locally by default (DirectRunner); `--runner DataflowRunner` with the usual Dataflow options
submits the same pipeline. Exit status 0 when every episodes file imported, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import uuid
from typing import TYPE_CHECKING, Optional, Sequence

from pipelines import interrupts

if __name__ == "__main__":  # `python -m pipelines.import_lerobot`: a signal from here on is met (see below)
    interrupts.early()

from pipelines import command_line, console, report, run_control, runners  # noqa: E402

if TYPE_CHECKING:  # imported where used: `--help` and `--version` load neither Beam nor pyarrow
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.options import ImportOptions
    from pipelines.targets import RunTargets
    from transforms.work.messages import ImportConfig

_LOG = logging.getLogger("lerobot_import")


def run_targets(options: ImportOptions, *, check: bool = False) -> RunTargets:
    """The run's dataset roots resolved (lists and globs expanded), their outputs, and (`check`) the roots
    left out before anything is written (not datasets); SystemExit with one line when the run cannot start."""
    from pipelines.targets import resolve_run
    from transforms.base.errors import LeRobotImportError

    if not options.output:
        raise console.UsageError("error: --output is required (see --help)")
    try:
        return resolve_run(options.dataset or [], options.datasets, options.output, check=check)
    except LeRobotImportError as ex:
        if ex.rule == "url":  # a URL no filesystem reads: the command line is wrong
            raise console.UsageError(f"error: {ex}") from None
        raise SystemExit(f"error: {ex}") from None


def config_from_options(options: ImportOptions, *, run_id: str = "", started_at: str = "",
                        targets: Optional[RunTargets] = None, limits=None) -> ImportConfig:
    """The run's ImportConfig: dataset roots resolved (lists and globs expanded) and their outputs; `limits`
    the run's bounds when the caller has them already (else read from `options`)."""
    from transforms.work.messages import ImportConfig

    targets = (run_targets(options) if targets is None else targets).targets
    if options.read_in_parts:
        if options.one_part:
            raise console.UsageError("error: --read-in-parts and --one-part contradict each other; reading in parts is "
                             "the default now, so drop --read-in-parts")
        print("note: --read-in-parts is the default now and does nothing; it will be removed (--one-part gives "
              "the reference's one-part behaviour)", file=sys.stderr)
    from transforms import quality
    try:
        strict = quality.parse_strict(options.strict)
    except ValueError as ex:  # a check name that is no check: the command line is wrong
        raise console.UsageError(f"error: {ex}") from None
    from transforms.base import run_limits
    limits = dataclasses.replace(limits or limits_from_options(options), run_id=run_id)
    run_limits.install(limits)  # the run's own: what the run learns once holds for it alone
    return ImportConfig(targets=targets, one_part=options.one_part,
                        data_span_limit=options.data_span_limit, inline_index=options.inline_index,
                        skip_videos=options.skip_videos, force=options.force, run_id=run_id,
                        started_at=started_at, strict=strict,
                        verify_output=options.verify_output, limits=limits)


def limits_from_options(options: ImportOptions):  # -> run_limits.RunLimits
    """The run's bounds (--phase_deadline, --hub_list_max_pages, --hub_list_max_items, --min_read_rate); a value
    that is none is a usage error."""
    from transforms.base import run_limits
    try:
        return run_limits.from_values(options.phase_deadline, options.hub_list_max_pages,
                                      options.hub_list_max_items, getattr(options, "min_read_rate", None))
    except ValueError as ex:
        raise console.UsageError(f"error: {ex}") from None


def build_pipeline(options: PipelineOptions, config: ImportConfig, started_at: Optional[str] = None) -> beam.Pipeline:
    """The import pipeline, not yet run (a Flex Template launcher runs it and returns)."""
    import apache_beam as beam

    from transforms.import_dataset import ImportLeRobotDatasets
    if started_at is not None and not config.started_at:
        config = dataclasses.replace(config, started_at=started_at)
    p = beam.Pipeline(options=options)
    _ = (p
         | "Datasets" >> beam.Create(list(config.targets))
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
    text = command_line.help_requested(argv)
    if text is not None:
        print(text)
        return 0
    stage = run_control.Stage()
    # A terminal that cannot be written (closed, a log on a full disk) loses the text, never the import.
    with console.kept_streams(), interrupts.handling():
        try:
            return _run(argv, wait=wait, verbosity=verbosity, stage=stage)
        except interrupts.Interrupted as ex:
            return run_control.stop_early(stage.phase, ex.signum)


def _run(argv: list[str], *, wait: bool, verbosity: int, stage: run_control.Stage) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.options import ImportOptions, RunOptions
    from transforms.output import writes

    options = PipelineOptions(argv)
    import_options = options.view_as(ImportOptions)
    runners.use_dask_runner(options)
    problem = runners.runner_problem(options)
    if problem:  # before any lease or request: Beam would say it only once the pipeline is submitted
        raise (console.UsageError if problem.usage else SystemExit)(f"error: {problem}")
    if runners.is_dry_run(options):
        return dry_run(options, import_options)
    from pipelines import progress
    local = progress.local_run(options)
    if local:
        from pipelines import local_runner
        local_runner.tune_local_runner()
    from transforms.base import run_limits
    limits = limits_from_options(import_options)
    run_limits.install(limits)  # for the command's own reads too (pins, listings of its targets)
    with run_limits.piece(limits, "check", "the datasets of the command line"):
        planned = run_targets(import_options, check=wait)
        if wait:  # before any lease: a refused run writes nothing
            from pipelines.output_checks import check_outputs
            check_outputs(planned, import_options.output, force=import_options.force)
    config = config_from_options(import_options, run_id=uuid.uuid4().hex, started_at=writes.now_iso(),
                                 targets=planned, limits=limits)
    left_out = report.left_out_lines(planned)
    for line in left_out:
        print(line)
    config, refused = run_control.safe_targets(config)
    for line in refused:
        print(line)
    if not config.targets:
        if left_out and not refused:
            print("error: no dataset to import (see above)")
        return 1
    if not wait:
        build_pipeline(options, config).run()
        return 0
    refused = refused or list(planned.refused)
    interrupts.checkpoint()
    stage.phase = "leases"
    with run_control.releasing(contextlib.ExitStack()) as stack:
        keepers, held = run_control.take_leases(config, stack, options.view_as(RunOptions).wait_for_lease)
        interrupts.checkpoint()
        for line in held:
            print(line)
        if not keepers:
            print("error: every output is being imported by another run; this run imports nothing "
                  "(--wait-for-lease SECONDS waits for them)")
            return 1
        targets = config.targets
        config = dataclasses.replace(config, targets=tuple(keepers))
        stage.phase = "import"
        try:
            with progress.showing(verbosity >= 0 and local):
                result = run_control.run_interruptibly(build_pipeline(options, config))
        except interrupts.Interrupted as ex:
            return run_control.stop_interrupted(config, ex.signum)
        except run_control.Stuck as ex:
            return run_control.stop_stuck(config, ex.error)
        except Exception as ex:  # noqa: BLE001 - a remote runner's submission: one line, not its traceback
            if local:
                raise
            from apache_beam.options.pipeline_options import StandardOptions
            print(f"error: the job could not be run on {options.view_as(StandardOptions).runner}: "
                  f"{runners.first_line(ex)}; check the project, region, temp_location and credentials "
                  "(gcloud auth application-default login)")
            return 1
        stage.phase = "finished"
        interrupts.checkpoint()
        outcomes: dict[str, str] = {}
        status = report.summarize(result, config, outcomes, metrics=verbosity >= 1)
        if planned.bulk:
            report.write_bulk_report(import_options.output, config, planned, targets, outcomes)
        lost = [keeper.lost for keeper in keepers.values() if keeper is not None and keeper.lost is not None]
        for ex in lost:  # another run took the output over while this one imported: its result is suspect
            print(f"error: {ex}; import that output again once the other run has finished")
        return 1 if lost or refused else status


def dry_run(options: PipelineOptions, import_options: ImportOptions) -> int:
    """`--dry_run`: build and translate the pipeline without running it. It takes no lease, checks no
    root and asks no credentials (nothing is submitted, so nothing waits on a metadata server)."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    from transforms.output import writes

    options.view_as(GoogleCloudOptions).no_auth = True
    config = config_from_options(import_options, run_id=uuid.uuid4().hex, started_at=writes.now_iso())
    build_pipeline(options, config).run()
    print(f"dry run: the pipeline over {len(config.targets)} dataset{'s' if len(config.targets) != 1 else ''} "
          "was built and not run; no lease taken, nothing written")
    return 0


if __name__ == "__main__":  # `python -m pipelines.import_lerobot ...`: the same command as `lerobot-import`
    from pipelines import cli
    cli.main()
