"""lerobot-beam-import: LeRobot v3 datasets as typed episode records, with Apache Beam.

The Beam layer is this package's top-level modules (the import's steps, thin adapters over `transforms.work`);
everything beneath it is in sub-packages, pure, and never imports Beam. They depend one way, downward:

    transforms.base       the ground floor: errors, storage (fsspec I/O), the Hub, run limits, stopping
    transforms.lerobot    the input format: info.json, episodes files, data-file slices, fingerprints
    transforms.mp4        MP4 media: range reads, the box walk, moov -> MediaIndex
    transforms.language   language annotations, training recipes and their rendering
    transforms.episode    the record: spql.* types, the episode type, frames, clips, outcomes
    transforms.output     the output folder: paths, writes, its state read back, shards, journal, lease
    transforms.quality    data-quality checks of an import's frames, sample times and metadata (findings)
    transforms.work       each step's work on one element, without Beam, and the elements the steps pass
    transforms.reader     reading an import back: ImportReader, Episode, frame seeks, ImportedFrames, query
"""

import os as _os
import sys as _sys

#: The allocator option set before Arrow loads (see below), unless the process chose its own.
ARROW_ALLOCATOR_ENV = {"MIMALLOC_ARENA_EAGER_COMMIT": "0"}

# Arrow's default allocator (mimalloc) commits its first arena whole, and with transparent huge pages the
# kernel zeroes it at once: the first row group a process reads costs 20-400 ms more and ~160 MB more resident
# memory, in every DataLoader worker of a training run (measured: the first 20 random items of an import 0.28-
# 0.85 s, 0.22-0.30 s without it; peak RSS 580 -> 420 MB), for no speed afterwards. The option is read once,
# when Arrow's library loads, so it is set only while pyarrow is not yet imported, and never over a value the
# process set itself.
if "pyarrow" not in _sys.modules:
    for _key, _value in ARROW_ALLOCATOR_ENV.items():
        _os.environ.setdefault(_key, _value)
