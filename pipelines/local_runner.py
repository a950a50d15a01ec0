"""What a local run is tuned with: fixed costs of Beam's in-process runner that a run of a few seconds pays.

An import of a LeRobot-shaped dataset of 2,000 episodes takes a few seconds on the DirectRunner, and
Beam's own fixed costs were a quarter of it (tests/bench/bench_real_scale.py, README "Real scale"):

* `import apache_beam` loads Beam's BigQuery and Google Cloud Storage modules (`apache_beam.io.gcp.bigquery`,
  `apache_beam.io.gcp.gcsio`) whenever their libraries are importable, which gcsfs makes them: requests,
  Google's storage, auth and crypto libraries, ~0.2 s of every run. The import reads and writes gs://
  through fsspec (gcsfs) and never through Beam's IOs or FileSystems, so the command's own local run keeps
  Beam from loading them (`keep_beam_local`), and MongoDB's client for Beam's MongoDB IO too (~40 ms).
* Each bundle ends by stopping Beam's state sampler, whose thread sleeps up to its sampling period
  (200 ms) between samples: a stage waits for that sleep to end, up to 0.2 s a stage, ~0.3 s a run.
  The local runner samples every 20 ms instead.
* Beam asks every DoFn, several times a stage, for its state and timer specs by building a signature
  of each of its methods (`inspect.signature`, ~30 methods a DoFn): ~5,000 signatures and ~0.4 s a run
  for a result that is a property of the DoFn's class. It is kept per class.
* `PipelineOptions.view_as(cls)` builds an argparse parser of `cls`'s options and parses the command line
  again at every call, and Beam calls it ~300 times while it builds and translates the pipeline (for its
  type-check settings, per transform): ~0.2 s. A view holds no state of its own (its values live in the
  options' shared dict), so each options object keeps its view per class.

Dataflow's workers pay none of these in a way that shows (long bundles, one import per worker), and
none of them changes what a pipeline computes: `tune_local_runner` is applied for local runs only,
and each tune is skipped when the Beam installed is not the one it was written for (it then costs
what it cost before, nothing breaks).
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import types
import weakref
from typing import Sequence

__all__ = ["keep_beam_local", "names_local_runner", "tune_local_runner", "SAMPLING_PERIOD_MS", "SUBCOMMANDS"]

#: The state sampler's period in a local run (Beam's default: 200 ms).
SAMPLING_PERIOD_MS = 20

#: Beam's Google Cloud modules that `import apache_beam` loads when it can (`apache_beam.io` tries them in
#: one block, BigQuery's first; the GCS FileSystem is tried on its own by `apache_beam.io.filesystems`).
_BEAM_GCP_MODULES = ("apache_beam.io.gcp.bigquery", "apache_beam.io.gcp.gcsio", "apache_beam.io.gcp.gcsfilesystem")
#: MongoDB's client, which `import apache_beam` loads for its MongoDB IO whenever it is installed (~40 ms; the
#: IO imports it in a try block and, without it, logs one warning at its own logger, shown at -v).
_BEAM_MONGODB_MODULES = ("pymongo", "bson")

_TUNED = False


def names_local_runner(argv: Sequence[str]) -> bool:
    """The command line runs the pipeline in this process (no --runner, or the DirectRunner's names)."""
    runner = None
    for i, arg in enumerate(argv):
        if arg.startswith("--runner="):
            runner = arg.split("=", 1)[1]
        elif arg == "--runner" and i + 1 < len(argv):
            runner = argv[i + 1]
    return runner is None or runner.lower() in ("direct", "directrunner", "switchingdirectrunner", "fnapirunner")


#: The command's subcommands: `render` writes its samples through Beam's IOs (a gs:// output needs Beam's
#: GCS FileSystem), so only the import itself is kept from loading them.
SUBCOMMANDS = ("render", "verify", "plan", "check")


def keep_beam_local(argv: Sequence[str]) -> bool:
    """Before Beam is first imported by the process's own command: when it is an import that runs locally,
    keep Beam from loading its BigQuery and Google Cloud Storage modules (Beam then registers no gs://
    FileSystem, which the import never uses) and MongoDB's client. Returns whether it did; a subcommand,
    another runner or a process that imported Beam already is left as it is.

    Args:
        argv: the command's arguments (without the program name)."""
    command = [a for a in argv if a not in ("-q", "--quiet", "-v", "--verbose") and not a.startswith("-vv")]
    if "apache_beam" in sys.modules or command[:1] and command[0] in SUBCOMMANDS or not names_local_runner(argv):
        return False
    for name in _BEAM_GCP_MODULES + _BEAM_MONGODB_MODULES:
        sys.modules.setdefault(name, None)  # `import` of a None entry raises ImportError, which Beam expects
    # Beam's MongoDB IO then says it found no compatible bson package, which is not so (it was kept out here)
    logging.getLogger("apache_beam.io.mongodbio").setLevel(logging.ERROR)
    return True


def tune_local_runner() -> None:
    """Install the local runner's tunes (once a process; Beam must be importable)."""
    global _TUNED
    if _TUNED:
        return
    _TUNED = True
    _sample_less_often()
    _keep_dofn_specs()
    _keep_option_views()


def _untuned(module: str, owner: str, name: str):
    """(the object holding Beam's `name`, its value), `owner` being `module` itself ("") or a class in it; None
    when this Beam has no such thing (then nothing is tuned) or it is tuned already."""
    try:
        holder = importlib.import_module(module)
        holder = getattr(holder, owner) if owner else holder
        value = getattr(holder, name)
    except (ImportError, AttributeError):  # pragma: no cover - another Beam
        return None
    return None if getattr(value, "_lerobot_tuned", False) else (holder, value)


def _sample_less_often() -> None:
    found = _untuned("apache_beam.runners.worker.statesampler", "", "StateSampler")
    if found is None or not isinstance(found[1], type):
        return
    statesampler, base = found

    class StateSampler(base):
        _lerobot_tuned = True

        def __init__(self, prefix, counter_factory, sampling_period_ms=SAMPLING_PERIOD_MS):
            super().__init__(prefix, counter_factory, sampling_period_ms=min(sampling_period_ms, SAMPLING_PERIOD_MS))

    StateSampler.__qualname__ = base.__qualname__
    statesampler.StateSampler = StateSampler


def _keep_dofn_specs() -> None:
    found = _untuned("apache_beam.transforms.userstate", "", "get_dofn_specs")
    if found is None:
        return
    userstate, original = found
    cache: dict[tuple, tuple[frozenset, frozenset]] = {}

    @functools.wraps(original)
    def get_dofn_specs(dofn):
        # The specs are read off the methods' default arguments, which belong to the class. An instance
        # may hold methods of its own: one of its class's functions bound to itself (Beam's exception
        # handling wrapper sets `process` so) is part of the key; anything else (beam.Map(obj.method),
        # a function made per instance) is asked every time.
        cls = type(dofn)
        own = []
        for name, value in getattr(dofn, "__dict__", {}).items():
            if isinstance(value, types.MethodType):
                if value.__self__ is not dofn or value.__func__ not in _class_functions(cls):
                    return original(dofn)
                own.append((name, value.__func__))
        key = (cls, tuple(sorted(own, key=lambda item: item[0])))
        if key not in cache:
            states, timers = original(dofn)
            cache[key] = (frozenset(states), frozenset(timers))
        states, timers = cache[key]
        return set(states), set(timers)  # callers get sets of their own, as from Beam

    get_dofn_specs._lerobot_tuned = True
    userstate.get_dofn_specs = get_dofn_specs


@functools.lru_cache(maxsize=None)
def _class_functions(cls: type) -> frozenset:
    """The functions defined by `cls` and its bases."""
    return frozenset(v for klass in cls.__mro__ for v in vars(klass).values() if isinstance(v, types.FunctionType))


def _keep_option_views() -> None:
    found = _untuned("apache_beam.options.pipeline_options", "PipelineOptions", "view_as")
    if found is None:
        return
    options_class, original = found
    views: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    @functools.wraps(original)
    def view_as(self, cls):
        try:
            per_class = views.setdefault(self, {})
        except TypeError:  # pragma: no cover - an options object that takes no weak reference
            return original(self, cls)
        view = per_class.get(cls)
        # A view built from other flags (Beam replaces `_flags` when it parses the options again) or over
        # another dict of values is built anew.
        if view is None or view._flags is not self._flags or view._all_options is not self._all_options:
            view = per_class[cls] = original(self, cls)
        return view

    view_as._lerobot_tuned = True
    options_class.view_as = view_as
