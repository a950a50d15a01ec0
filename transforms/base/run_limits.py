"""The run's own bounds: a deadline for each phase of an import, and how much of a Hub listing is read.

A source that is hostile or stuck (storage answering a byte a minute, reads retried without end, a
listing that never stops) must end the phase it stalls with a named rule, not leave a run that hangs.
An import has four phases, each a few of its steps:

    check    per dataset: its output's state, its listing and checks, what changed since the last import
    plan     per episodes file: its rows, its parts (the data files' footers); per MP4: its moov read
    write    per read unit: the data files' row groups read, its parts typed and written
    finish   per episodes file: its parts committed; per dataset: quality tables, errors.jsonl, manifest

A phase's deadline bounds each piece of its work (one dataset, one episodes file or MP4, one read unit,
one commit) from when that piece starts. A piece is what a stuck source stalls, and pieces run side by
side on many workers, their number growing with the run (a bulk run over hundreds of datasets): a bound
on a whole phase would have to be loose enough for the largest run and so catch nothing, while a bound
on a piece holds whatever the run's size. Every read checks its piece's deadline before it asks
storage (each attempt, each chunk, each listing page), so a piece past its deadline fails with rule
`deadline` as soon as its current request returns, naming the phase, the piece, what it was waiting
on and the option that raises the limit; the piece's episodes file (or dataset) fails, the others go
on, and the output still gets its manifest. A request that never returns at all cannot be cut from
inside; a local run's command watches the pieces (`overdue`) and ends the run when one stays past its
deadline by `STUCK_GRACE_S`.

The defaults are generous for real datasets (a piece of honest work on a slow bucket takes minutes:
listing a million objects, reading a 100 MB episodes file or a part's row groups at a few MB/s) and
catch a source that stopped. `--phase_deadline PHASE=SECONDS[,...]` changes them. Beam-free.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import time
from typing import Callable, Iterator, Optional, TypeVar

from transforms.base.errors import LeRobotImportError

T = TypeVar("T")

#: The phases of an import, and what one piece of each is.
PHASES = {
    "check": "checking and listing a dataset",
    "plan": "planning an episodes file or reading an MP4's index",
    "write": "reading and writing a part",
    "finish": "committing an episodes file or finishing a dataset",
}
#: Seconds one piece of each phase may take, by default.
DEFAULT_DEADLINES_S = {"check": 1800.0, "plan": 1800.0, "write": 3600.0, "finish": 1800.0}
#: A Hub listing reads at most this many pages (1,000 entries a page on the Hub) ...
HUB_LIST_MAX_PAGES = 1_000
#: ... and this many entries. The importer lists one folder at a time, and LeRobot's folders hold a chunk
#: (1,000 files by default) or a few folders; 200,000 leaves room for datasets written with far larger
#: chunks, and keeps what a listing that never ends costs to seconds and a few hundred MB (huggingface_hub
#: keeps every entry of a listing until it ends).
HUB_LIST_MAX_ITEMS = 200_000
#: A piece still running this long past its deadline is stuck inside one request: a local run ends.
STUCK_GRACE_S = 60.0
#: The floor of a read's rate: a read that gets fewer than MIN_READ_RATE bytes a second over SLOW_READ_S
#: seconds fails with rule `deadline` (a source that trickles a byte every few seconds passes every
#: timeout of a request and would hold its piece until the phase deadline). Honest storage sends MB/s.
MIN_READ_RATE = 1024.0
SLOW_READ_S = 30.0
#: The option that sets the deadlines, as messages name it.
OPTION = "--phase_deadline"


@dataclasses.dataclass(frozen=True)
class RunLimits:
    """The run's bounds; pickled with the run's configuration into every step.

    Args:
        deadlines_s: (phase, seconds one piece of it may take), for every phase of `PHASES`.
        hub_list_max_pages: pages a Hub listing may have.
        hub_list_max_items: entries a Hub listing may have.
        min_read_rate, slow_read_s: a read getting fewer bytes a second than this over that many seconds
            fails (`ReadPace`); a rate of 0 lets any read be that slow.
        run_id: the run these are the limits of ("" outside a run): what a run learnt once (a listing
            refused by its bounds) holds for that run only.
    """

    deadlines_s: tuple[tuple[str, float], ...] = tuple(DEFAULT_DEADLINES_S.items())
    hub_list_max_pages: int = HUB_LIST_MAX_PAGES
    hub_list_max_items: int = HUB_LIST_MAX_ITEMS
    run_id: str = ""
    min_read_rate: float = MIN_READ_RATE
    slow_read_s: float = SLOW_READ_S

    def deadline_s(self, phase: str) -> float:
        return dict(self.deadlines_s)[phase]


def from_values(phase_deadline: Optional[str], hub_list_max_pages, hub_list_max_items,
                min_read_rate: Optional[str] = None) -> RunLimits:
    """The bounds a command line gives (`--phase_deadline`, `--hub_list_max_pages`, `--hub_list_max_items`,
    `--min_read_rate`).

    Raises:
        ValueError: a value that is none, naming its option.
    """
    rate, window = parse_read_rate(min_read_rate)
    return RunLimits(parse_deadlines(phase_deadline), _positive(hub_list_max_pages, "--hub_list_max_pages"),
                     _positive(hub_list_max_items, "--hub_list_max_items"), min_read_rate=rate, slow_read_s=window)


def parse_read_rate(text: Optional[str]) -> tuple[float, float]:
    """`--min_read_rate`'s value: `BYTES_PER_S[/SECONDS]` (the floor, and over how long a read may stay under
    it; SECONDS keeps its default when left out). `0` lets reads be as slow as they come.

    Raises:
        ValueError: a rate that is not a finite number >= 0, or seconds that are not a number above 0.
    """
    if text is None or not str(text).strip():
        return MIN_READ_RATE, SLOW_READ_S
    rate_text, _, window_text = str(text).strip().partition("/")
    try:
        rate = float(rate_text)
        window = float(window_text) if window_text.strip() else SLOW_READ_S
    except ValueError:
        rate = window = float("nan")
    if not (0 <= rate < 1e15 and 0 < window < 1e9):
        raise ValueError(f"--min_read_rate must be BYTES_PER_S or BYTES_PER_S/SECONDS (a rate >= 0, seconds above "
                         f"0), not {text!r}")
    return rate, window


def _positive(value, option: str) -> int:
    if value is None or int(value) < 1:
        raise ValueError(f"{option} must be a whole number above 0, not {value!r}")
    return int(value)


def parse_deadlines(text: Optional[str]) -> tuple[tuple[str, float], ...]:
    """`--phase_deadline`'s value: `SECONDS` (every phase) or `PHASE=SECONDS[,PHASE=SECONDS...]` (the
    phases named; the others keep their default).

    Raises:
        ValueError: a phase that is none, or a number of seconds that is not a positive finite number.
    """
    deadlines = dict(DEFAULT_DEADLINES_S)
    if text is None or not str(text).strip():
        return tuple(deadlines.items())
    items = [item.strip() for item in str(text).split(",")]
    if len(items) == 1 and "=" not in items[0]:
        seconds = _seconds(items[0], "every phase")
        return tuple((phase, seconds) for phase in deadlines)
    for item in items:
        phase, sep, value = item.partition("=")
        phase = phase.strip()
        if not sep or phase not in PHASES:
            raise ValueError(f"{OPTION} {text}: {item!r} is not PHASE=SECONDS with PHASE one of "
                             f"{', '.join(PHASES)}")
        deadlines[phase] = _seconds(value.strip(), phase)
    return tuple(deadlines.items())


def _seconds(value: str, what: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not (0 < seconds < 1e9):
        raise ValueError(f"{OPTION}: the deadline of {what} must be a number of seconds above 0, not {value!r}")
    return seconds


class DeadlinePassed(LeRobotImportError):
    """A piece of a phase ran past its deadline (rule `deadline`)."""

    def __init__(self, piece: "_Piece", waiting_on: str) -> None:
        limit = piece.limit_s
        waiting = f", waiting on {waiting_on}" if waiting_on else ""
        super().__init__("deadline", f"the {piece.phase} phase ({PHASES[piece.phase]}) ran past its deadline of "
                         f"{limit:,.0f} s on {piece.what}{waiting}: the source is stuck or too slow to be "
                         f"waited for. Check the storage it reads (or the Hub), then run again; a source this "
                         f"slow on purpose needs a larger limit: {OPTION} {piece.phase}=SECONDS")
        self.phase = piece.phase


class SlowRead(LeRobotImportError):
    """A read stayed under the floor rate (`RunLimits.min_read_rate`) for `slow_read_s` seconds (rule
    `deadline`)."""

    def __init__(self, what: str, got: int, seconds: float, limits: RunLimits, *, earlier: str = "") -> None:
        found = (f"not read: its source already trickled its bytes this run (reading {earlier} stayed under the "
                 f"floor of {limits.min_read_rate:,.0f} bytes/s for {limits.slow_read_s:g} s)" if earlier else
                 f"got {got:,} bytes in {seconds:,.0f} s, under the floor of {limits.min_read_rate:,.0f} bytes/s "
                 f"for {limits.slow_read_s:g} s")
        super().__init__("deadline", f"reading {what} {found}: the source is stuck or trickles its bytes. Check the "
                         "storage it reads (or the Hub), then run again; a source this slow on purpose needs a "
                         "lower floor: --min_read_rate BYTES_PER_S[/SECONDS] (0: no floor)")
        self.what = what


#: Sources (a Hub repository at a revision, a bucket) a read of this process found trickling, per run: the
#: next read of one fails at once instead of waiting out its own window (a dataset's pieces read many files).
_SLOW_SOURCES: dict[tuple[str, str], "SlowRead"] = {}
_SLOW_LOCK = threading.Lock()


class ReadPace:
    """The floor rate of one read (a file, a range, a streamed answer), fed the bytes as they come: every
    `slow_read_s` seconds of the read must have brought `min_read_rate` bytes a second, else `add` raises
    `SlowRead` naming `what`. Windows are checked as bytes arrive (a stream of chunks) or when a request
    returns (a request the storage client makes whole): a read that gets nothing at all is cut by the
    client's own timeout, or the phase deadline. `source` (a Hub repository at a revision, a bucket) is
    remembered for the run once it trickled: its next reads fail at once, naming the read that found it."""

    def __init__(self, what: str, *, source: str = "", limits: Optional[RunLimits] = None, clock=None) -> None:
        self.what = what
        self.limits = limits or current()
        self._clock = clock or time.monotonic
        self._source = (self.limits.run_id, source) if source and self.limits.run_id else None
        if self._source is not None and self.limits.min_read_rate > 0:
            with _SLOW_LOCK:
                found = _SLOW_SOURCES.get(self._source)
            if found is not None:
                raise SlowRead(what, 0, 0.0, self.limits, earlier=found.what)
        self.started = self._mark_at = self._clock()
        self.got = self._mark_got = 0

    def add(self, n: int) -> None:
        self.got += n
        rate = self.limits.min_read_rate
        if rate <= 0:
            return
        now = self._clock()
        window = now - self._mark_at
        if window < self.limits.slow_read_s:
            return
        if self.got - self._mark_got < rate * window:
            slow = SlowRead(self.what, self.got, now - self.started, self.limits)
            if self._source is not None:
                with _SLOW_LOCK:
                    _SLOW_SOURCES.setdefault(self._source, slow)
            raise slow
        self._mark_at, self._mark_got = now, self.got


def source_of(uri: str) -> str:
    """The source a read's floor rate remembers for a URL: its scheme and bucket (or host); "" for a local path,
    which is read in chunks and judged read by read."""
    scheme, sep, rest = str(uri).partition("://")
    if not sep or scheme in ("file", "local"):
        return ""
    return f"{scheme}://{rest.split('/', 1)[0]}"


def paced(fn: Callable[[], T], what: str, source: str = "") -> T:
    """`fn()`, a request the storage client makes whole (bytes, or a list of them), held to the floor rate
    once it returns."""
    pace = ReadPace(what, source=source)
    data = fn()
    pace.add(len(data) if isinstance(data, (bytes, bytearray, memoryview)) else sum(len(d) for d in data))
    return data


@dataclasses.dataclass
class _Piece:
    phase: str
    what: str
    limit_s: float
    ends_at: float
    limits: RunLimits
    started: float = 0.0
    waiting_on: str = ""


_LOCAL = threading.local()
_ACTIVE: dict[int, _Piece] = {}
_ACTIVE_LOCK = threading.Lock()
_IDS = itertools.count()
_DEFAULT = [RunLimits()]


def install(limits: RunLimits) -> None:
    """The limits outside any piece in this process (the command's own reads: targets, leases, pins)."""
    _DEFAULT[0] = limits


def current() -> RunLimits:
    """The limits of the piece this thread works on, else the process's (`install`)."""
    piece = getattr(_LOCAL, "piece", None)
    return piece.limits if piece is not None else _DEFAULT[0]


@contextlib.contextmanager
def piece(limits: RunLimits, phase: str, what: str, *, clock=time.monotonic) -> Iterator[None]:
    """Do one piece of `phase` (`what`: "episodes file X of dataset D") within its deadline: every read
    inside checks it (`check`). Pieces nest: an inner one has its own deadline, the outer one's resumes."""
    limit = limits.deadline_s(phase)
    now = clock()
    entry = _Piece(phase, what, limit, now + limit, limits, now)
    outer = getattr(_LOCAL, "piece", None)
    key = next(_IDS)
    _LOCAL.piece = entry
    with _ACTIVE_LOCK:
        _ACTIVE[key] = entry
    try:
        yield
    finally:
        _LOCAL.piece = outer
        with _ACTIVE_LOCK:
            del _ACTIVE[key]


@contextlib.contextmanager
def outside() -> Iterator[None]:
    """Do work that is no part of the piece this thread works on (the output's own bookkeeping once the
    piece's reads are done): no deadline is checked inside, and the piece's resumes after."""
    outer = getattr(_LOCAL, "piece", None)
    _LOCAL.piece = None
    try:
        yield
    finally:
        _LOCAL.piece = outer


def check(waiting_on: str = "", *, clock=time.monotonic) -> None:
    """Raise `DeadlinePassed` when the piece this thread works on is past its deadline; else note what it
    waits on next (`waiting_on`, "a read of data file X") for the command's watch. No-op outside a piece."""
    entry = getattr(_LOCAL, "piece", None)
    if entry is None:
        return
    if waiting_on:
        entry.waiting_on = waiting_on
    if clock() > entry.ends_at:
        raise DeadlinePassed(entry, waiting_on or entry.waiting_on)


def overdue(grace_s: float = STUCK_GRACE_S, *, since: float = float("-inf"),
            clock=time.monotonic) -> Optional[DeadlinePassed]:
    """The error of a piece of this process, started at or after `since` (this run's), still running
    `grace_s` past its deadline (stuck inside one request, where `check` cannot reach), or None."""
    now = clock()
    with _ACTIVE_LOCK:
        late = [p for p in _ACTIVE.values() if p.started >= since and now > p.ends_at + grace_s]
    if not late:
        return None
    first = min(late, key=lambda p: p.ends_at)
    return DeadlinePassed(first, first.waiting_on)
