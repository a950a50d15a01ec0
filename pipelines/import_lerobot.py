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
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING, Optional, Sequence

from pipelines import cli
from pipelines import interrupts
from pipelines import summary

if TYPE_CHECKING:  # imported where used: `--help` and `--version` load neither Beam nor pyarrow
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.options import ImportOptions
    from pipelines.targets import RunTargets
    from transforms import lease
    from transforms.messages import ImportConfig

_LOG = logging.getLogger("lerobot_import")


def run_targets(options: ImportOptions, *, check: bool = False) -> RunTargets:
    """The run's dataset roots resolved (lists and globs expanded), their outputs, and (`check`) the roots
    left out before anything is written (not datasets); SystemExit with one line when the run cannot start."""
    from pipelines.targets import resolve_run
    from transforms.errors import LeRobotImportError

    if not options.output:
        raise cli.UsageError("error: --output is required (see --help)")
    try:
        return resolve_run(options.dataset or [], options.datasets, options.output, check=check)
    except LeRobotImportError as ex:
        if ex.rule == "url":  # a URL no filesystem reads: the command line is wrong
            raise cli.UsageError(f"error: {ex}") from None
        raise SystemExit(f"error: {ex}") from None


def config_from_options(options: ImportOptions, *, run_id: str = "", started_at: str = "",
                        targets: Optional[RunTargets] = None, limits=None) -> ImportConfig:
    """The run's ImportConfig: dataset roots resolved (lists and globs expanded) and their outputs; `limits`
    the run's bounds when the caller has them already (else read from `options`)."""
    from transforms.messages import ImportConfig

    targets = (run_targets(options) if targets is None else targets).targets
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
    from transforms import run_limits
    limits = dataclasses.replace(limits or limits_from_options(options), run_id=run_id)
    run_limits.install(limits)  # the run's own: what the run learns once holds for it alone
    return ImportConfig(targets=targets, one_part=options.one_part,
                        data_span_limit=options.data_span_limit, inline_index=options.inline_index,
                        skip_videos=options.skip_videos, force=options.force, run_id=run_id,
                        started_at=started_at, strict=strict,
                        verify_output=options.verify_output, limits=limits)


def limits_from_options(options: ImportOptions):  # -> run_limits.RunLimits
    """The run's bounds (--phase_deadline, --hub_list_max_pages, --hub_list_max_items); a value that is none
    is a usage error."""
    from transforms import run_limits
    try:
        return run_limits.from_values(options.phase_deadline, options.hub_list_max_pages,
                                      options.hub_list_max_items)
    except ValueError as ex:
        raise cli.UsageError(f"error: {ex}") from None


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
    from pipelines import console

    stage = _Stage()
    # A terminal that cannot be written (closed, a log on a full disk) loses the text, never the import.
    with console.kept_streams(), interrupts.handling():
        try:
            return _run(argv, wait=wait, verbosity=verbosity, stage=stage)
        except Interrupted as ex:
            return stop_early(stage.phase, ex.signum)


@dataclasses.dataclass
class _Stage:
    """Where the command is, for the line an interrupt ends it with."""

    phase: str = "start"  # start, leases, import (answered by `stop_interrupted`), finished


def stop_early(phase: str, signum: int) -> int:
    """End a command interrupted outside its pipeline with one line; returns 128 + the signal number.
    The leases it took were released on the way out (`run`'s stack), and nothing was half-written: the
    pipeline had not started, or had ended and written its outputs."""
    interrupts.handled()
    name = interrupts.name(signum)
    if phase == "finished":
        print(f"interrupted by {name} after the import ended: its outputs are as summarized above, lease released")
    elif phase == "leases":
        print(f"interrupted by {name} while taking the outputs' leases: nothing was imported, every lease taken "
              "released; run the same command again to import")
    else:
        print(f"interrupted by {name} before the import started: nothing was written and no lease taken")
    return interrupts.status(signum)


def _run(argv: list[str], *, wait: bool, verbosity: int, stage: _Stage) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.options import ImportOptions, RunOptions
    from transforms.episode import output as sink

    options = PipelineOptions(argv)
    import_options = options.view_as(ImportOptions)
    problem = runner_problem(options)
    if problem:  # before any lease or request: Beam would say it only once the pipeline is submitted
        raise SystemExit(f"error: {problem}")
    if is_dry_run(options):
        return dry_run(options, import_options)
    from pipelines import progress
    local = progress.local_run(options)
    if local:
        from pipelines import local_runner
        local_runner.tune_local_runner()
    from transforms import run_limits
    limits = limits_from_options(import_options)
    run_limits.install(limits)  # for the command's own reads too (pins, listings of its targets)
    with run_limits.piece(limits, "check", "the datasets of the command line"):
        planned = run_targets(import_options, check=wait)
    config = config_from_options(import_options, run_id=uuid.uuid4().hex, started_at=sink.now_iso(),
                                 targets=planned, limits=limits)
    left_out = left_out_lines(planned)
    for line in left_out:
        print(line)
    config, refused = safe_targets(config)
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
    with _releasing(contextlib.ExitStack()) as stack:
        keepers, held = take_leases(config, stack, options.view_as(RunOptions).wait_for_lease)
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
                result = run_interruptibly(build_pipeline(options, config))
        except Interrupted as ex:
            return stop_interrupted(config, ex.signum)
        except Stuck as ex:
            return stop_stuck(config, ex.error)
        stage.phase = "finished"
        interrupts.checkpoint()
        outcomes: dict[str, str] = {}
        status = summarize(result, config, outcomes)
        if planned.bulk:
            write_bulk_report(import_options.output, config, planned, targets, outcomes)
        lost = [keeper.lost for keeper in keepers.values() if keeper is not None and keeper.lost is not None]
        for ex in lost:  # another run took the output over while this one imported: its result is suspect
            print(f"error: {ex}; import that output again once the other run has finished")
        return 1 if lost or refused else status


@contextlib.contextmanager
def _releasing(stack: contextlib.ExitStack):
    """`stack` (the leases' keepers), closed at the end of the block whatever ends it, and never cut by a
    signal: a lease half-released would keep the output held until it expires."""
    try:
        yield stack
    finally:
        with interrupts.deferred():
            stack.close()


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


DATAFLOW_NEEDS = (("project", "PROJECT"), ("region", "us-central1"), ("temp_location", "gs://BUCKET/tmp"))


def runner_problem(options: PipelineOptions) -> Optional[str]:
    """Why the runner options cannot run (an unknown runner; Dataflow without its project, region or
    temp_location), as one line; None when they can. Asks nothing of the network."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner
    if runner is None or not isinstance(runner, str):
        return None
    from apache_beam.runners.runner import create_runner
    try:
        name = type(create_runner(runner)).__name__
    except (ValueError, ImportError) as ex:
        return f"--runner {runner}: {str(ex).splitlines()[0] if str(ex) else 'unknown runner'}"
    if name != "DataflowRunner":
        return None
    import importlib.util
    if importlib.util.find_spec("apitools") is None:  # Beam's Dataflow client, in apache-beam[gcp] only
        return (f"--runner {runner} needs Beam's Google Cloud libraries, which this install leaves out: "
                "pip install 'lerobot-beam-import[dataflow]' (or apache-beam[gcp])")
    cloud = options.view_as(GoogleCloudOptions)
    values = {"project": cloud.project, "region": cloud.region,
              "temp_location": cloud.temp_location or cloud.staging_location}
    missing = [(k, example) for k, example in DATAFLOW_NEEDS if not values[k]]
    if not missing:
        return None
    return (f"--runner {runner} needs {', '.join('--' + k for k, _ in missing)} (e.g. "
            f"{' '.join(f'--{k} {example}' for k, example in missing)})")


def is_dry_run(options: PipelineOptions) -> bool:
    return str(options.get_all_options().get("dry_run")).lower() in ("true", "1")


def dry_run(options: PipelineOptions, import_options: ImportOptions) -> int:
    """`--dry_run`: build and translate the pipeline without running it. It takes no lease, checks no
    root and asks no credentials (nothing is submitted, so nothing waits on a metadata server)."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    from transforms.episode import output as sink

    options.view_as(GoogleCloudOptions).no_auth = True
    config = config_from_options(import_options, run_id=uuid.uuid4().hex, started_at=sink.now_iso())
    build_pipeline(options, config).run()
    print(f"dry run: the pipeline over {len(config.targets)} dataset{'s' if len(config.targets) != 1 else ''} "
          "was built and not run; no lease taken, nothing written")
    return 0


#: SIGINT or SIGTERM reached the command (raised in the main thread only).
Interrupted = interrupts.Interrupted


def run_interruptibly(pipeline: beam.Pipeline):  # -> its PipelineResult
    """Run `pipeline` to its end and return its result, or raise `Interrupted` at SIGINT/SIGTERM.

    The pipeline runs on a thread of its own and the main thread only waits, so a signal is met there,
    never inside a DoFn (where Beam would turn it into a step failure with a traceback). The pipeline's
    thread is a daemon: the command exits without waiting for it. Off the main thread (signals cannot be
    caught there) the pipeline simply runs."""
    from transforms import stopping

    stopping.reset()  # a run stopped earlier in this process leaves its threads waiting, not this one's
    if threading.current_thread() is not threading.main_thread():
        result = pipeline.run()
        result.wait_until_finish()
        return result
    box: dict = {}

    def target() -> None:
        try:
            result = pipeline.run()
            result.wait_until_finish()
            box["result"] = result
        except BaseException as ex:  # noqa: BLE001 - handed to the main thread, raised there
            box["error"] = ex

    from transforms import run_limits

    previous = {s: signal.signal(s, interrupts.handler) for s in interrupts.SIGNALS}
    since = time.monotonic()
    try:
        interrupts.checkpoint()  # a signal met before, whose exception something swallowed
        worker = threading.Thread(target=target, name="lerobot-import-pipeline", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.2)
            interrupts.checkpoint()
            stuck = run_limits.overdue(since=since)  # stuck inside one request, out of its checks
            if stuck is not None:
                for s in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(s, signal.SIG_IGN)
                raise Stuck(stuck)
    except (Interrupted, Stuck):
        # Beam removes the local temporary folder every Pipeline makes (empty for the import) only when
        # run() returns, and the command ends before the pipeline's thread does
        tempdir = getattr(pipeline, "local_tempdir", None)
        if tempdir:
            shutil.rmtree(tempdir, ignore_errors=True)
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if "error" in box:
        raise box["error"]
    return box["result"]


class Stuck(BaseException):
    """A piece of a run phase stayed past its deadline inside one request (`run_limits.overdue`)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def stop_stuck(config: ImportConfig, error: Exception) -> int:
    """End a run whose pipeline is stuck past a phase's deadline: as an interrupted run ends (what was
    committed kept and recorded, temporaries removed, the lease released by the caller's exit), with one
    line naming the phase, the piece and what it waited on. Returns 1."""
    from transforms.errors import LeRobotImportError

    interrupts.handled()  # the run is being stopped already: a signal now must not cut what follows
    kept = 0
    for root, out in config.targets:
        try:
            kept += _keep_committed(root, out, config.output_options(), config.run_id, "the phase deadline")
        except (OSError, LeRobotImportError, ValueError) as ex:
            print(f"{root}: could not record what was committed ({ex}); the next run imports it again -> {out}")
    noun = "episodes file" if kept == 1 else "episodes files"
    print(f"error: {error}; the run was stopped ({kept} {noun} committed before it kept and recorded, temporary "
          "files removed, lease released)")
    return 1


def stop_interrupted(config: ImportConfig, signum: int) -> int:
    """End an interrupted run: per output, the episodes files committed so far go into its manifest
    (status `interrupted`), temporary files are removed; one line says so. Returns 128 + the signal
    number (130 for SIGINT, 143 for SIGTERM); the caller's exit releases the leases."""
    from transforms import stopping
    from transforms.errors import LeRobotImportError

    interrupts.handled()
    name = signal.Signals(signum).name
    # The steps still run on their threads: the part or commit in progress ends, no other one starts, so
    # what is cleaned and recorded below is final.
    if not stopping.stop(STOP_WAIT_S):
        _LOG.warning("output work still in progress %.0f s after %s; cleaning up anyway", STOP_WAIT_S, name)
    options = config.output_options()
    kept = 0
    for root, out in config.targets:
        try:
            kept += _keep_committed(root, out, options, config.run_id, name)
        except (OSError, LeRobotImportError, ValueError) as ex:
            print(f"{root}: could not record what was committed ({ex}); the next run imports it again -> {out}")
    noun = "episodes file" if kept == 1 else "episodes files"
    print(f"interrupted by {name}: {kept} {noun} committed before it kept and recorded, temporary files "
          "removed, lease released; run the same command again to import the rest")
    return 128 + signum


def _keep_committed(root: str, out: str, options: dict, run_id: str, signal_name: str) -> int:
    from transforms import storage
    from transforms.episode import journal, output_state, paths
    from transforms.episode import output as sink

    records, uris = journal.read_records(out, options, dataset=root)
    for tmp in journal.leftover_temporaries(out):
        storage.remove(tmp)
    if not records:
        return 0
    previous = output_state.read_manifest(out).doc  # bounded and checked, as every read of it
    if not isinstance(previous, dict) or previous.get("options") != options:
        previous = None
    files = sum(r.get("kind") == "episodes_file" for r in records)
    doc = journal.fold(previous, records, dataset=root, options=options, run_id=run_id,
                        note=f"interrupted by {signal_name} at {sink.now_iso()}: the {files} episodes files it had "
                             "committed are recorded; the next run imports the rest")
    doc["finished_at"] = sink.now_iso()
    output_state.check_manifest(doc, out)  # every record was checked; the manifest as a whole is, as it is read
    storage.write_atomic(storage.join(out, paths.MANIFEST), sink.manifest_bytes(doc))
    journal.clear(out, uris)
    return files


#: How long an interrupted run waits for the part or commit in progress to end before cleaning up.
STOP_WAIT_S = 60.0
#: Exit statuses of a run ended by SIGINT (130) or SIGTERM (143).
INTERRUPTED_STATUS = (128 + signal.SIGINT, 128 + signal.SIGTERM)
BULK_REPORT = "bulk_report.json"


def write_bulk_report(output: str, config: ImportConfig, planned: RunTargets, targets,
                      outcomes: dict[str, str]) -> None:
    """OUT/bulk_report.json of a run over several datasets: each dataset's outcome (imported, failed,
    unchanged, held by another run, refused as no dataset) and the folders skipped as not datasets, so a
    scheduler reads one file instead of every dataset's manifest. Each run replaces it."""
    from transforms import storage
    from transforms.episode import output as sink

    rows = [{"dataset": root, "output": out, "outcome": outcomes.get(root, "held")} for root, out in targets]
    rows += [{"dataset": root, "output": out, "outcome": "refused", "reason": why}
             for root, out, why in planned.refused]
    doc = {"run_id": config.run_id, "started_at": config.started_at, "finished_at": sink.now_iso(),
           "datasets": sorted(rows, key=lambda r: r["dataset"]), "not_datasets": list(planned.not_datasets)}
    try:
        storage.write_atomic(storage.join(storage.normalize_root(output), BULK_REPORT),
                             (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    except OSError as ex:  # the datasets' own outputs are written: the report only sums them up
        print(f"warning: could not write {BULK_REPORT} under {output}: {ex}")


def left_out_lines(planned: RunTargets) -> list[str]:
    """One line per root the run leaves out before writing anything: a named root that is not a dataset
    (a failure of the run), a folder a glob matched that holds no meta/info.json (a note)."""
    lines = [f"{root}: FAILED - {why} (nothing written to {out})" for root, out, why in planned.refused]
    lines += [f"{folder}: skipped - not a dataset (no meta/info.json)" for folder in planned.not_datasets]
    return lines


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
        interrupts.checkpoint()
        if not lease.supported(out):  # e.g. an fsspec filesystem with no conditional create
            _LOG.warning("%s: this storage offers no lease, so runs on this output are not guarded", out)
            keepers[(root, out)] = None
            continue
        # A lease created is handed to its keeper (whose exit releases it) before a signal is raised; the
        # wait for a held lease ends at a signal.
        with interrupts.deferred():
            try:
                got = lease.acquire(out, run_id=config.run_id, job=os.environ.get("LEROBOT_IMPORT_JOB", ""),
                                    wait_seconds=max(0.0, deadline - time.monotonic()), sleep=interrupts.sleep)
            except LeRobotImportError as ex:  # a lease that is no lease, a full disk, a read-only output
                skipped.append(f"{root}: error: {ex} -> {out}")
                continue
            except lease.LeaseHeld as ex:
                h = ex.holder
                skipped.append(f"{root}: skipped - being imported by run {h.run_id} on host {h.host} (pid "
                               f"{h.pid}), lease expires at {_iso(h.expires_at)} -> {out}")
                continue
            keepers[(root, out)] = stack.enter_context(lease.LeaseKeeper(got))
        if got.took_over is not None:
            print(f"{root}: {got.takeover_message()}")
    return keepers, skipped


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat(timespec="seconds")


def summarize(result, config: ImportConfig, outcomes: Optional[dict[str, str]] = None) -> int:
    """Print each dataset's outcome (a failed one's findings grouped by rule, `pipelines.summary`) and the
    run's counters; 1 when any dataset failed. `outcomes` is filled in: root -> imported, failed, unchanged."""
    from apache_beam.metrics.metric import MetricsFilter

    from transforms import progress, storage
    from transforms.episode import output_state
    from transforms.import_dataset import NAMESPACE
    counters: dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        # one counter per step that counts it (hub_retries in any step that reads): the run's total is the sum
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + c.committed
    outcomes = {} if outcomes is None else outcomes
    status = shown = 0
    unfinished = progress.unfinished(config.run_id)
    for root, out in config.targets:
        if root in unfinished or (counters.get("datasets_unfinished") and len(config.targets) == 1):
            why = unfinished.get(root) or "its manifest could not be written (see the run's log)"
            print(f"{root}: FAILED - {why} (manifest.json and errors.jsonl left as the last run wrote them) -> {out}")
            status, outcomes[root] = 1, "failed"
            continue
        doc = output_state.read_manifest(out).doc
        if doc is None:
            print(f"{root}: FAILED - no manifest was written -> {out}")
            status, outcomes[root] = 1, "failed"
            continue
        if doc.get("run_id") != config.run_id:
            print(f"{root}: skipped - unchanged since its import of {doc.get('finished_at')} (--force redoes it)")
            outcomes[root] = "unchanged"
            continue
        print(f"{root}: {summary_line(doc)} -> {out}")
        outcomes[root] = doc["status"]
        found = quality_line(doc)
        if found:
            print(f"  {found}: {storage.join(out, 'quality')}")
        if doc["status"] != "imported":
            status = 1
            errors_uri = storage.join(out, "errors.jsonl")
            if shown < summary.MAX_DATASETS:
                shown += 1
                for line in summary.findings_lines(summary.parse_errors(_read_errors(errors_uri)), errors_uri):
                    print(line)
            else:
                print(f"  errors: {errors_uri}")
        if shown <= summary.MAX_DATASETS:
            for note in (doc.get("notes") or [])[:summary.MAX_RULES]:
                print(f"  note: {note}")
    if counters:
        print("metrics: " + ", ".join(f"{k}={v}" for k, v in sorted(counters.items())))
    return status


def _read_errors(uri: str) -> Optional[bytes]:
    """errors.jsonl for the terminal summary (None when it cannot be read: the summary says where it is)."""
    from transforms import storage
    from transforms.errors import LeRobotImportError

    try:  # bounded, a regular file only (a FIFO or a 1 GiB file there is no errors.jsonl an import wrote)
        return storage.read_state_file(uri, what="errors file", file="errors.jsonl", max_bytes=MAX_ERRORS_READ)
    except (OSError, LeRobotImportError):
        return None


#: The terminal summary reads errors.jsonl up to this size (about 100,000 rows); a larger one is named only.
MAX_ERRORS_READ = 64 << 20


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
    """The `lerobot-import` command (`pipelines.cli.main`: an import, or its render, verify and plan).

    Without `argv` it is the process's own command (the console script, `python -m`): the process ends
    as soon as the command has (`cli.end_process`)."""
    if argv is not None:
        cli.main(argv)
        return
    from pipelines import local_runner
    local_runner.keep_beam_local(sys.argv[1:])
    try:
        cli.main()
    except SystemExit as ex:
        cli.end_process(ex.code)


if __name__ == "__main__":
    main()
