"""Reading an import back: ImportReader, Episode, and frame-exact seeks through the MediaIndex. Pure: no Beam.

    import_reader.py  ImportReader: an output's parts and media_index/, episodes by index or in order
    episode.py        Episode: one logical episode, frame fields as numpy, cameras as VideoHandles
    seek.py           TrackTables from a MediaIndex, VideoHandle, frame seeks and decodes
    confine.py        where a reader may read (the import root, the dataset root, given roots)
    frames.py         ImportedFrames: a PyTorch dataset of LeRobot items over an import (needs torch)
    gop_cache.py      GopCache: decoded GOPs and open video files kept per process
    decoder.py        Decoder: the one seam to a video decoder (PyAVDecoder, chosen by default_decoder)
    threads.py        ThreadChoice: an item's decode threads, chosen by timing items
    samplers.py       training orders: EpisodeAwareSampler (LeRobot's), GopBlockSampler (GOP-keeping shuffle)
"""

from transforms.reader.episode import Episode, VideoAccess
from transforms.reader.import_reader import ImportReader, MediaIndexStore, RowGroupRef
from transforms.reader.seek import DEFAULT_TOLERANCE, ReaderError, TrackTables, VideoHandle

__all__ = ["DEFAULT_TOLERANCE", "Episode", "ImportReader", "MediaIndexStore", "ReaderError", "RowGroupRef",
           "TrackTables", "VideoAccess", "VideoHandle", "EpisodeAwareSampler", "GopBlockSampler", "ImportedFrames",
           "FramesError"]

#: Names whose modules import PyTorch: loaded on first use, so the reader imports without it.
_LAZY = {"EpisodeAwareSampler": "transforms.reader.samplers", "GopBlockSampler": "transforms.reader.samplers",
         "ImportedFrames": "transforms.reader.frames", "FramesError": "transforms.reader.frames"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'transforms.reader' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
