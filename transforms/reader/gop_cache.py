"""Decoded GOPs kept per process, so frames that share a GOP are read and decoded once.

Training reads frames in batches, and the frames of one batch (or of neighbouring items, or of the
windows around one item) often fall in the same GOP. A `GopCache` keeps, per process, the last few
decode streams it opened: one stream starts at the first sample of a frame's decode closure (its
GOP's sync sample, or the previous GOP's for an open-GOP leading picture), fetches the bytes of that
closure (up to the frame) with one batch of range reads from the MediaIndex's offsets and sizes, and
decodes only as far as the frames asked so far; a later request for a frame further into the same
GOP fetches the rest of the GOP and resumes the same decoder instead of starting over. Every frame a
stream outputs is kept, so any frame of a cached GOP is answered without decoding again; it is kept
as the decoder gave it (YUV) and turned into RGB (3 x H x W uint8) only when it is asked for: random
reads take one frame of each GOP they decode, and converting the frames decoded on the way to it
would cost more than decoding them (the YUV frame is also half the size of the RGB one).

Keeping streams pays only when they are asked again. A cache that sees reads that never come back (a shuffled
training epoch: no request of the last `REUSE_WINDOW` found a stream an earlier request left) lets go of each
stream once its request is answered: its decoder goes idle, its pictures are freed. Kept pictures and the
decoders holding their references are memory the next decode does not find in the CPU's caches, which costs
about 5% of a 640x480 random item's decode. A request for a stream let go of that way says the reads do come
back, and the cache keeps streams again.

A decoder is worth keeping too: creating a codec context (and its threads and buffer pools) costs
about as much as decoding a few small frames. When a stream is dropped, or its decoder has output
all it was fed, the decoder goes to a small pool of idle ones; the next stream of a file with the
same codec and configuration takes it and flushes it (`flush_buffers`, which forgets every picture
it holds) instead of creating one.

Samples are decoded through a `decoder.Decoder` (PyAV's software decoders unless one is given): the cache
fetches, orders and keeps; the decoder only turns a sample's bytes into pictures and a picture into pixels.

Threads may share a cache: its state is behind one lock, which a stream lets go of while its decoder
decodes (PyAV releases the GIL there), so streams of different files (the cameras of one item) decode
at the same time on different cores; a stream being decoded is busy, and a second request for it waits.

It also keeps the open range readers of the video files (one per file, reused by every stream) and
counts the bytes they fetch. A local file is read with `os.pread` on one descriptor kept open: a
random item reads a few KB per camera, and fsspec's local `cat_file` opens, seeks and closes the file
for each read (~0.3 ms, a fifth of a 320x240 frame's decode). Nothing here is
shared between processes: a cache found in a process other than the one that made it (a forked
DataLoader worker) starts empty.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import weakref
from typing import Any, Optional

import numpy as np

from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.mp4 import ranges
from transforms.reader.decoder import DecodeFailed, Decoder, default_decoder
from transforms.reader.seek import ReaderError, TrackTables

__all__ = ["GopCache", "gop_end"]

#: Idle decoders kept per process, for reuse by the next stream of the same codec configuration.
IDLE_DECODERS = 4
#: Requests looked back on to tell whether streams are asked again (see the module docstring).
REUSE_WINDOW = 32


def gop_end(track: TrackTables, sample: int) -> int:
    """The last decode index of the GOP holding `sample`.

    Args:
        track: the file's tables.
        sample: a decode index.
    """
    g = int(np.searchsorted(track.gop_start, sample, side="right")) - 1
    return int(track.gop_start[g + 1]) - 1 if g + 1 < len(track.gop_start) else track.num_samples - 1


def _close(reader: Any) -> None:
    close = getattr(reader, "close", None)
    if close is not None:
        close()


@dataclasses.dataclass
class _Fetched:
    """The bytes of samples `lo..hi` of a file, as read: sample `s` is `runs[run[s - lo]]` from `at[s - lo]`
    (Python lists: a packet is cut out per sample, where a numpy scalar costs more than the slice)."""

    lo: int
    hi: int
    runs: list
    run: list
    at: list
    sizes: list

    def packet_bytes(self, s: int) -> memoryview:
        k = s - self.lo
        a = self.at[k]
        return self.runs[self.run[k]][a:a + self.sizes[k]]


@dataclasses.dataclass(eq=False)
class _TrackInfo:
    """What every stream of one file's track shares, worked out once per track and process."""

    config: tuple                   # the decoder configuration (codec, extradata)
    frame_bytes: int = 0            # bytes of one decoded (YUV) frame, once one is decoded


@dataclasses.dataclass
class _Stream:
    """One decode in progress: samples `first..` of a file, fed in decode order up to `fed - 1`."""

    uri: str
    track: TrackTables
    info: _TrackInfo
    first: int
    last: int                       # the last sample whose bytes are fetched
    parts: list                     # _Fetched, one per batch of range reads, in sample order
    ctx: Any = None                 # the decoder's DecodeSession (None once drained)
    fed: int = 0                    # next sample to feed
    # sample -> its frame: the decoder's picture as decoded, replaced by its RGB array once asked for
    frames: dict[int, Any] = dataclasses.field(default_factory=dict)
    nbytes: int = 0                 # bytes of `frames`
    by_pts: dict[int, int] = dataclasses.field(default_factory=dict)  # pts -> sample, of samples fetched
    busy: bool = False              # a thread is decoding with `ctx`, the cache's lock released
    retired: bool = False           # dropped from the cache while busy: its decoder goes idle once it is done


class GopCache:
    """Decode streams and open video files of one process.

    Args:
        max_gops: how many decode streams (about one GOP of one camera each) to keep; 0 keeps none
            (every request decodes its closure again).
        max_files: how many video files to keep open for range reads.
        threads: decoder threads per stream.
        max_bytes: decoded frames kept, in bytes, over all streams: older streams are dropped first (the
            stream in use is always kept, however long its GOP).
        decoder: what decodes the samples (`decoder.Decoder`; default: `decoder.default_decoder()`).
    """

    def __init__(self, max_gops: int = 8, *, max_files: int = 32, threads: int = 1,
                 max_bytes: int = 1 << 30, decoder: Optional[Decoder] = None) -> None:
        self.decoder = default_decoder() if decoder is None else decoder
        self.max_gops = max(0, int(max_gops))
        self.max_bytes = int(max_bytes)
        self.max_files = max(1, int(max_files))
        self.threads = threads
        #: Byte ranges fetched ahead of their reads (`read_ahead.ReadAhead`), set by the dataset that reads ahead.
        self.read_ahead: Any = None
        #: What reached storage from video files in this process (requests and bytes).
        self.stats = storage.ReadCounter()
        #: Decode streams started, and samples fed to a decoder (a benchmark's measure of decode work).
        self.streams_started = 0
        self.samples_decoded = 0
        self._pid = os.getpid()
        self._streams: collections.OrderedDict = collections.OrderedDict()
        self._files: collections.OrderedDict = collections.OrderedDict()
        # one lock over the cache's state, released while a decoder decodes (PyAV lets go of the GIL then, so
        # another thread's stream, e.g. another camera of the same item, decodes meanwhile); `_turn` says
        # when a busy stream is free again
        self._lock = threading.Lock()
        self._turn = threading.Condition(self._lock)
        self._idle: list[tuple[tuple, Any]] = []   # (codec configuration, idle codec context)
        self._tracks: "weakref.WeakKeyDictionary[TrackTables, _TrackInfo]" = weakref.WeakKeyDictionary()
        #: Codec contexts created, and idle ones reused (flushed) for a new stream.
        self.decoders_created = 0
        self.decoders_reused = 0
        self._new_reuse()

    def _new_reuse(self) -> None:
        # per request of the last REUSE_WINDOW: whether it asked for a stream an earlier request left; and the
        # keys of the streams let go of once answered (as many as the cache would keep), to notice them asked again
        self._reuse: collections.deque = collections.deque(maxlen=REUSE_WINDOW)
        self._reused = 0
        self._let_go: collections.OrderedDict = collections.OrderedDict()
        # keys of the streams requests in flight ask for (another thread's request may be between two of its frames)
        self._in_flight: dict[tuple, int] = {}
        #: Streams let go of once their request was answered, the reads not coming back.
        self.streams_let_go = 0

    # -- processes -------------------------------------------------------------------------------

    def _check_process(self) -> None:
        """Drop what a parent process left: its readers' connections and decoders are not ours."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lock = threading.Lock()
            self._turn = threading.Condition(self._lock)
            self._streams.clear()
            for reader in self._files.values():  # this process's copies of the parent's descriptors
                _close(reader)
            self._files.clear()
            self.decoder.new_process()
            self._idle = []
            self._tracks = weakref.WeakKeyDictionary()
            self.stats = storage.ReadCounter()
            self.streams_started = self.samples_decoded = 0
            self.decoders_created = self.decoders_reused = 0
            self._new_reuse()

    def __getstate__(self) -> dict:
        return {"max_gops": self.max_gops, "max_files": self.max_files, "threads": self.threads,
                "max_bytes": self.max_bytes, "decoder": self.decoder}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["max_gops"], max_files=state["max_files"], threads=state["threads"],
                      max_bytes=state["max_bytes"], decoder=state.get("decoder"))

    # -- files -----------------------------------------------------------------------------------

    def open_file(self, uri: str) -> ranges.RangeReader:
        """The range reader of `uri`, opened once per process and counted in `stats`.

        Args:
            uri: the video file.
        """
        self._check_process()
        reader = self._files.get(uri)
        if reader is None:
            reader = ranges.open_uri(uri, stats=self.stats, pread=True)
            self._files[uri] = reader
            while len(self._files) > self.max_files:
                _close(self._files.popitem(last=False)[1])
        else:
            self._files.move_to_end(uri)
        return reader

    # -- frames ----------------------------------------------------------------------------------

    def frames(self, uri: str, track: TrackTables, samples: np.ndarray,
               firsts: Optional[np.ndarray] = None) -> list[np.ndarray]:
        """The RGB frames (3 x H x W uint8; a depth map's codes, H x W x 1 uint16) of decode indices `samples` of
        the file `uri`.

        Args:
            uri: the video file.
            track: its tables (from its MediaIndex).
            samples: decode indices.
            firsts: each sample's decode closure start (`TrackTables.closure_start`), when the caller has
                them at hand (found for a whole episode at once); worked out here otherwise.
        Returns:
            One frame per sample, in the order asked (the arrays are the cache's: do not modify them).
        Raises:
            ReaderError: the bytes cannot be read or do not decode to the frames the index promises.
        """
        if self._pid != os.getpid():
            self._check_process()
        with self._lock:
            wanted = np.asarray(samples, np.int64).tolist()
            starts = [track.closure_start(s) for s in wanted] if firsts is None else \
                np.asarray(firsts, np.int64).tolist()
            if len(wanted) == 1:
                return [self._request(uri, track, wanted[0], starts[0])]
            again = self._asked_again(uri, starts)
            keys = [(uri, f) for f in set(starts)]
            in_flight = self._in_flight
            for key in keys:
                in_flight[key] = in_flight.get(key, 0) + 1
            try:
                # the last sample asked of each decode closure: a new stream fetches the bytes of all the frames
                # asked of it in one batch of reads (a window of frames in one GOP is one request, not one each)
                upto: dict[int, int] = {}
                for f, s in zip(starts, wanted):
                    upto[f] = max(upto.get(f, s), s)
                out = [self._sample_frame(uri, track, s, f, upto[f]) for s, f in zip(wanted, starts)]
            finally:
                for key in keys:
                    if in_flight[key] > 1:
                        in_flight[key] -= 1
                    else:
                        del in_flight[key]
            self._answered(keys, again)
            return out

    def frame(self, uri: str, track: TrackTables, sample: int, first: int, *, own: bool = False) -> np.ndarray:
        """`frames(uri, track, [sample], [first])[0]`: one frame, its closure start known (a random read).

        Args:
            own: return an array of the caller's own, which it may keep or modify. A frame still held as the
                decoder's picture is converted into a new array and stays in the cache as that picture: a random
                read takes one frame and rarely asks for it again, so keeping its RGB copy too would cost a
                frame-sized copy per item for nothing.
        """
        if self._pid != os.getpid():
            self._check_process()
        with self._lock:
            return self._request(uri, track, sample, first, own)

    def _request(self, uri: str, track: TrackTables, sample: int, first: int, own: bool = False) -> np.ndarray:
        """A request for one frame (the lock held). It needs no in-flight mark: another thread can let go of its
        stream only while it decodes (the lock released), and it then finishes on the stream it holds."""
        again = self._asked_again(uri, (first,))
        out = self._sample_frame(uri, track, sample, first, sample, own)
        self._answered([(uri, first)], again)
        return out

    def _asked_again(self, uri: str, firsts: Any) -> bool:
        """Whether a request for the closures starting at `firsts` asks for a stream an earlier request left."""
        streams, let_go = self._streams, self._let_go
        return any((uri, f) in streams or (uri, f) in let_go for f in firsts)

    def _answered(self, keys: list, again: bool) -> None:
        """Count the request (its streams' keys); when none of the last REUSE_WINDOW asked for a stream again, let
        go of every stream no request in flight asks for (this request's, and those kept from before the reads
        turned random)."""
        reuse = self._reuse
        if len(reuse) == REUSE_WINDOW:
            self._reused -= reuse[0]
        reuse.append(again)
        self._reused += again
        if self._reused or len(reuse) < REUSE_WINDOW or not self.max_gops:
            return
        let_go, in_flight = self._let_go, self._in_flight
        for key in keys + list(self._streams):
            if key in in_flight:  # another thread's request is between two of its frames: let go when answered
                continue
            stream = self._streams.pop(key, None)
            if stream is not None:
                self._retire(stream)
                self.streams_let_go += 1
            let_go[key] = None
            let_go.move_to_end(key)
        while len(let_go) > self.max_gops:
            let_go.popitem(last=False)

    def _sample_frame(self, uri: str, track: TrackTables, s: int, first: int, upto: int,
                      own: bool = False) -> np.ndarray:
        key = (uri, first)
        stream = self._streams.get(key)
        while stream is not None and stream.busy:  # another thread is decoding it: wait for its turn to end
            self._turn.wait()
            stream = self._streams.get(key)
        if stream is None:
            stream = self._start(uri, track, first)
            if self.max_gops:
                self._streams[key] = stream
                while len(self._streams) > self.max_gops:
                    self._retire(self._streams.popitem(last=False)[1])
        else:
            self._streams.move_to_end(key)
        try:
            frame = self._frame(stream, s, upto, own)
        except ReaderError:
            self._streams.pop(key, None)  # a failed stream is not kept: the next request tries afresh
            raise
        if not self.max_gops or stream.retired:
            self._retire(stream)
        self._trim(key)
        return frame

    # -- decoders --------------------------------------------------------------------------------

    def _info(self, track: TrackTables) -> _TrackInfo:
        info = self._tracks.get(track)
        if info is None:
            info = self._tracks[track] = _TrackInfo((track.codec, bytes(track.extradata or b"")))
        return info

    def _decoder(self, stream: _Stream) -> Any:
        """A decode session for a new stream: an idle one of the same configuration, flushed, or a new one."""
        config = stream.info.config
        for k, (c, ctx) in enumerate(self._idle):
            if c == config:
                del self._idle[k]
                ctx.flush()
                self.decoders_reused += 1
                return ctx
        self.decoders_created += 1
        return self.decoder.open(stream.track, self.threads)

    def _park(self, stream: _Stream, ctx: Any) -> None:
        """Keep a decoder no stream needs any more for the next stream (the oldest idle one goes)."""
        self._idle.append((stream.info.config, ctx))
        del self._idle[:-IDLE_DECODERS]

    def _retire(self, stream: _Stream) -> None:
        """A stream leaves the cache: its decoder goes idle, and the stream can no longer be resumed (a busy
        stream's decoder once its thread is done with it)."""
        if stream.busy:
            stream.retired = True
        elif stream.ctx is not None:
            self._park(stream, stream.ctx)
            stream.ctx = None

    def _trim(self, keep: tuple) -> None:
        """Drop the least recently used streams (never `keep`) while the frames kept exceed `max_bytes`."""
        total = sum(st.nbytes for st in self._streams.values())
        for k in list(self._streams):
            if total <= self.max_bytes:
                break
            if k != keep:
                dropped = self._streams.pop(k)
                total -= dropped.nbytes
                self._retire(dropped)

    def fetch_span(self, uri: str, track: TrackTables, first: int, upto: int) -> Optional[tuple[int, int]]:
        """The samples (lo, hi) whose bytes a random request for samples up to `upto` of the closure starting at
        `first` would fetch now (None: none, the stream has them): what `ReadAhead` fetches beforehand."""
        self._check_process()
        with self._lock:
            stream = self._streams.get((uri, first))
            if stream is None or stream.last < stream.first:
                return first, upto
            if upto <= stream.last:
                return None
            return stream.last + 1, max(upto, gop_end(track, stream.last))

    def _start(self, uri: str, track: TrackTables, first: int) -> _Stream:
        self.streams_started += 1
        return _Stream(uri=uri, track=track, info=self._info(track), first=first, last=first - 1, parts=[], fed=first)

    def _fetch(self, stream: _Stream, last: int) -> None:
        """Read the bytes of samples `stream.last + 1 .. last` in one batch of range reads."""
        tr = stream.track
        lo = stream.last + 1
        if last < lo:
            return
        off = tr.offset[lo:last + 1].tolist()
        size = tr.size[lo:last + 1].tolist()
        # byte-contiguous runs of samples, one read each (a camera's samples follow each other in its MP4)
        starts, ends, run, at = [off[0]], [], [0] * len(off), [0] * len(off)
        for k in range(1, len(off)):
            if off[k] != off[k - 1] + size[k - 1]:
                ends.append(off[k - 1] + size[k - 1])
                starts.append(off[k])
            run[k] = len(starts) - 1
            at[k] = off[k] - starts[-1]
        ends.append(off[-1] + size[-1])
        try:
            runs = None if self.read_ahead is None else self.read_ahead.take(stream.uri, starts, ends)
            if runs is None:
                runs = self.open_file(stream.uri).read_ranges(starts, ends)
        except LeRobotImportError as ex:
            raise ReaderError(f"cannot read video file {stream.uri}: {ex.message}") from None
        stream.parts.append(_Fetched(lo, last, [memoryview(r) for r in runs], run, at, size))
        stream.by_pts.update(zip(tr.pts[lo:last + 1].tolist(), range(lo, last + 1)))
        stream.last = last

    def _decode(self, stream: _Stream, data: Optional[memoryview], pts: int = 0, dts: int = 0,
                keyframe: bool = False) -> list:
        """`stream.ctx.decode(...)` with the cache's lock released (held again on return): the stream is busy
        meanwhile, so no other thread resumes it or hands its decoder to another stream."""
        ctx = stream.ctx
        stream.busy = True
        self._lock.release()
        try:
            return ctx.decode(data, pts, dts, keyframe)
        finally:
            self._lock.acquire()
            stream.busy = False
            self._turn.notify_all()

    def _asked(self, stream: _Stream, sample: int, own: bool = False) -> Optional[np.ndarray]:
        """The RGB frame of `sample` if the stream has decoded it (converted now if it is still YUV), else None;
        with `own`, an array of the caller's (the cache keeps what it had)."""
        found = stream.frames.get(sample)
        if found is None:
            return None
        if isinstance(found, np.ndarray):
            return found.copy() if own else found
        rgb = self.decoder.pixels(found)
        if not own:
            stream.frames[sample] = rgb
            stream.nbytes += rgb.nbytes - stream.info.frame_bytes
        return rgb

    def _frame(self, stream: _Stream, sample: int, upto: Optional[int] = None, own: bool = False) -> np.ndarray:
        """Feed the stream's decoder until `sample`'s frame comes out (or the stream is drained)."""
        found = self._asked(stream, sample, own)
        if found is not None:
            return found
        tr = stream.track
        if sample > stream.last:  # a frame further on than the bytes fetched: extend the stream
            if stream.fed > stream.first and stream.ctx is None:  # already drained: start it over
                stream.frames.clear()
                stream.parts.clear()
                stream.by_pts.clear()
                stream.nbytes = 0
                stream.last, stream.fed = stream.first - 1, stream.first
                self.streams_started += 1
            # A new stream reads only the decode closure of the frames asked of it in this request, up to the
            # last of them (a random read needs no more); a stream
            # asked again for a later frame is being walked through, so it reads the rest of the GOP at once
            # (one more request per GOP, not one per frame).
            self._fetch(stream, max(sample, upto or sample) if stream.last < stream.first else
                        max(sample, gop_end(tr, stream.last)))
        if stream.ctx is None and stream.fed == stream.first:
            stream.ctx = self._decoder(stream)
        info = stream.info
        by_pts = stream.by_pts

        def take(decoded) -> None:
            for pts, fr in decoded:
                s = by_pts.get(pts)
                if s is not None and s not in stream.frames:
                    stream.frames[s] = fr
                    if not info.frame_bytes:
                        info.frame_bytes = self.decoder.picture_bytes(fr)  # the same for every frame of a track
                    stream.nbytes += info.frame_bytes

        try:
            while sample not in stream.frames and stream.ctx is not None:
                if stream.fed <= stream.last:
                    s = stream.fed
                    part = stream.parts[0]
                    if s > part.hi:  # every sample of the oldest batch is fed: drop its bytes
                        stream.parts.pop(0)
                        part = stream.parts[0]
                    data, pts, dts, key = part.packet_bytes(s), int(tr.pts[s]), int(tr.dts[s]), bool(tr.sync[s])
                    stream.fed += 1
                    self.samples_decoded += 1
                    take(self._decode(stream, data, pts, dts, key))
                elif stream.last < gop_end(tr, stream.last):
                    # the decoder holds the frame back (it reorders): read the rest of the GOP
                    self._fetch(stream, gop_end(tr, stream.last))
                else:  # every sample of the GOP is in: drain the decoder's delayed frames
                    take(self._decode(stream, None))
                    self._park(stream, stream.ctx)  # drained: it holds nothing more of this stream
                    stream.ctx = None
        except DecodeFailed as ex:
            stream.ctx = None  # not reused: a failed decoder's state is not trusted
            raise ReaderError(f"decoding samples {stream.first}..{stream.last} of {stream.uri} failed: {ex}") from None
        found = self._asked(stream, sample, own)
        if found is None:
            raise ReaderError(f"decoding samples {stream.first}..{stream.last} of {stream.uri} did not output the "
                              f"frame of sample {sample}")
        return found

