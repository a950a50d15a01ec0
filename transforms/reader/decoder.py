"""The one seam between the training reader and a video decoder.

`GopCache` (and so every camera frame of an `ImportedFrames` item) decodes through a `Decoder`: it
fetches a GOP's bytes by range from the MediaIndex, hands them to a `DecodeSession` one sample at a
time in decode order, matches the pictures that come out to samples by their presentation time, and
asks the decoder for each picture it returns as pixels. What the decoder is (PyAV on the CPU here; a
GPU decoder where one is present) is chosen in one place, `default_decoder()`, or given as
`ImportedFrames(decoder=...)`; item building (windows, float conversion, depth, transforms) never sees it.

A decoder must hand back what LeRobot's decoders give for the same sample: for a colour track its RGB values
(BT.601 limited range, as FFmpeg's `rgb24` conversion gives them) as contiguous 3 x H x W uint8, channels
first as the items hold them; a depth map's codes as H x W x 1 uint16 for a track of more-than-8-bit grey
pictures. The items' equality tests against LeRobot's recorded
items hold any decoder to that.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

import numpy as np

from transforms.reader.seek import ReaderError, TrackTables, _codec_context, code_array, is_code_frame

__all__ = ["DecodeFailed", "DecodeSession", "Decoder", "PyAVDecoder", "default_decoder"]


class DecodeFailed(ReaderError):
    """A decoder could not decode the bytes it was given (the caller names the file and samples)."""


class DecodeSession(Protocol):
    """One decoder instance for one track configuration, fed samples in decode order."""

    def decode(self, data: Optional[memoryview], pts: int, dts: int, keyframe: bool) -> Sequence[tuple[int, Any]]:
        """Feed one sample's bytes (None: drain the pictures still held back); the pictures output now, as
        (presentation time in the track's timescale, picture) pairs. Raises DecodeFailed."""

    def flush(self) -> None:
        """Forget every picture held, so the next sample may start another GOP of the same configuration."""


class Decoder(Protocol):
    """Makes decode sessions and turns their pictures into pixels. Picklable: a DataLoader worker gets a copy."""

    def open(self, track: TrackTables, threads: int) -> DecodeSession:
        """A session for `track`'s codec and configuration (its extradata), decoding with `threads` threads."""

    def pixels(self, picture: Any) -> np.ndarray:
        """A picture's RGB values as contiguous 3 x H x W uint8 (a depth map's codes: H x W x 1 uint16), in a new
        array each call (the caller may keep it: a random read hands it to its item without copying)."""

    def picture_bytes(self, picture: Any) -> int:
        """Bytes a picture holds while it is kept undecoded to pixels (for the cache's memory bound)."""

    def preload(self) -> None:
        """Import or initialise what the first picture would otherwise pay for (called in the process that
        makes the dataset, so forked workers start with it)."""

    def new_process(self) -> None:
        """Drop per-process state (called in a process other than the one that made the decoder)."""


class _PyAVSession:
    """A PyAV codec context behind `DecodeSession`."""

    def __init__(self, ctx: Any, time_base: Any) -> None:
        self.ctx, self.time_base = ctx, time_base

    def decode(self, data: Optional[memoryview], pts: int = 0, dts: int = 0,
               keyframe: bool = False) -> list[tuple[int, Any]]:
        import av

        pkt = None
        if data is not None:
            pkt = av.Packet(data)
            pkt.pts, pkt.dts, pkt.time_base = pts, dts, self.time_base
            if keyframe:
                pkt.is_keyframe = True
        try:
            return [(fr.pts, fr) for fr in self.ctx.decode(pkt)]
        except av.error.FFmpegError as ex:
            raise DecodeFailed(str(ex)) from None

    def flush(self) -> None:
        self.ctx.flush_buffers()


class PyAVDecoder:
    """FFmpeg's software decoders through PyAV (libdav1d for AV1, FFmpeg's h264 and hevc), converted to RGB by
    swscale, one converter per picture geometry (a picture's own `to_ndarray(format=...)` sets up a new
    scaler each time, which costs more than decoding a small frame; the pixels are the same either way).

    The conversion is to planar RGB (`gbrp`), not packed `rgb24`: swscale computes the same values (equal on
    every frame of the test datasets, and the items' equality tests against LeRobot hold it to that), in
    about the same time, but each channel comes out as its own plane, so the picture is channels-first
    (C x H x W, as an item holds it) with no transposing copy, and the float conversion and the DataLoader's
    collation then walk contiguous memory."""

    name = "pyav"

    def __init__(self) -> None:
        self._converters: dict = {}

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._converters = {}

    def open(self, track: TrackTables, threads: int) -> _PyAVSession:
        from fractions import Fraction
        return _PyAVSession(_codec_context(track, threads), Fraction(1, track.timescale))

    def pixels(self, picture: Any) -> np.ndarray:
        if is_code_frame(picture):
            return code_array(picture)
        key = (picture.width, picture.height, picture.format.name)
        convert = self._converters.get(key)
        if convert is None:
            from av.video.reformatter import VideoReformatter
            convert = self._converters[key] = VideoReformatter()
        planar = convert.reformat(picture, format="gbrp", threads=1)
        h, w = planar.height, planar.width
        out = np.empty((3, h, w), np.uint8)
        for channel, plane in zip((1, 2, 0), planar.planes):  # gbrp's planes are G, B, R
            out[channel] = np.frombuffer(plane, np.uint8).reshape(h, plane.line_size)[:, :w]
        return out

    def picture_bytes(self, picture: Any) -> int:
        return sum(p.buffer_size for p in picture.planes)

    def preload(self) -> None:
        try:  # ~65 ms each forked worker would spend on its first item otherwise
            import av  # noqa: F401
            from av.video.reformatter import VideoReformatter  # noqa: F401
        except ImportError:  # the first video item says what is missing
            pass

    def new_process(self) -> None:
        self._converters = {}


def default_decoder() -> Decoder:
    """The decoder the reader uses unless told otherwise: the one place a decoder is chosen (a GPU decoder,
    where one is present and wanted, is picked here or passed as `ImportedFrames(decoder=...)`)."""
    return PyAVDecoder()
