"""Reading an import back: ImportReader, Episode, and frame-exact seeks through the MediaIndex. Pure: no Beam.

    import_reader.py  ImportReader: an output's parts and media_index/, episodes by index or in order
    episode.py        Episode: one logical episode, frame fields as numpy, cameras as VideoHandles
    seek.py           TrackTables from a MediaIndex, VideoHandle, frame seeks and decodes
    confine.py        where a reader may read (the import root, the dataset root, given roots)
"""

from transforms.reader.episode import Episode, VideoAccess
from transforms.reader.import_reader import ImportReader, MediaIndexStore, RowGroupRef
from transforms.reader.seek import DEFAULT_TOLERANCE, ReaderError, TrackTables, VideoHandle

__all__ = ["DEFAULT_TOLERANCE", "Episode", "ImportReader", "MediaIndexStore", "ReaderError", "RowGroupRef",
           "TrackTables", "VideoAccess", "VideoHandle"]
