"""Figures for the moov reader and MediaIndex builder (a script, not a test).

    /work/venv/bin/python tests/bench/bench_media_index.py [--samples 1000000]

Prints:
1. range requests and bytes read per corpus MP4 (and for ~800 KB files with moov at the end / start);
2. the time to parse a moov of N samples (default 1,000,000) and to build its Arrow value, next to
   PyAV demuxing the SAME file packet by packet. The file is synthetic: an H.264 clip's moov whose
   sample tables are rewritten to N samples (B-frame-like ctts, a sync sample every 30, 10 samples
   per chunk, co64) over an mdat of N small random samples. Demuxing does not decode, so PyAV walks
   exactly N packets; it is the cost a reader without our index pays to learn the same tables.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

import fsspec
import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parents[1]))

import mp4_factory as F  # noqa: E402
from transforms.mp4.media_index import media_index_array, parse_media_index, read_media_index  # noqa: E402


def read_costs(tmp: Path) -> None:
    print("== 1. Read cost (head read = 64 KiB) ==")
    print(f"{'file':<72} {'size':>8} {'moov':>7} {'requests':>8} {'bytes read':>10}")
    fs = fsspec.filesystem("file")
    files = sorted(str(p) for p in F.CORPUS.glob("*/videos/**/*.mp4"))
    end = F.encode(tmp / "noise_moov_at_end.mp4", frames=40, width=160, height=120, noise=True, options={"crf": "5"})
    start = F.encode(tmp / "noise_faststart.mp4", frames=40, width=160, height=120, noise=True,
                     options={"crf": "5"}, faststart=True)
    for p in files + [str(end), str(start)]:
        r = read_media_index(fs, p)
        name = "/".join(Path(p).parts[-5:]) if p in files else Path(p).name
        print(f"{name:<72} {r.size:>8} {r.moov_size:>7} {r.stats.requests:>8} {r.stats.bytes_read:>10}")


def synthetic_file(template: bytes, n: int, path: Path, sample_size_max: int = 16) -> tuple[int, int]:
    """Write an MP4 with `n` samples: ftyp, mdat of random bytes, and a moov made from `template`'s
    with rewritten sample tables. Returns (file size, moov size)."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(4, sample_size_max, n, dtype=np.int64)
    boxes = F.parse_file(template)
    ftyp = next(b for b in boxes if b.type == b"ftyp").serialize()
    mdat_header = struct.pack(">I4sQ", 1, b"mdat", 16 + int(sizes.sum()))
    data_start = len(ftyp) + len(mdat_header)
    per_chunk = 10
    chunk_starts = np.concatenate(([0], np.cumsum(sizes)))[::per_chunk][: (n + per_chunk - 1) // per_chunk]
    pattern = np.array([1024, 2560, 1024, 0, 512], dtype=np.int64)  # an IBBP-like ctts cycle

    def tables(moov: F.Box) -> None:
        stbl = F.stbl_of(moov)
        keep = [c for c in stbl.children if c.type == b"stsd"]
        full = F.full(0)
        ctts = np.empty((n, 2), dtype=">u4")
        ctts[:, 0] = 1
        ctts[:, 1] = pattern[np.arange(n) % len(pattern)]
        stss = np.arange(1, n + 1, 30, dtype=">u4")
        keep += [
            F.Box(b"stts", full + struct.pack(">III", 1, n, 512)),
            F.Box(b"ctts", full + struct.pack(">I", n) + ctts.tobytes()),
            F.Box(b"stss", full + struct.pack(">I", len(stss)) + stss.tobytes()),
            F.Box(b"stsc", full + struct.pack(">IIII", 1, 1, per_chunk, 1)),
            F.Box(b"stsz", full + struct.pack(">II", 0, n) + sizes.astype(">u4").tobytes()),
            F.Box(b"co64", full + struct.pack(">I", len(chunk_starts))
                  + (chunk_starts + data_start).astype(">u8").tobytes()),
        ]
        stbl.children = keep
        mdhd = F.video_traks(moov)[0].find("mdia/mdhd")
        mdhd.payload = mdhd.payload[:16] + struct.pack(">I", n * 512) + mdhd.payload[20:]
        moov.find("trak").children = [c for c in moov.find("trak").children if c.type != b"edts"]

    moov = next(b for b in boxes if b.type == b"moov")
    tables(moov)
    moov_bytes = moov.serialize()
    with open(path, "wb") as f:
        f.write(ftyp)
        f.write(mdat_header)
        f.write(rng.integers(0, 256, int(sizes.sum()), dtype=np.uint8).tobytes())
        f.write(moov_bytes)
    return path.stat().st_size, len(moov_bytes)


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def parse_speed(tmp: Path, n: int) -> None:
    import av
    print(f"\n== 2. A moov of {n:,} samples ==")
    template = F.encode(tmp / "template.mp4", frames=30, options={"bframes": "3"}).read_bytes()
    path = tmp / "synthetic.mp4"
    size, moov_size = synthetic_file(template, n, path)
    moov = F.moov_bytes(path.read_bytes())
    print(f"file {size:,} bytes, moov {moov_size:,} bytes")
    index = parse_media_index(moov, file=str(path))
    assert len(index.tracks[0].sizes) == n
    t_parse = best_of(lambda: parse_media_index(moov, file=str(path)), 5)
    t_arrow = best_of(lambda: media_index_array(index), 5)
    fs = fsspec.filesystem("file")
    t_read = best_of(lambda: read_media_index(fs, str(path)), 3)
    r = read_media_index(fs, str(path))
    print(f"parse_media_index (moov bytes -> numpy tables): {t_parse * 1e3:8.1f} ms   (target < 500 ms)")
    print(f"media_index_array (tables -> Arrow):            {t_arrow * 1e3:8.1f} ms")
    print(f"read_media_index  (local file, end to end):     {t_read * 1e3:8.1f} ms   "
          f"[{r.stats.requests} requests, {r.stats.bytes_read:,} bytes]")

    def demux() -> int:
        count = 0
        with av.open(str(path)) as c:
            for p in c.demux(c.streams.video[0]):
                if p.size:
                    count += 1
        return count
    t = time.perf_counter()
    packets = demux()
    t_av = time.perf_counter() - t
    print(f"PyAV demux of the same file ({packets:,} packets, open + read every packet): {t_av * 1e3:8.1f} ms "
          f"   ({t_av / t_read:.0f}x our end-to-end time; it also reads all {size:,} bytes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        read_costs(tmp)
        parse_speed(tmp, args.samples)


if __name__ == "__main__":
    os.environ.setdefault("AV_LOG_LEVEL", "quiet")
    main()
