"""Make MP4s and tiny LeRobot v3 datasets for tests: encode with PyAV, edit boxes, run the oracle.

* `encode(...)`: a short clip (H.264/HEVC/AV1, optional second video stream or an AAC track,
  optional faststart) with PyAV.
* `Box`, `parse_file`, `serialize_file`, `edit_moov`: a small box rewriter. Editing keeps every chunk
  offset pointing at the same sample bytes (offsets are shifted by how much the box holding them moved),
  so faststart files can be edited too.
* `make_dataset(root, {key: (mp4, codec)}, ...)`: a one-episode LeRobot v3 dataset around MP4s.
* `run_oracle(root)` / `oracle_index(mp4, ...)`: run the reference (tests/oracle.py), return its episodes / MediaIndex.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

try:  # the one oracle runner, the priority fix after an AV1 encode, the encoding child
    from tests.isolated import run_isolated
    from tests.scheduling import restore_normal_scheduling
    from tests.oracle import OracleError, reference_episodes, spiral_missing  # noqa: F401  (OracleError re-exported)
except ImportError:  # imported with tests/ itself on sys.path (the bench scripts)
    from isolated import run_isolated  # type: ignore[no-redef]
    from scheduling import restore_normal_scheduling  # type: ignore[no-redef]
    from oracle import OracleError, reference_episodes, spiral_missing  # type: ignore[no-redef]  # noqa: F401

#: The LeRobot-writer datasets of the project.
CORPUS = Path(__file__).resolve().parent / "data" / "lerobot"

#: Boxes whose payload is a list of boxes (the rewriter descends into them).
CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"dinf", b"mvex", b"udta", b"moof", b"traf"}


# ------------------------------------------------------------------------------------------------
# Encoding
# ------------------------------------------------------------------------------------------------

def encode(path: str | os.PathLike, *, codec: str = "libx264", frames: int = 30, width: int = 64, height: int = 48,
           fps: int = 30, options: Optional[dict] = None, faststart: bool = False, audio: bool = False,
           second_video: Optional[str] = None, second_size: tuple[int, int] = (32, 32),
           noise: bool = False) -> Path:
    """Encode a short synthetic clip (random noise with `noise`, for a large mdat); returns `path`.

    The encode runs in the test process's encoding child (tests/isolated.py says why)."""
    run_isolated(_encode_here, str(Path(path).absolute()), codec=codec, frames=frames, width=width, height=height,
                 fps=fps, options=options, faststart=faststart, audio=audio, second_video=second_video,
                 second_size=tuple(second_size), noise=noise)
    return Path(path)


def _encode_here(path: str, *, codec: str, frames: int, width: int, height: int, fps: int, options: Optional[dict],
                 faststart: bool, audio: bool, second_video: Optional[str], second_size: tuple[int, int],
                 noise: bool) -> None:
    """`encode` in this process."""
    import av

    container_options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), "w", format="mp4", options=container_options) as out:
        streams = []
        for c, (w, h) in [(codec, (width, height))] + ([(second_video, second_size)] if second_video else []):
            opts = dict(options or {})
            if c == "libx265":
                opts.setdefault("x265-params", "log-level=none")
            s = out.add_stream(c, rate=fps, options=opts)
            s.width, s.height, s.pix_fmt = w, h, "yuv420p"
            streams.append(s)
        astream = out.add_stream("aac", rate=48000) if audio else None
        rng = np.random.default_rng(0)
        apts = 0
        for i in range(frames):
            for s in streams:
                img = np.zeros((s.height, s.width, 3), dtype=np.uint8)
                img[:, :, 0] = (i * 8) % 256
                img[(i * 3) % s.height:, :, 1] = 200
                img[:, : (i * 5) % s.width, 2] = rng.integers(0, 255)
                if noise:
                    img = rng.integers(0, 256, img.shape, dtype=np.uint8)
                frame = av.VideoFrame.from_ndarray(img, format="rgb24")
                for p in s.encode(frame):
                    out.mux(p)
            if astream is not None:
                while apts < (i + 1) * 48000 // fps:
                    samples = np.sin(np.arange(1024) / 10.0).astype(np.float32)[None, :] * 0.1
                    af = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
                    af.sample_rate, af.pts, af.time_base = 48000, apts, Fraction(1, 48000)
                    for p in astream.encode(af):
                        out.mux(p)
                    apts += 1024
        for s in streams + ([astream] if astream is not None else []):
            for p in s.encode(None):
                out.mux(p)
    restore_normal_scheduling()


# ------------------------------------------------------------------------------------------------
# The box rewriter
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Box:
    """A box: a container (children) or a leaf (payload). `large` writes a 64-bit size header."""

    type: bytes
    payload: bytes = b""
    children: Optional[list["Box"]] = None
    large: bool = False
    #: Where the box started in the file it was parsed from (top-level boxes; used to move offsets).
    src_offset: Optional[int] = None

    def find(self, path: str) -> Optional["Box"]:
        """The first descendant at a '/'-separated path of types, e.g. 'trak/mdia/minf/stbl/stsz'."""
        node: Optional[Box] = self
        for part in path.split("/"):
            node = next((c for c in (node.children or []) if c.type == part.encode()), None) if node else None
        return node

    def find_all(self, type_: str) -> list["Box"]:
        out = []
        for c in self.children or []:
            if c.type == type_.encode():
                out.append(c)
            out.extend(c.find_all(type_))
        return out

    def body(self) -> bytes:
        return b"".join(c.serialize() for c in self.children) if self.children is not None else self.payload

    def serialize(self) -> bytes:
        body = self.body()
        if self.large or len(body) + 8 > 0xFFFFFFFF:
            return struct.pack(">I4sQ", 1, self.type, len(body) + 16) + body
        return struct.pack(">I4s", len(body) + 8, self.type) + body


def parse_boxes(data: bytes, start: int = 0, end: Optional[int] = None, *, top: bool = False) -> list[Box]:
    end = len(data) if end is None else end
    out, pos = [], start
    while pos + 8 <= end:
        size, type_ = struct.unpack_from(">I4s", data, pos)
        header = 8
        if size == 1:
            size = struct.unpack_from(">Q", data, pos + 8)[0]
            header = 16
        elif size == 0:
            size = end - pos
        body = data[pos + header:pos + size]
        if type_ in CONTAINERS:
            box = Box(type_, children=parse_boxes(data, pos + header, pos + size), large=header == 16)
        else:
            box = Box(type_, payload=body, large=header == 16)
        if top:
            box.src_offset = pos
        out.append(box)
        pos += size
    return out


def parse_file(data: bytes) -> list[Box]:
    return parse_boxes(data, top=True)


def _chunk_offset_boxes(moov: Box) -> list[Box]:
    return moov.find_all("stco") + moov.find_all("co64")


def read_chunk_offsets(box: Box) -> list[int]:
    n = struct.unpack_from(">I", box.payload, 4)[0]
    fmt = ">%dQ" % n if box.type == b"co64" else ">%dI" % n
    return list(struct.unpack_from(fmt, box.payload, 8))


def write_chunk_offsets(box: Box, offsets: list[int], *, as_co64: Optional[bool] = None) -> None:
    if as_co64 is not None:
        box.type = b"co64" if as_co64 else b"stco"
    fmt = ">%dQ" % len(offsets) if box.type == b"co64" else ">%dI" % len(offsets)
    box.payload = box.payload[:4] + struct.pack(">I", len(offsets)) + struct.pack(fmt, *offsets)


def serialize_file(boxes: list[Box], *, fix_offsets: bool = True) -> bytes:
    """Write top-level boxes, moving every chunk offset by as much as the box holding it moved
    (unless `fix_offsets` is False: then broken tables can be written as they are)."""
    new_starts = np.concatenate(([0], np.cumsum([len(b.serialize()) for b in boxes])[:-1])).tolist()
    moved = sorted((b.src_offset, ns) for b, ns in zip(boxes, new_starts) if b.src_offset is not None)

    def move(offset: int) -> int:
        before = [(orig, ns) for orig, ns in moved if orig <= offset]
        return offset if not before else offset - before[-1][0] + before[-1][1]

    for b in boxes if fix_offsets else []:
        if b.type == b"moov":
            for box in _chunk_offset_boxes(b):
                write_chunk_offsets(box, [move(o) for o in read_chunk_offsets(box)])
    return b"".join(b.serialize() for b in boxes)


def edit_moov(data: bytes, fn: Callable[[Box], None], *, fix_offsets: bool = True) -> bytes:
    """Apply `fn` to the parsed moov and write the file back with consistent chunk offsets.

    The layout is computed after `fn`; rewriting offsets keeps their width, so sizes do not change again."""
    boxes = parse_file(data)
    moov = next(b for b in boxes if b.type == b"moov")
    fn(moov)
    return serialize_file(boxes, fix_offsets=fix_offsets)


def full(version: int, flags: int = 0) -> bytes:
    return struct.pack(">I", (version << 24) | flags)


def stbl_of(moov: Box, track: int = 0) -> Box:
    return [t for t in moov.children if t.type == b"trak"][track].find("mdia/minf/stbl")


def video_traks(moov: Box) -> list[Box]:
    return [t for t in moov.children if t.type == b"trak" and t.find("mdia/hdlr").payload[8:12] == b"vide"]


def set_stss(stbl: Box, numbers: Iterable[int]) -> None:
    numbers = list(numbers)
    payload = full(0) + struct.pack(">I", len(numbers)) + struct.pack(">%dI" % len(numbers), *numbers)
    box = stbl.find("stss")
    if box is None:
        stbl.children.append(Box(b"stss", payload))
    else:
        box.payload = payload


def set_elst(trak: Box, entries: list[tuple[int, int, int]], version: int = 0) -> None:
    """entries: (duration, media_time, rate as raw 16.16)."""
    fmt = ">QqI" if version == 1 else ">IiI"
    body = full(version) + struct.pack(">I", len(entries)) + b"".join(struct.pack(fmt, d, m, r & 0xFFFFFFFF)
                                                                       for d, m, r in entries)
    edts = trak.find("edts")
    if edts is None:
        trak.children.insert(1, Box(b"edts", children=[Box(b"elst", body)]))
    else:
        edts.children = [Box(b"elst", body)]


def set_constant_stsz(stbl: Box, size: int) -> None:
    stsz = stbl.find("stsz")
    count = struct.unpack_from(">I", stsz.payload, 8)[0]
    stsz.payload = full(0) + struct.pack(">II", size, count)


def stsz_to_stz2(stbl: Box, field_size: int) -> None:
    stsz = stbl.find("stsz")
    count = struct.unpack_from(">I", stsz.payload, 8)[0]
    sizes = np.frombuffer(stsz.payload, ">u4", count, 12).astype(np.int64)
    if field_size == 16:
        packed = sizes.astype(">u2").tobytes()
    elif field_size == 8:
        packed = (sizes & 0xFF).astype("u1").tobytes()
    else:
        nib = list(sizes & 15) + ([0] if count % 2 else [])
        packed = bytes((nib[i] << 4) | nib[i + 1] for i in range(0, len(nib), 2))
    stsz.type = b"stz2"
    stsz.payload = full(0) + bytes([0, 0, 0, field_size]) + struct.pack(">I", count) + packed


def to_co64_and_large(moov: Box) -> None:
    """Every chunk-offset table becomes co64 and every box inside moov gets a 64-bit size header."""
    for box in _chunk_offset_boxes(moov):
        write_chunk_offsets(box, read_chunk_offsets(box), as_co64=True)

    def mark(b: Box) -> None:
        b.large = True
        for c in b.children or []:
            mark(c)
    mark(moov)


def large_top_level(data: bytes) -> bytes:
    """Write every top-level box with a 64-bit size header (offsets follow)."""
    boxes = parse_file(data)
    for b in boxes:
        b.large = True
    return serialize_file(boxes)


def moov_bytes(data: bytes) -> bytes:
    """The moov box of a file, found by walking top-level headers."""
    pos = 0
    while pos + 8 <= len(data):
        size, type_ = struct.unpack_from(">I4s", data, pos)
        if size == 1:
            size = struct.unpack_from(">Q", data, pos + 8)[0]
        elif size == 0:
            size = len(data) - pos
        if type_ == b"moov":
            return data[pos:pos + size]
        pos += size
    raise ValueError("no moov")


# ------------------------------------------------------------------------------------------------
# A tiny LeRobot v3 dataset around MP4s, and the oracle
# ------------------------------------------------------------------------------------------------

try:  # the 5 default columns, as the dataset factory writes them
    from tests.dataset_factory import DEFAULTS as DEFAULT_FEATURES
except ImportError:  # imported with tests/ itself on sys.path (the bench scripts)
    from dataset_factory import DEFAULTS as DEFAULT_FEATURES  # type: ignore[no-redef]
#: LeRobot's `video.codec` label per encoder family.
CODEC_LABEL = {"libx264": "h264", "h264": "h264", "libx265": "hevc", "hevc": "hevc", "libsvtav1": "av1", "av1": "av1"}


def make_dataset(root: str | os.PathLike, videos: dict[str, tuple[str | os.PathLike, str]], *, fps: int = 30,
                 length: int = 10, from_timestamp: float = 0.0, to_timestamp: Optional[float] = None,
                 copy: bool = True) -> Path:
    """A one-episode LeRobot v3 dataset at `root` whose video features are `videos`:
    {key: (mp4 path, declared codec label "h264" | "hevc" | "av1" | ...)}.

    The MP4s are symlinked (or copied) to videos/<key>/chunk-000/file-000.mp4. Returns `root`."""
    root = Path(root)
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    (root / "data" / "chunk-000").mkdir(parents=True, exist_ok=True)
    to_timestamp = length / fps if to_timestamp is None else to_timestamp
    features = {}
    for key, (mp4, codec) in videos.items():
        features[key] = {"dtype": "video", "shape": [48, 64, 3], "names": ["height", "width", "channels"],
                         "info": {"video.codec": codec, "video.fps": fps, "video.pix_fmt": "yuv420p"}}
        dst = root / "videos" / key / "chunk-000" / "file-000.mp4"
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists() or dst.is_symlink():
            dst.unlink()
        if copy:
            shutil.copyfile(mp4, dst)
        else:
            dst.symlink_to(Path(mp4).resolve())
    features.update(DEFAULT_FEATURES)
    info = {
        "codebase_version": "v3.0", "robot_type": "test", "total_episodes": 1, "total_frames": length,
        "total_tasks": 1, "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200,
        "fps": fps, "splits": {"train": "0:1"},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": features,
    }
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    pq.write_table(pa.table({
        "timestamp": pa.array([i / fps for i in range(length)], pa.float32()),
        "frame_index": pa.array(range(length), pa.int64()),
        "episode_index": pa.array([0] * length, pa.int64()),
        "index": pa.array(range(length), pa.int64()),
        "task_index": pa.array([0] * length, pa.int64()),
    }), root / "data" / "chunk-000" / "file-000.parquet")
    pq.write_table(pa.table({"task_index": pa.array([0], pa.int64()), "task": ["do the thing"]}),
                   root / "meta" / "tasks.parquet")
    episodes = {
        "episode_index": pa.array([0], pa.int64()),
        "tasks": pa.array([["do the thing"]], pa.list_(pa.string())),
        "length": pa.array([length], pa.int64()),
        "data/chunk_index": pa.array([0], pa.int64()), "data/file_index": pa.array([0], pa.int64()),
        "dataset_from_index": pa.array([0], pa.int64()), "dataset_to_index": pa.array([length], pa.int64()),
    }
    for key in videos:
        episodes[f"videos/{key}/chunk_index"] = pa.array([0], pa.int64())
        episodes[f"videos/{key}/file_index"] = pa.array([0], pa.int64())
        episodes[f"videos/{key}/from_timestamp"] = pa.array([from_timestamp], pa.float64())
        episodes[f"videos/{key}/to_timestamp"] = pa.array([to_timestamp], pa.float64())
    pq.write_table(pa.table(episodes), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    return root


def spiral_available() -> bool:
    return spiral_missing() is None


def run_oracle(root: str | os.PathLike, episodes: str = "meta/episodes/chunk-000/file-000.parquet") -> pa.Table:
    """The reference's episodes (one row per episode) for one episodes file of `root` (tests/oracle.py)."""
    return reference_episodes(root, episodes)


def _storage(a: pa.Array) -> pa.Array:
    from transforms.episode.spql_types import storage_of  # the one unwrap of spql.* extension arrays
    return storage_of(a)


def indexes_of(episodes: pa.Table) -> dict[str, Optional[dict]]:
    """{file path: MediaIndex as Python (to_pylist of its storage)} for every video of every episode."""
    out: dict[str, Optional[dict]] = {}
    if "videos" not in episodes.column_names:
        return out
    videos = episodes.column("videos").combine_chunks()
    for i in range(videos.type.num_fields):
        clip = _storage(videos.field(i).field("clip"))
        media = _storage(clip.field("media"))
        uris = _storage(media.field("source")).field("uri").to_pylist()
        for uri, index in zip(uris, _storage(media.field("index")).to_pylist()):
            path = os.path.realpath(uri[len("file://"):] if uri.startswith("file://") else uri)
            out[path] = index
    return out


def oracle_index(mp4: str | os.PathLike, codec: str, workdir: str | os.PathLike) -> Optional[dict]:
    """The reference's MediaIndex of one MP4 (built inside a one-episode dataset in `workdir`).

    Raises OracleError with the reference's message when it rejects the file."""
    root = make_dataset(Path(workdir) / f"ds_{Path(mp4).stem}", {"observation.images.cam": (mp4, codec)})
    table = run_oracle(root)
    return _storage(_storage(_storage(table.column("videos").combine_chunks().field(0).field("clip")).field(
        "media")).field("index")).to_pylist()[0]


# ------------------------------------------------------------------------------------------------
# Hostile MP4s: files that cost far more to index than their size suggests
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class RawBytes(Box):
    """Bytes written as they are where a box would be: many boxes at once (millions of tiny ones)."""

    def serialize(self) -> bytes:
        return self.payload


def filler_boxes(count: int, type_: bytes = b"free") -> RawBytes:
    """`count` empty 8-byte boxes, written in one go."""
    return RawBytes(type_, struct.pack(">I4s", 8, type_) * count)


def set_track_id(trak: Box, track_id: int) -> None:
    tkhd = trak.find("tkhd")
    at = 20 if tkhd.payload[0] == 1 else 12
    tkhd.payload = tkhd.payload[:at] + struct.pack(">I", track_id) + tkhd.payload[at + 4:]


def set_timescale(box: Box, timescale: int) -> None:
    """The timescale of an `mdhd` or `mvhd` box (version 0 or 1)."""
    at = 20 if box.payload[0] == 1 else 12
    box.payload = box.payload[:at] + struct.pack(">I", timescale) + box.payload[at + 4:]


def with_children(data: bytes, path: Optional[str], count: int) -> bytes:
    """`data` with `count` empty `free` boxes added at the end of the box at `path` inside moov
    ("" for moov itself, e.g. "trak/mdia/minf/stbl"), or at the top level when `path` is None."""
    boxes = parse_file(data)
    if path is None:
        return serialize_file(boxes + [filler_boxes(count)])
    moov = next(b for b in boxes if b.type == b"moov")
    target = moov.find(path) if path else moov
    target.children.append(filler_boxes(count))
    return serialize_file(boxes)


def constant_stsz_file(path: str | os.PathLike, base: bytes, count: int, *, tracks: int = 1,
                       sample_size: int = 1) -> Path:
    """A sparse file whose moov (about 1 KB per track) declares `count` samples of `sample_size` bytes per
    video track: a constant-size `stsz`, one `stts` run, one chunk, no `stss` (every sample a sync sample),
    in `tracks` copies of `base`'s video track; the mdat is big enough to hold them all but never written
    (zeros, sparse on disk)."""
    boxes = parse_file(base)
    ftyp = next(b for b in boxes if b.type == b"ftyp")
    moov = next(b for b in boxes if b.type == b"moov")
    trak = video_traks(moov)[0]
    stbl = trak.find("mdia/minf/stbl")
    stbl.children = [c for c in stbl.children if c.type not in (b"stss", b"ctts", b"stz2")]
    stbl.find("stts").payload = full(0) + struct.pack(">III", 1, count, 512)
    stbl.find("stsc").payload = full(0) + struct.pack(">IIII", 1, 1, count, 1)
    stbl.find("stsz").payload = full(0) + struct.pack(">II", sample_size, count)
    for b in _chunk_offset_boxes(moov):
        write_chunk_offsets(b, [0])
    import copy
    moov.children = [c for c in moov.children if c is not trak]
    for i in range(tracks):
        t = copy.deepcopy(trak)
        set_track_id(t, i + 1)
        moov.children.append(t)
    data_start = len(ftyp.serialize()) + len(moov.serialize()) + 16
    for b in _chunk_offset_boxes(moov):
        write_chunk_offsets(b, [data_start])
    mdat_size = 16 + count * sample_size
    path = Path(path)
    with open(path, "wb") as f:
        f.write(ftyp.serialize() + moov.serialize() + struct.pack(">I4sQ", 1, b"mdat", mdat_size))
        f.truncate(data_start + count * sample_size)
    return path


def huge_moov_file(path: str | os.PathLike, base: bytes, extra: int) -> Path:
    """A sparse file: `base` with its moov moved to the end and grown by a `free` child of `extra`
    bytes (zeros, never written), so the moov box declares about `extra` bytes."""
    boxes = [b for b in parse_file(base) if b.type != b"free"]
    moov = next(b for b in boxes if b.type == b"moov")
    boxes = [b for b in boxes if b is not moov] + [moov]
    moov.large = True
    moov.children.append(Box(b"free", b"", large=True))
    head = bytearray(serialize_file(boxes))
    moov_start = len(head) - len(moov.serialize())
    struct.pack_into(">Q", head, moov_start + 8, len(moov.serialize()) + extra)
    struct.pack_into(">Q", head, len(head) - 8, 16 + extra)
    path = Path(path)
    with open(path, "wb") as f:
        f.write(bytes(head))
        f.truncate(len(head) + extra)
    return path


def lfs_pointer(size: int = 4702) -> bytes:
    """What a git clone without git-LFS holds where a file should be."""
    return (b"version https://git-lfs.github.com/spec/v1\n"
            b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
            + f"size {size}\n".encode())


def set_sample_entry_type(data: bytes, fourcc: bytes) -> bytes:
    """The video track's first sample entry renamed to `fourcc` (its body kept)."""
    def edit(moov: Box) -> None:
        stsd = stbl_of(moov).find("stsd")
        stsd.payload = stsd.payload[:12] + fourcc + stsd.payload[16:]
    return edit_moov(data, edit)


def synthetic_mp4(path: str | os.PathLike, base: bytes, sample_sizes: np.ndarray, *, keyframe_every: int = 2,
                  keyframes: Optional[np.ndarray] = None, chunk_samples: int = 30) -> Path:
    """A sparse MP4 shaped like a long encoded video without encoding it: `base`'s video track (its sample
    entry, timescale and frame duration) with one sample per entry of `sample_sizes`, a keyframe where
    `keyframes` is true (else every `keyframe_every` samples: LeRobot's g=2), chunks of `chunk_samples`
    samples, the moov first (faststart) and the mdat declared but never written (zeros, sparse on disk).
    The import reads only the moov; a decoder would see garbage."""
    sizes = np.asarray(sample_sizes, dtype=np.int64)
    count = len(sizes)
    boxes = parse_file(base)
    ftyp = next(b for b in boxes if b.type == b"ftyp")
    moov = next(b for b in boxes if b.type == b"moov")
    trak = video_traks(moov)[0]
    moov.children = [c for c in moov.children if c.type != b"trak" or c is trak]
    stbl = trak.find("mdia/minf/stbl")
    delta = struct.unpack_from(">I", stbl.find("stts").payload, 12)[0]
    stbl.children = [c for c in stbl.children if c.type not in (b"ctts", b"stz2", b"sdtp", b"sgpd", b"sbgp")]
    stbl.find("stts").payload = full(0) + struct.pack(">III", 1, count, delta)
    stbl.find("stsz").payload = full(0) + struct.pack(">II", 0, count) + sizes.astype(">u4").tobytes()
    set_stss(stbl, (np.flatnonzero(keyframes) + 1).tolist() if keyframes is not None
             else range(1, count + 1, keyframe_every))
    chunks = (count + chunk_samples - 1) // chunk_samples
    last = count - (chunks - 1) * chunk_samples
    runs = [(1, chunk_samples)] + ([(chunks, last)] if last != chunk_samples else [])
    stbl.find("stsc").payload = full(0) + struct.pack(">I", len(runs)) + b"".join(
        struct.pack(">III", first, n, 1) for first, n in runs)
    ticks = count * delta
    for name, offsets in (("mdia/mdhd", (16, 24)), ("tkhd", (20, 28))):  # the duration field (version 0, 1)
        box = trak.find(name)
        v1 = box.payload[0] == 1
        at, field = offsets[v1], struct.pack(">Q", ticks) if v1 else struct.pack(">I", min(ticks, 0xFFFFFFFF))
        box.payload = box.payload[:at] + field + box.payload[at + len(field):]
    trak.children = [c for c in trak.children if c.type != b"edts"]
    co = _chunk_offset_boxes(moov)[0]
    chunk_bytes = np.add.reduceat(sizes, np.arange(0, count, chunk_samples))
    write_chunk_offsets(co, [0] * chunks, as_co64=True)
    data_start = len(ftyp.serialize()) + len(moov.serialize()) + 16
    offsets = data_start + np.concatenate([[0], np.cumsum(chunk_bytes)[:-1]])
    co.payload = co.payload[:8] + offsets.astype(">u8").tobytes()
    total = int(sizes.sum())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(ftyp.serialize() + moov.serialize() + struct.pack(">I4sQ", 1, b"mdat", 16 + total))
        f.truncate(data_start + total)
    return path
