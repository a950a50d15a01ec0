"""Run control of an import: the leases on its outputs, and how a run ends early.

A run takes a lease on each output before it writes (`take_leases`), so two runs never import into one
output at once. It runs its pipeline on a thread of its own so that Ctrl-C or SIGTERM is met in the main
thread (`run_interruptibly`), never inside a step; an interrupted or stuck run keeps what it committed,
records it in the manifest, removes its temporaries and releases its leases (`stop_interrupted`,
`stop_stuck`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import shutil
import signal
import threading
import time
from typing import TYPE_CHECKING, Optional

from pipelines import interrupts

if TYPE_CHECKING:
    import apache_beam as beam

    from transforms.work.messages import ImportConfig
    from transforms.output import lease

_LOG = logging.getLogger("lerobot_import")


def safe_targets(config: ImportConfig) -> tuple[ImportConfig, list[str]]:
    """The run without the outputs whose own state could turn the import against the user (a managed
    folder or file that is a symlink or not regular, an output that is a file or read-only), and one
    "error" line per output left out: nothing of those is written, leased or deleted."""
    from transforms.output import lease
    from transforms.output import safety
    from transforms.base.errors import LeRobotImportError

    kept, refused = [], []
    for root, out in config.targets:
        try:
            safety.check_output(out)
            if lease.supported(out):
                lease.read_lease(out)  # a lease no run of this importer wrote (absurd values): named, not waited on
        except LeRobotImportError as ex:
            refused.append(f"{root}: error: {ex} -> {out}")
            continue
        kept.append((root, out))
    return dataclasses.replace(config, targets=tuple(kept)), refused


@dataclasses.dataclass
class Stage:
    """Where the command is, for the line an interrupt ends it with."""

    phase: str = "start"  # start, leases, import (answered by `stop_interrupted`), finished


def stop_early(phase: str, signum: int) -> int:
    """End a command interrupted outside its pipeline with one line; returns 128 + the signal number.
    The leases it took were released on the way out (`releasing`), and nothing was half-written: the
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


@contextlib.contextmanager
def releasing(stack: contextlib.ExitStack):
    """`stack` (the leases' keepers), closed at the end of the block whatever ends it, and never cut by a
    signal: a lease half-released would keep the output held until it expires."""
    try:
        yield stack
    finally:
        with interrupts.deferred():
            stack.close()


def run_interruptibly(pipeline: beam.Pipeline):  # -> its PipelineResult
    """Run `pipeline` to its end and return its result, or raise `Interrupted` at SIGINT/SIGTERM.

    The pipeline runs on a thread of its own and the main thread only waits, so a signal is met there,
    never inside a DoFn (where Beam would turn it into a step failure with a traceback). The pipeline's
    thread is a daemon: the command exits without waiting for it. Off the main thread (signals cannot be
    caught there) the pipeline simply runs."""
    from transforms.base import stopping

    stopping.reset()  # a run stopped earlier in this process leaves its threads waiting, not this one's
    if threading.current_thread() is not threading.main_thread():
        result = pipeline.run()
        result.wait_until_finish()
        return result
    box: dict = {}

    def target() -> None:
        try:
            result = box["running"] = pipeline.run()
            result.wait_until_finish()
            box["result"] = result
        except BaseException as ex:  # noqa: BLE001 - handed to the main thread, raised there
            box["error"] = ex

    from transforms.base import run_limits

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
                for s in interrupts.SIGNALS:
                    signal.signal(s, signal.SIG_IGN)
                raise Stuck(stuck)
    except (interrupts.Interrupted, Stuck):
        # A run on a cluster (the Dask runner) goes on there: its tasks are cancelled and those already
        # running waited for, so what the command then records is final, as `stopping` makes it locally
        stop_remote = getattr(box.get("running"), "stop_remote_work", None)
        if stop_remote is not None and not stop_remote(STOP_WAIT_S):
            _LOG.warning("tasks of the run still running on the cluster %.0f s after the stop; recording "
                         "what was committed anyway", STOP_WAIT_S)
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
    from transforms.base.errors import LeRobotImportError

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
    from transforms.base import stopping
    from transforms.base.errors import LeRobotImportError

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
    from transforms.base import storage
    from transforms.output import journal, safety, paths
    from transforms.output import writes

    records, uris = journal.read_records(out, options, dataset=root)
    for tmp in journal.leftover_temporaries(out):
        storage.remove(tmp)
    if not records:
        return 0
    previous = safety.read_manifest(out).doc  # bounded and checked, as every read of it
    if not isinstance(previous, dict) or previous.get("options") != options:
        previous = None
    files = sum(r.get("kind") == "episodes_file" for r in records)
    doc = journal.fold(previous, records, dataset=root, options=options, run_id=run_id,
                        note=f"interrupted by {signal_name} at {writes.now_iso()}: the {files} episodes files it had "
                             "committed are recorded; the next run imports the rest")
    doc["finished_at"] = writes.now_iso()
    safety.check_manifest(doc, out)  # every record was checked; the manifest as a whole is, as it is read
    storage.write_atomic(storage.join(out, paths.MANIFEST), writes.manifest_bytes(doc))
    journal.clear(out, uris)
    return files


#: How long an interrupted run waits for the part or commit in progress to end before cleaning up.
STOP_WAIT_S = 60.0



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
    from transforms.output import lease
    from transforms.base.errors import LeRobotImportError

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
