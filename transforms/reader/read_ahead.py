"""Reading ahead the video bytes of a batch of items, for training from object storage.

A random item reads, per camera, the bytes of its frame's decode closure: one request (a camera's samples
follow each other in its MP4). From a local disk that is a `pread` of a few KB; from a bucket or the Hub it is
a round trip of tens of milliseconds, and a DataLoader worker that builds its batch one item at a time waits
for `items x cameras` round trips one after the other. A DataLoader hands each worker a whole batch of indices
at once (`Dataset.__getitems__`): those are the indices the sampler asks next of that worker, so before
building the batch's items `ReadAhead` fetches the byte ranges all of them will ask for, with at most
`max_in_flight` requests at a time and at most `max_bytes` held, and the decode of each item then takes its
bytes from what is held instead of asking the store. Each worker reads ahead for its own batches (a worker
sees no other worker's indices), so a loader with `num_workers` workers has up to `num_workers x
max_in_flight` requests in flight and `num_workers x max_bytes` held.

What is held is dropped when the batch is built (a range no item took, e.g. because the GOP was already
decoded, is not kept), so held bytes never outlive a batch. A range that was not read ahead (past the byte
bound, or a request the plan did not foresee) is read as before, so the items are the same either way.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Any, Callable, Optional, Sequence

__all__ = ["ReadAhead", "DEFAULT_IN_FLIGHT", "DEFAULT_BYTES"]

#: Requests in flight per process while a batch is read ahead (a 20 ms round trip then costs a batch of 8
#: two-camera items about one round trip instead of 16).
DEFAULT_IN_FLIGHT = 16
#: Bytes of read-ahead ranges held per process at most (a batch of 8 random 640x480 items holds ~1 MB).
DEFAULT_BYTES = 64 << 20


class ReadAhead:
    """Byte ranges fetched ahead of their reads, bounded in requests in flight and bytes held (per process).

    Args:
        max_in_flight: requests at a time, at least 1.
        max_bytes: bytes held at most; ranges past the bound are left to be read when asked.
    """

    def __init__(self, max_in_flight: int = DEFAULT_IN_FLIGHT, max_bytes: int = DEFAULT_BYTES) -> None:
        if not (isinstance(max_in_flight, int) and max_in_flight >= 1):
            raise ValueError(f"read-ahead requests in flight must be a whole number >= 1, not {max_in_flight!r:.100}")
        if not (isinstance(max_bytes, int) and max_bytes >= 0):
            raise ValueError(f"read-ahead bytes must be a whole number >= 0, not {max_bytes!r:.100}")
        self.max_in_flight = max_in_flight
        self.max_bytes = max_bytes
        self._init_process()

    def _init_process(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._held: dict[str, list] = {}   # uri -> [(start, end, bytes)]
        self.held_bytes = 0
        #: The most bytes held at once and requests in flight at once, in this process (what tests check).
        self.peak_bytes = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        #: Requests made ahead, and reads answered from what was held.
        self.requests = 0
        self.hits = 0

    def _check_process(self) -> None:
        if self._pid != os.getpid():  # a forked DataLoader worker: the parent's threads are not here
            self._init_process()

    def __getstate__(self) -> dict:
        return {"max_in_flight": self.max_in_flight, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["max_in_flight"], state["max_bytes"])

    def fetch(self, ranges: Sequence[tuple[str, int, int]], read: Callable[[str, int, int], bytes]) -> None:
        """Fetch `ranges` ((uri, start, end), in the order they will be asked for) with `read(uri, start, end)`,
        at most `max_in_flight` at a time, keeping them until taken or `clear()`; ranges that would take the
        bytes held past `max_bytes` are not fetched. Returns when every fetch is done; a failed fetch is
        forgotten (the read it was for asks again and reports its own error)."""
        self._check_process()
        planned, total = [], self.held_bytes
        seen = set()
        for uri, start, end in ranges:
            if (uri, start, end) in seen or end <= start:
                continue
            if total + (end - start) > self.max_bytes:
                break  # the order is the items': the first items' bytes come first
            seen.add((uri, start, end))
            planned.append((uri, start, end))
            total += end - start
        if not planned:
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="ReadAhead")

        def one(uri: str, start: int, end: int) -> None:
            with self._lock:
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                self.requests += 1
            try:
                data = read(uri, start, end)
            except Exception:  # noqa: BLE001 - the item's own read raises it again, as its error
                data = None
            finally:
                with self._lock:
                    self.in_flight -= 1
            if data is not None and len(data) == end - start:
                with self._lock:
                    self._held.setdefault(uri, []).append((start, end, data))
                    self.held_bytes += len(data)
                    self.peak_bytes = max(self.peak_bytes, self.held_bytes)

        done = [self._pool.submit(one, *r) for r in planned]
        concurrent.futures.wait(done)

    def take(self, uri: str, starts: Sequence[int], ends: Sequence[int]) -> Optional[list]:
        """The bytes of ranges `[start, end)` of `uri` when every one lies inside a range held (that range is
        then dropped: a batch reads each of its ranges once), else None (read them as usual)."""
        if self._pid != os.getpid() or not self._held.get(uri):
            return None
        with self._lock:
            held = self._held.get(uri, [])
            out, used = [], set()
            for s, e in zip(starts, ends):
                for k, (hs, he, data) in enumerate(held):
                    if hs <= s and e <= he:
                        out.append(memoryview(data)[s - hs:e - hs])
                        used.add(k)
                        break
                else:
                    return None
            for k in sorted(used, reverse=True):
                self.held_bytes -= len(held[k][2])
                del held[k]
            self.hits += 1
        return out

    def clear(self) -> None:
        """Drop every range held (the batch is built)."""
        self._check_process()
        with self._lock:
            self._held.clear()
            self.held_bytes = 0

    def close(self) -> None:
        if self._pool is not None and self._pid == os.getpid():
            self._pool.shutdown(wait=False)
        self._pool = None


def plan_runs(offsets: Any, sizes: Any) -> tuple[list[int], list[int]]:
    """The byte-contiguous runs [start, end) of samples with these offsets and sizes (in decode order)."""
    off, size = list(offsets), list(sizes)
    starts, ends = [off[0]], []
    for k in range(1, len(off)):
        if off[k] != off[k - 1] + size[k - 1]:
            ends.append(off[k - 1] + size[k - 1])
            starts.append(off[k])
    ends.append(off[-1] + size[-1])
    return starts, ends


def local_uri(uri: str) -> bool:
    """`uri` names a file on a local disk (a path, or file://)."""
    return uri.startswith("file://") or uri.startswith("/") or "://" not in uri


def batch_ranges(ds: Any, indices: Sequence[int], remote_only: bool) -> list[tuple[str, int, int]]:
    """The byte ranges (uri, start, end) the video frames of items `indices` of the `ImportedFrames` `ds` will
    read from files, in item order (local files left out with `remote_only`). An item that cannot be planned is
    left out: building it reports its own error."""
    import numpy as np

    from transforms.reader.gop_cache import GopCache
    from transforms.reader.seek import ReaderError

    gops: GopCache = ds._gops
    deltas = ds.delta_indices or {}
    out: list[tuple[str, int, int]] = []
    planned: dict[tuple[str, int], int] = {}  # (uri, closure start) -> last sample planned in this batch
    for i in indices:
        try:
            e, pos = ds._locate(int(i))
            prep = ds._episode(e)
            n = prep.length
            for cam in ds.cameras:
                h, samples, firsts = ds._located(prep, cam)
                if samples is None or (remote_only and local_uri(h.uri)):
                    continue
                rows = np.clip(pos + np.asarray(deltas[cam]), 0, n - 1) if cam in deltas else np.array([pos])
                upto: dict[int, int] = {}
                for f, s in zip(firsts[rows].tolist(), samples[rows].tolist()):
                    upto[f] = max(upto.get(f, s), s)
                for f, s in upto.items():
                    last = planned.get((h.uri, f))
                    span = gops.fetch_span(h.uri, h.track, f, s) if last is None else \
                        (None if s <= last else (last + 1, s))
                    if span is None:
                        continue
                    lo, hi = span
                    planned[(h.uri, f)] = max(hi, last if last is not None else hi)
                    starts, ends = plan_runs(h.track.offset[lo:hi + 1].tolist(), h.track.size[lo:hi + 1].tolist())
                    out.extend((h.uri, a, b) for a, b in zip(starts, ends))
        except (ReaderError, IndexError, ValueError):
            continue
    return out
