"""The shape of a step's body that counts: made with the run's configuration and the counters its DoFn made
once (in a pipeline Beam's counters; in a test any objects with `inc(n)`)."""

from __future__ import annotations

from typing import Mapping

from transforms.work.messages import ImportConfig


class Counted:
    """A step's body: `_config`, and `_counters` holding one object with `inc(n)` per name of `COUNTERS`."""

    #: The names of what the body counts.
    COUNTERS: tuple[str, ...] = ()

    def __init__(self, config: ImportConfig, counters: Mapping) -> None:
        missing = [name for name in self.COUNTERS if name not in counters]
        if missing:
            raise ValueError(f"{type(self).__name__} counts {', '.join(missing)}: give a counter for each")
        self._config = config
        self._counters = counters
