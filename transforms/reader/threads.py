"""How many threads decode an item's cameras, chosen by timing the items themselves.

Decoding an item's cameras in two threads at once cuts its wall time (by up to half) when the process gets a
second core, and costs about a tenth more when it does not: the threads' CPU time grows, and an item waits for its
slowest camera while the other thread is descheduled. Neither the CPU count nor the load average says which case
holds (the load average lags by a minute and counts the reader's own threads), so `ThreadChoice` measures: it
times items with each setting in turn, alternating so that a change of load falls on both, keeps the faster for a
while, then times both again. An item is timed per sample it decoded: how many samples a random item needs (one
per camera, or a GOP's worth when its frame sits deep in a GOP) varies more than the settings do.
"""

from __future__ import annotations

__all__ = ["ThreadChoice"]


class ThreadChoice:
    """The decode threads of a process's next item: 1 or `most`, whichever gave the shorter items lately.

    Args:
        most: the most threads worth using (one per camera, up to the CPUs the process may use).
        probe: items timed with each setting per round of timing.
        keep: items served with the faster setting before both are timed again.
    """

    def __init__(self, most: int, *, probe: int = 12, keep: int = 600) -> None:
        self.most = max(1, int(most))
        self.probe = max(1, int(probe))
        self.keep = max(0, int(keep))
        #: The setting the last round of timing chose (`most` until one has run).
        self.chosen = self.most
        #: Rounds of timing completed.
        self.rounds = 0
        self._plan: list[int] = []
        self._times: dict[int, list[tuple[float, int]]] = {}  # per setting: (seconds, samples) of each item timed
        self._left = 0
        self._start_round()

    def _start_round(self) -> None:
        # alternate the two settings, so that a busy moment of the machine falls on both
        self._plan = [1, self.most] * self.probe if self.most > 1 else []
        self._plan.reverse()  # popped from the end: 1 first
        self._times = {1: [], self.most: []}

    def threads(self) -> int:
        """The threads to decode the next item with."""
        if self._plan:
            return self._plan[-1]
        return self.chosen

    def record(self, threads: int, seconds: float, samples: int = 1) -> None:
        """An item decoded with `threads` threads took `seconds` (wall clock) for `samples` samples.

        Args:
            threads: what `threads()` said for it.
            seconds: its decode's wall time.
            samples: the samples it decoded (an item served from decoded frames alone, 0, is not timed).
        """
        if not self._plan:
            self._left -= 1
            if self._left <= 0 and self.most > 1:
                self._start_round()
            return
        if threads != self._plan[-1] or samples <= 0:  # not the item the plan timed, or nothing decoded
            return
        self._plan.pop()
        self._times[threads].append((seconds, samples))
        if not self._plan:
            one, many = _per_sample(self._times[1]), _per_sample(self._times[self.most])
            self.chosen = 1 if one < many else self.most
            self.rounds += 1
            self._left = self.keep


def _per_sample(timed: list[tuple[float, int]]) -> float:
    """Seconds per sample decoded over timed items, the slowest item per sample left out (one item descheduled
    for a while says little). A ratio of sums, not a median of each item's: an item whose frame is a GOP's
    first decodes fewer samples, each costing more, so per-item ratios vary more than the settings do."""
    kept = sorted(timed, key=lambda t: t[0] / t[1])[:-1] or timed
    return sum(t for t, _ in kept) / sum(n for _, n in kept)
