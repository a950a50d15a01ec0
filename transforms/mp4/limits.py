"""What reading one MP4's index may cost, at most: the bounds that keep a hostile file cheap.

An MP4's boxes declare their own sizes and counts, so a few bytes can ask for gigabytes (a 20-byte
constant-size `stsz` declaring 2^24 samples) or for millions of reads (millions of 8-byte top-level
boxes). Each bound below is far above what a real LeRobot file needs and far below what would hurt a
worker; passing one fails the file with rule `mp4_limits` and a message naming the limit.
"""

from __future__ import annotations

import dataclasses

from transforms.base.errors import LeRobotImportError


@dataclasses.dataclass(frozen=True)
class Limits:
    """The bounds of one MP4 read (see each field); tests and the fuzzer lower them."""

    #: Samples of all indexed video tracks of one file together. LeRobot rolls video files over at a
    #: few hundred MB, i.e. minutes to an hour or two of video per file; an hour at 120 fps is 432,000
    #: samples. 2^21 (2,097,152) is 4.8 hours at 120 fps or 19 hours at 30 fps, and indexing it costs
    #: a few hundred MB at most.
    max_samples: int = 1 << 21
    #: Bytes of the moov box. A video sample costs about 12-20 bytes of sample tables (stsz 4, ctts 8
    #: with B-frames, stco/stsc per chunk, stss per keyframe): `max_samples` of them fit in 40 MiB;
    #: audio tracks and metadata boxes add a few percent. Real LeRobot moovs are kilobytes to a few MB.
    max_moov_bytes: int = 64 << 20
    #: Children of one box inside moov. moov holds mvhd, one trak per track, udta/meta; an stbl about
    #: fifteen tables. 1,024 allows a thousand tracks.
    max_children: int = 1024
    #: Boxes walked inside moov, all levels together: a track is about 25 boxes.
    max_boxes: int = 16384
    #: Top-level boxes of the file: ffmpeg writes four (ftyp, moov, free, mdat); other writers add a
    #: few `free`, `skip`, `uuid` or `meta` boxes.
    max_top_level_boxes: int = 1024
    #: Range requests to find moov: one for the head, one per jump over a large box (mdat) to the next
    #: header, one for the rest of moov. A real file needs 1 to 3; each costs a round trip (a GET on
    #: an object store).
    max_requests: int = 32


DEFAULT_LIMITS = Limits()


def limit_error(file: str, message: str, name: str, limits: Limits = DEFAULT_LIMITS) -> LeRobotImportError:
    """An `mp4_limits` failure: `message` says what the file asks for; the limit is named after it."""
    return LeRobotImportError("mp4_limits", f"{message} (limit `{name}` = {getattr(limits, name):,}, far above "
                                            "what real video files need: the file is refused, not read)", file=file)
