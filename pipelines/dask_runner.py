"""`--runner DaskRunner`: the import on a dask.distributed cluster, computing what the DirectRunner computes.

Beam's own DaskRunner (apache_beam.runners.dask, 2.77) translates a pipeline into Dask bags in a way that
loses work without an error (deploy/dask/BEAM_DASK_RUNNER_DEFECTS.md has a ten-line pipeline for each):

* a bundle's outputs are collected as plain values, so every consumer of a multi-output ParDo (the import's
  guarded steps, their dead letters) gets the union of all its outputs, and side inputs are the producer's
  whole output too;
* what a DoFn yields from `finish_bundle` is dropped (the import's part writer yields its bundle's last
  part there);
* only the graph's last leaf is computed, so any other dead-end branch never runs;
* `result.metrics()` raises, `Reshuffle` is an identity (one partition of up to 128 elements runs on one
  worker), and the short name `DaskRunner` is unknown to Beam's runner lookup.

This module keeps Beam's runner options (`--dask_client_address`, `--dask_npartitions`, ...) and Beam's
DoFnRunner, which runs each bundle exactly as the DirectRunner's evaluators do (setup, start_bundle,
process, finish_bundle with its outputs, teardown), and replaces the translation: one Dask bag per
PCollection (not per transform), each output of a ParDo selected by its tag, side inputs handed to every
bundle as the values of the PCollection they read, GroupByKey and Reshuffle as a real shuffle by a
deterministic hash of the key (Python's `hash` of a str differs between worker processes), every leaf
computed in one graph (so shared steps run once), and each bundle's counters returned beside its outputs.

Only the global window is supported (the import uses no other); any other windowing is refused when the
graph is built. The module is loaded for `--runner DaskRunner` only: the DirectRunner and Dataflow never
import it. It relies on Beam internals (DoFnRunner, the Dask options), so it refuses a Beam it was not
written for (`SUPPORTED_BEAM`), naming the version, instead of running on guesses.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
import zlib
from collections import defaultdict
from typing import Any, Iterable, Optional

import apache_beam as beam
from apache_beam.runners.common import Receiver

#: Beam versions whose internals (DoFnRunner, Receiver, DaskOptions, the runner API round trip) this module
#: was written and tested against.
SUPPORTED_BEAM = ("2.77.",)
#: The names `--runner` takes for this runner (Beam's own class path included: it would run Beam's runner).
NAMES = ("daskrunner", "dask", "apache_beam.runners.dask.dask_runner.daskrunner")
#: Where Beam's runner lookup finds this one.
RUNNER_PATH = "pipelines.dask_runner.DaskRunner"
#: Partitions of a Reshuffle's or GroupByKey's output per worker thread, when --dask_npartitions is not given:
#: two per thread, so the scheduler can balance elements of uneven cost (episodes files of unequal size)
#: while each step stays a few tasks (every task costs the scheduler a round trip).
PARTITIONS_PER_THREAD = 2
#: The loggers whose warnings on a worker come back to the command's own logging: the import's steps run
#: there, and what they warn of (a folder that cannot be listed, an old index that cannot be used) is the
#: user's to read, as a local run prints it.
FORWARDED_LOGGERS = ("transforms", "pipelines")

_LOG = logging.getLogger(__name__)
_METRICS = "__lerobot_dask_metrics__"


def names_dask(runner: Any) -> bool:
    """Whether a `--runner` value names the Dask runner (its short names, or Beam's class path)."""
    return isinstance(runner, str) and runner.lower() in NAMES


def check_beam() -> None:
    """Refuse a Beam this layer was not written for (SystemExit with one line naming both versions)."""
    if not beam.__version__.startswith(SUPPORTED_BEAM):
        raise SystemExit(f"error: --runner DaskRunner: this import's Dask support was written for apache-beam "
                         f"{', '.join(v + 'x' for v in SUPPORTED_BEAM)} and this install has {beam.__version__}; "
                         "install a supported apache-beam (pip install 'lerobot-beam-import[dask]') or run on "
                         "another runner")


def check_installed() -> Optional[str]:
    """Why the Dask runner cannot run here (its libraries missing), or None."""
    try:
        import dask.bag  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as ex:
        return (f"--runner DaskRunner needs dask and distributed ({ex}): pip install 'lerobot-beam-import[dask]' "
                "here and on every worker of the cluster")
    return None


try:
    from apache_beam.runners.dask.dask_runner import DaskOptions
    from apache_beam.runners.dask.dask_runner import DaskRunner as _BeamDaskRunner
except ImportError:  # pragma: no cover - apache-beam without its Dask module
    _BeamDaskRunner = beam.runners.runner.PipelineRunner
    DaskOptions = None


# ---- on the workers ------------------------------------------------------------------------------


class _Collect(Receiver):
    """Beam's Receiver for one output tag: (tag, windowed value) into the bundle's list."""

    def __init__(self, tag, out: list) -> None:
        super().__init__()
        self.tag, self.out = tag, out

    def receive(self, windowed_value) -> None:
        self.out.append((self.tag, windowed_value))

    def receive_batch(self, windowed_batch) -> None:  # pragma: no cover - the import yields no batches
        raise NotImplementedError("batched DoFns are not supported on the Dask runner")


class _Receivers(dict):
    def __init__(self, out: list) -> None:
        super().__init__()
        self._out = out

    def __missing__(self, tag):
        self[tag] = _Collect(tag, self._out)
        return self[tag]


def _run_bundle(items: Iterable, blob: bytes, *sides: list) -> list:
    """One bundle of a ParDo on a worker: Beam's DoFnRunner over the partition's elements, every output
    (finish_bundle's too) as (tag, windowed value), then the bundle's counters as one (_METRICS, dict)."""
    from apache_beam.internal import pickler
    from apache_beam.metrics.execution import MetricsContainer
    from apache_beam.runners.common import DoFnRunner
    from apache_beam.runners.worker import statesampler
    from apache_beam.transforms.sideinputs import SideInputMap
    from apache_beam.utils.counters import CounterFactory

    step, fn, args, kwargs, windowing, views, run_token = pickler.loads(blob)
    done = _done_event(run_token)
    if done is not None and done.is_set():
        raise LostResults(f"step {step}: a worker of the cluster was lost after this bundle had run, and Dask "
                          "would run it again over an output the run has changed since (its checks and plans "
                          "would disagree with what was written); the run stops here instead")
    side_maps = [SideInputMap(view_class, view_options, values)
                 for (view_class, view_options), values in zip(views, sides)]
    out: list = []
    container = MetricsContainer(step)
    sampler = statesampler.StateSampler(step, CounterFactory())
    previous = statesampler.get_current_tracker()
    statesampler.set_current_tracker(sampler)
    try:
        with sampler.scoped_state(step, "process", metrics_container=container):
            runner = DoFnRunner(fn, args, kwargs, side_maps, windowing, tagged_receivers=_Receivers(out),
                                step_name=step)
            runner.setup()
            runner.start()
            for item in items:
                runner.process(item)
            runner.finish()
            runner.teardown()
    finally:
        statesampler.set_current_tracker(previous)
    counters = {(key.step, key.metric.namespace, key.metric.name): value
                for key, value in container.get_cumulative().counters.items()}
    out.append((_METRICS, counters))
    if done is not None:
        done.set()
    return out


class LostResults(RuntimeError):
    """A bundle that had run was asked to run again (its results died with a worker)."""


def _done_event(run_token: str):
    """The cluster-wide flag "this bundle (the running task) has run", or None outside a Dask worker.

    Beam's model retries a bundle that failed, and so does this runner (a task that died with its worker
    runs again: its writes are idempotent). What it must not do is run again a bundle whose results were
    lost after they had been used: the import's steps read the output (the check step, the commit) that
    the run itself has changed since, so a second run of an early step would send later steps elements that
    contradict what was written (files counted twice, a manifest of 34 files for 24). Dask recomputes such
    lost results silently, so each bundle marks itself done on the scheduler and refuses a second run."""
    try:
        import distributed
        worker = distributed.get_worker()
    except (ImportError, ValueError):
        return None
    key = worker.get_current_task()
    return None if key is None else distributed.Event(f"{run_token}{key}")


def _select(bundle_outputs: Iterable, tag) -> list:
    return [value for t, value in bundle_outputs if t == tag]


def _values(items: Iterable) -> list:
    return list(items)


def _concat(lists: Iterable[list]) -> list:
    return [x for part in lists for x in part]


def _key_hash(coder, windowed_value) -> int:
    """A hash of the element's key that every worker process computes alike (Beam's deterministic coder)."""
    return zlib.crc32(coder.encode(windowed_value.value[0]))


def _split(items: Iterable, n: int, coder) -> list[list]:
    """A partition's elements in `n` buckets by the hash of their key (GroupByKey's shuffle)."""
    buckets: list[list] = [[] for _ in range(n)]
    for wv in items:
        buckets[_key_hash(coder, wv) % n].append(wv)
    return buckets


def _deal(items: Iterable, n: int, offset: int) -> list[list]:
    """A partition's elements dealt round-robin into `n` buckets (Reshuffle), starting at `offset`."""
    buckets: list[list] = [[] for _ in range(n)]
    for i, wv in enumerate(items):
        buckets[(i + offset) % n].append(wv)
    return buckets


def _gather(j: int, splits: Iterable[list]) -> list:
    return [wv for split in splits for wv in split[j]]


def _group(j: int, splits: Iterable[list]) -> list:
    """Output partition `j` of GroupByKey: (key, [values]) in the global window, keys in first-seen order."""
    from apache_beam.transforms.window import GlobalWindows

    groups: dict = {}
    for split in splits:
        for wv in split[j]:
            key, value = wv.value
            groups.setdefault(key, []).append(value)
    return [GlobalWindows.windowed_value((key, values)) for key, values in groups.items()]


def _count(items: Iterable) -> list:
    return [sum(1 for _ in items)]


def _merge_counters(bundles: Iterable) -> dict:
    total: dict = defaultdict(int)
    for counters in bundles:
        for key, value in counters.items():
            total[key] += value
    return dict(total)


# ---- on the client -------------------------------------------------------------------------------


class DaskMetrics(beam.metrics.metric.MetricResults):
    """The run's counters, summed over its bundles (committed and attempted alike: a bundle a worker lost
    and Dask ran again counts once, its result being the one kept)."""

    def __init__(self, counters: dict) -> None:
        self._counters = counters

    def query(self, filter=None):
        from apache_beam.metrics.execution import MetricKey, MetricResult
        from apache_beam.metrics.metricbase import MetricName

        counters = []
        for (step, namespace, name), value in sorted(self._counters.items()):
            key = MetricKey(step, MetricName(namespace, name))
            if self.matches(filter, key):
                counters.append(MetricResult(key, value, value))
        return {self.COUNTERS: counters, self.DISTRIBUTIONS: [], self.GAUGES: [], self.STRINGSETS: [],
                self.BOUNDED_TRIES: [], self.HISTOGRAMS: []}


class DaskRunResult(beam.runners.runner.PipelineResult):
    """A run submitted to the cluster: its leaves' futures and the one holding its counters."""

    def __init__(self, client, futures: list, metrics_future, keys: frozenset, own_client: bool,
                 dry_run: bool = False) -> None:
        from apache_beam.runners.runner import PipelineState

        super().__init__(PipelineState.DONE if dry_run else PipelineState.RUNNING)
        self._dry_run = dry_run
        self.client, self.futures, self._metrics_future = client, futures, metrics_future
        self.keys = keys  # every task of the run's graph: what `stop` waits for
        self._own_client = own_client
        self._counters: Optional[dict] = None

    def wait_until_finish(self, duration=None):
        import distributed
        from apache_beam.runners.runner import PipelineState

        if self._dry_run:
            self._counters = {}
            return self._state
        try:
            distributed.wait(self.futures + [self._metrics_future],
                             timeout=None if duration is None else duration / 1000)
            for future in self.futures:
                future.result()  # a task's exception is raised here, on the client
            self._counters = self._metrics_future.result()
            self._state = PipelineState.DONE
        except LostResults as ex:
            self._state = PipelineState.FAILED
            raise SystemExit(f"error: {ex}; the episodes files committed so far are kept and the manifest is not "
                             "updated; run the same command again to import the rest") from None
        except (distributed.KilledWorker, distributed.client.FutureCancelledError, OSError) as ex:
            # the cluster lost the run (workers died with its tasks again and again, the scheduler went
            # away): what committed is in the output's journal, which the next run folds in
            self._state = PipelineState.FAILED
            raise SystemExit(f"error: the Dask cluster could not finish the run ({type(ex).__name__}: {ex}); "
                             "the episodes files committed so far are kept and the manifest is not updated; run "
                             "the same command again to import the rest") from None
        except BaseException:
            self._state = PipelineState.FAILED
            raise
        finally:
            self._clear_flags()
            if self._state != PipelineState.RUNNING:
                self._stop_forwarding()
            if self._own_client and self._state != PipelineState.RUNNING:
                self.client.close()
        return self._state

    done_flags: list = []

    def _stop_forwarding(self) -> None:
        """Stop forwarding the workers' warnings (a client the caller keeps goes on without it)."""
        for name in FORWARDED_LOGGERS:
            try:
                self.client.unforward_logging(name)
            except Exception:  # noqa: BLE001 - the scheduler is gone: nothing is forwarded any more
                return

    def _clear_flags(self) -> None:
        """Remove the run's bundle flags from the scheduler (best effort: a scheduler gone has none)."""
        import distributed

        for name in self.done_flags:
            try:
                distributed.Event(name, client=self.client).clear()
            except Exception:  # noqa: BLE001 - the flags only guard this run, which is over
                return
        self.done_flags = []

    def cancel(self):
        from apache_beam.runners.runner import PipelineState

        self.client.cancel(self.futures + [self._metrics_future])
        self._state = PipelineState.CANCELLED
        return self._state

    def stop_remote_work(self, timeout: float) -> bool:
        """Cancel the run's tasks and wait up to `timeout` seconds for those already running on the
        workers to end (a thread cannot be stopped: a part being written finishes); True when none is
        left. An interrupted command records what was committed only after this."""
        import time

        if self._dry_run:
            return True
        self.cancel()
        deadline = time.monotonic() + timeout
        while True:
            try:
                running = {key for keys in self.client.processing().values() for key in keys} & self.keys
            except Exception:  # noqa: BLE001 - the scheduler is gone: nothing of the run runs any more
                return True
            if not running:
                self._clear_flags()
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def metrics(self):
        if self._counters is None:
            raise RuntimeError("the run's counters are known once it has finished (wait_until_finish)")
        return DaskMetrics(self._counters)


@dataclasses.dataclass
class _Translation:
    """The run's graph as it is built: one bag per PCollection, and every ParDo's counters."""

    client: Any
    npartitions: Optional[int]
    partition_size: Optional[int]
    spread: int  # partitions of a Reshuffle's or GroupByKey's output
    run_token: str = dataclasses.field(default_factory=lambda: f"lerobot-import-{uuid.uuid4().hex}-")
    bags: dict = dataclasses.field(default_factory=dict)  # PCollection -> dask bag of windowed values
    metrics: list = dataclasses.field(default_factory=list)
    consumed: set = dataclasses.field(default_factory=set)


class DaskRunner(_BeamDaskRunner):
    """Beam's DaskRunner with a translation that keeps every output, side input, finish_bundle output,
    leaf and counter, and spreads Reshuffle and GroupByKey over the cluster (see the module's doc)."""

    def run_pipeline(self, pipeline, options):
        check_beam()
        problem = check_installed()
        if problem:
            raise SystemExit(f"error: {problem}")
        import dask
        import distributed
        from apache_beam.pipeline import PipelineVisitor
        from apache_beam.runners.dask.overrides import dask_overrides

        dask_options = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
        npartitions = dask_options.pop("npartitions", None)
        partition_size = dask_options.pop("partition_size", None)
        try:
            client = distributed.get_client() if not dask_options.get("address") and _has_client() else None
        except ValueError:
            client = None
        own = client is None
        if client is None:
            try:
                client = distributed.Client(**dask_options)
            except OSError as ex:  # no scheduler at that address (or it did not answer in time)
                raise SystemExit(f"error: --runner DaskRunner: cannot reach the Dask scheduler at "
                                 f"{dask_options.get('address') or 'a new LocalCluster'} ({ex}); start the cluster "
                                 "or correct --dask_client_address") from None
        # Beam's overrides make Create, Reshuffle, Read, GroupByKey and Flatten leaves of their own; the
        # GroupByKey one expands into steps of Beam's DirectRunner, so it is not used.
        pipeline.replace_all([o for o in dask_overrides() if type(o).__name__ != "GroupByKeyOverride"])
        threads = sum(client.nthreads().values()) or 1
        state = _Translation(client, npartitions, partition_size, npartitions or PARTITIONS_PER_THREAD * threads)

        class Visitor(PipelineVisitor):
            def visit_transform(self, applied) -> None:
                _translate(applied, state)

        pipeline.visit(Visitor())
        leaves = [bag.map_partitions(_count) for pcoll, bag in state.bags.items() if pcoll not in state.consumed]
        counters = (dask.bag.concat(state.metrics).reduction(_values, _concat).apply(_merge_counters)
                    if state.metrics else dask.delayed(dict)())
        collections = leaves + [counters]
        keys = frozenset(k for c in collections for k in c.__dask_graph__().keys())
        if str(options.get_all_options().get("dry_run")).lower() in ("true", "1"):  # translated, not run
            if own:
                client.close()
            return DaskRunResult(client, [], None, keys, False, dry_run=True)
        for name in FORWARDED_LOGGERS:
            client.forward_logging(name, level=logging.WARNING)
        futures = client.compute(collections)
        result = DaskRunResult(client, list(futures[:-1]), futures[-1], keys, own)
        result.done_flags = [f"{state.run_token}{k}" for k in keys if str(k).startswith("('beam_")
                             or (isinstance(k, tuple) and str(k[0]).startswith("beam_"))]
        return result


def _has_client() -> bool:
    import distributed

    try:
        distributed.get_client()
        return True
    except ValueError:
        return False


def _translate(applied, state: _Translation) -> None:
    import dask.bag as db
    from apache_beam.internal import pickler
    from apache_beam.runners.dask import overrides
    from apache_beam.transforms.window import GlobalWindows

    transform = applied.transform
    inputs = [pc for pc in applied.inputs if isinstance(pc, beam.pvalue.PCollection)]
    for pc in inputs:
        state.consumed.add(pc)
    for pc in list(applied.outputs.values()):
        windowing = getattr(pc, "windowing", None)
        if windowing is not None and not isinstance(windowing.windowfn, GlobalWindows):
            raise NotImplementedError(f"{applied.full_label}: the Dask runner supports the global window only "
                                      f"(this step is windowed by {type(windowing.windowfn).__name__})")
    outputs = list(applied.outputs.values())
    if isinstance(transform, overrides._Create):
        items = [GlobalWindows.windowed_value(v) for v in transform.values]
        if state.partition_size:
            bag = db.from_sequence(items, partition_size=state.partition_size)
        else:  # an element a partition up to --dask_npartitions (or a few per worker thread)
            bag = db.from_sequence(items, npartitions=max(1, min(len(items), state.spread)))
        state.bags[outputs[0]] = bag
    elif isinstance(transform, overrides._Flatten):
        bags = [state.bags[pc] for pc in inputs]
        state.bags[outputs[0]] = db.concat(bags) if bags else db.from_sequence([], npartitions=1)
    elif isinstance(transform, overrides._Reshuffle):
        state.bags[outputs[0]] = _shuffle(state.bags[inputs[0]], state.spread, None)
    elif isinstance(transform, beam.GroupByKey):
        from apache_beam import coders

        coder = coders.registry.get_coder(Any).as_deterministic_coder(applied.full_label)
        state.bags[outputs[0]] = _shuffle(state.bags[inputs[0]], state.spread, coder)
    elif isinstance(transform, beam.ParDo):
        main = applied.main_inputs and next(iter(applied.main_inputs.values()))
        views = [(type(si), si._view_options()) for si in transform.side_inputs]
        blob = pickler.dumps((applied.full_label, transform.fn, transform.args, transform.kwargs,
                              main.windowing, views, state.run_token))
        sides = []
        for si in transform.side_inputs:
            state.consumed.add(si.pvalue)
            sides.append(state.bags[si.pvalue].reduction(_values, _concat))
        # the bundle tasks are named after their step, so the scheduler's task stream tells who ran what
        token = "beam_" + re.sub(r"[^A-Za-z0-9]+", "_", applied.full_label).strip("_")
        bundles = state.bags[main].map_partitions(_run_bundle, blob, *sides, token=token)
        state.metrics.append(bundles.map_partitions(_select, _METRICS))
        for tag, pc in applied.outputs.items():
            # the main output is the untagged one (the DoFn yields it without a TaggedOutput)
            wanted = None if tag is None or tag == "None" or tag == _main_tag(applied) else tag
            state.bags[pc] = bundles.map_partitions(_select, wanted)
    elif type(transform).__name__ == "Impulse" or isinstance(transform, overrides._Read):
        raise NotImplementedError(f"{applied.full_label}: {type(transform).__name__} is not supported on the "
                                  "Dask runner (Create its elements instead)")
    else:
        raise NotImplementedError(f"{applied.full_label}: {type(transform).__name__} is not supported on the "
                                  "Dask runner")


def _main_tag(applied) -> Optional[str]:
    """The tag of a ParDo's main output PCollection as the pipeline names it."""
    for tag, pc in applied.outputs.items():
        if pc.tag is None:
            return tag
    return None


def _shuffle(bag, n: int, coder):
    """`bag`'s elements in `n` new partitions: by the hash of their key, grouped (`coder` given), or dealt
    round-robin (Reshuffle). Every input partition is split once; each output partition gathers its piece
    of every split, so the work after it spreads over the cluster."""
    import dask
    import dask.bag as db

    parts = bag.to_delayed(optimize_graph=False)
    if coder is None:
        splits = [dask.delayed(_deal)(p, n, i) for i, p in enumerate(parts)]
        merge = _gather
    else:
        splits = [dask.delayed(_split)(p, n, coder) for p in parts]
        merge = _group
    # each output partition reads its bucket of every split (no task per bucket: a shuffle of n partitions is
    # 2n tasks, and the elements that cross it are small: paths, keys, plans)
    return db.from_delayed([dask.delayed(merge)(j, splits) for j in range(n)])
