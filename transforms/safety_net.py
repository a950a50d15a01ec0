"""The shape every import step shares: the run's configuration, the safety net it wears, the run's counters.

Every expected failure is a rule already (a `LeRobotImportError`, turned into a record by the step
that met it). An unexpected exception (a bug, or a library failing in a way no rule foresaw) would
stop the whole run; instead each step runs its DoFn under Beam's exception handling and turns the
element it could not process into the same kind of record, with rule `internal`, so the run goes on
and the dataset still gets its errors.jsonl and manifest. (Beam's DirectRunner runs pipelines that
use this guard on the FnApiRunner, never on Prism.)
"""

from __future__ import annotations

import functools
from typing import Callable

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.typehints import Any

from transforms.base import run_limits

#: The namespace of the import's Beam counters (episodes, frames, bytes read, errors, ...).
NAMESPACE = "lerobot_import"
#: The output that holds (element, exc_info) for each element whose processing raised.
BAD = "bad"


class ImportStep(beam.PTransform):
    """A composite step of the import, made with the run's configuration (`self._config`)."""

    def __init__(self, config) -> None:  # an ImportConfig
        super().__init__()
        self._config = config


class ImportDoFn(beam.DoFn):
    """A DoFn of the import, made with the run's configuration (`self._config`, which `in_phase` reads)."""

    def __init__(self, config) -> None:  # an ImportConfig
        self._config = config


def counter(name: str):
    """A counter of the import's namespace; DoFns create theirs once, in `setup`."""
    return Metrics.counter(NAMESPACE, name)


def counters(names) -> dict:
    """The counters of the import's namespace named `names`, by name (what a step's body counts)."""
    return {name: counter(name) for name in names}


def guarded(dofn: beam.DoFn, *tags: str, main: str, **side_inputs):
    """ParDo(dofn) with its main output `main`, its tagged outputs `tags`, and `bad`; `side_inputs` are
    passed to its `process` by name.

    The output types are declared (as Any: the elements are pickled records either way) so Beam knows
    every tag the DoFn yields."""
    pardo = beam.ParDo(dofn, **side_inputs).with_output_types(Any, **{tag: Any for tag in tags})
    return pardo.with_outputs(*tags, main=main).with_exception_handling(dead_letter_tag=BAD)


def in_phase(phase: str, describe: Callable[[Any], str]):
    """Make a DoFn's `process` one piece of run phase `phase` (`transforms.base.run_limits`): every read it
    makes checks the phase's deadline (the DoFn's `_config.limits`), and one past it raises rule
    `deadline`, which the step records as it records any rule. `describe(element)` names the piece
    ("episodes file X of dataset D"). The piece's outputs are handed on once it ends, so the steps Beam
    runs on them in the same thread never count against its deadline."""
    def decorate(process):
        @functools.wraps(process)
        def wrapped(self, element, *args, **kwargs):
            with run_limits.piece(self._config.limits, phase, describe(element)):
                outputs = list(process(self, element, *args, **kwargs) or ())
            yield from outputs
        return wrapped
    return decorate
