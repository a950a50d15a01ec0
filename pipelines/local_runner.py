"""What a local run is tuned with: fixed costs of Beam's in-process runner that a run of a few seconds pays.

An import of a LeRobot-shaped dataset of 2,000 episodes takes a few seconds on the DirectRunner, and
Beam's own fixed costs were a quarter of it (tests/bench/bench_real_scale.py, README "Real scale"):

* `import apache_beam` loads Beam's Google Cloud Storage client (`apache_beam.io.gcp.gcsio`) whenever
  google-cloud-storage is importable, which gcsfs makes it: Google's storage, auth and crypto libraries,
  ~0.15 s of every run. The import reads and writes gs:// through fsspec (gcsfs) and never through Beam's
  FileSystems, so the command's own local run keeps Beam from loading it (`keep_beam_local`).
* Each bundle ends by stopping Beam's state sampler, whose thread sleeps up to its sampling period
  (200 ms) between samples: a stage waits for that sleep to end, up to 0.2 s a stage, ~0.3 s a run.
  The local runner samples every 20 ms instead.
* Beam asks every DoFn, several times a stage, for its state and timer specs by building a signature
  of each of its methods (`inspect.signature`, ~30 methods a DoFn): ~5,000 signatures and ~0.4 s a run
  for a result that is a property of the DoFn's class. It is kept per class.

Dataflow's workers pay none of these in a way that shows (long bundles, one import per worker), and
none of them changes what a pipeline computes: `tune_local_runner` is applied for local runs only,
and each tune is skipped when the Beam installed is not the one it was written for (it then costs
what it cost before, nothing breaks).
"""

from __future__ import annotations

import functools
import sys
import types
from typing import Sequence

__all__ = ["keep_beam_local", "tune_local_runner", "SAMPLING_PERIOD_MS"]

#: The state sampler's period in a local run (Beam's default: 200 ms).
SAMPLING_PERIOD_MS = 20

#: Beam's Google Cloud Storage modules, which `import apache_beam` loads when it can.
_BEAM_GCS_MODULES = ("apache_beam.io.gcp.gcsio", "apache_beam.io.gcp.gcsfilesystem")

_TUNED = False


def names_local_runner(argv: Sequence[str]) -> bool:
    """The command line runs the pipeline in this process (no --runner, or the DirectRunner's names)."""
    runner = None
    for i, arg in enumerate(argv):
        if arg.startswith("--runner="):
            runner = arg.split("=", 1)[1]
        elif arg == "--runner" and i + 1 < len(argv):
            runner = argv[i + 1]
    return runner is None or runner.lower() in ("direct", "directrunner", "switchingdirectrunner")


def keep_beam_local(argv: Sequence[str]) -> bool:
    """Before Beam is first imported by the process's own command: when it runs locally, keep Beam from
    loading its Google Cloud Storage client (Beam then registers no gs:// FileSystem, which the import
    never uses). Returns whether it did; a process that imported Beam already is left as it is."""
    if "apache_beam" in sys.modules or not names_local_runner(argv):
        return False
    for name in _BEAM_GCS_MODULES:
        sys.modules.setdefault(name, None)  # `import` of a None entry raises ImportError, which Beam expects
    return True


def tune_local_runner() -> None:
    """Install the local runner's tunes (once a process; Beam must be importable)."""
    global _TUNED
    if _TUNED:
        return
    _TUNED = True
    _sample_less_often()
    _keep_dofn_specs()


def _sample_less_often() -> None:
    try:
        from apache_beam.runners.worker import statesampler
        base = statesampler.StateSampler
        if not isinstance(base, type) or getattr(base, "_lerobot_tuned", False):
            return
    except (ImportError, AttributeError):  # pragma: no cover - another Beam
        return

    class StateSampler(base):
        _lerobot_tuned = True

        def __init__(self, prefix, counter_factory, sampling_period_ms=SAMPLING_PERIOD_MS):
            super().__init__(prefix, counter_factory, sampling_period_ms=min(sampling_period_ms, SAMPLING_PERIOD_MS))

    StateSampler.__qualname__ = base.__qualname__
    statesampler.StateSampler = StateSampler


def _keep_dofn_specs() -> None:
    try:
        from apache_beam.transforms import userstate
        original = userstate.get_dofn_specs
    except (ImportError, AttributeError):  # pragma: no cover - another Beam
        return
    if getattr(original, "_lerobot_tuned", False):
        return
    cache: dict[type, tuple[frozenset, frozenset]] = {}

    @functools.wraps(original)
    def get_dofn_specs(dofn):
        # The specs are read off the methods' default arguments, which belong to the class; an
        # instance holding a bound method of its own (beam.Map(obj.method)) is asked every time.
        if any(isinstance(v, types.MethodType) for v in getattr(dofn, "__dict__", {}).values()):
            return original(dofn)
        key = type(dofn)
        if key not in cache:
            states, timers = original(dofn)
            cache[key] = (frozenset(states), frozenset(timers))
        states, timers = cache[key]
        return set(states), set(timers)  # callers get sets of their own, as from Beam

    get_dofn_specs._lerobot_tuned = True
    userstate.get_dofn_specs = get_dofn_specs
