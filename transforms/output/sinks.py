"""Where an import's episodes go: one interface (`EpisodesSink`), one small class per sink, one registry.

Every episode an import writes goes through a sink, in four moves: `encode` a part's Arrow table (on the
part writer's encoder thread), `stage` it under a temporary name, then `commit` all of an episodes file's
staged parts at once (or `discard` them all when the file fails); `remove` takes away what an earlier run
wrote for an episodes file the dataset no longer lists. The Parquet parts under `episodes/` are the
sink the import has (`ParquetParts`). Another one (a table store, say) is one module holding its class,
and one line in `SINKS`.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import shutil
import tempfile
from typing import Optional, Sequence

import pyarrow as pa

from transforms.base import storage
from transforms.base.errors import FailureRecord, LeRobotImportError
from transforms.episode.outcomes import FileOutcome, PartResult
from transforms.output import paths, safety, writes

#: The sinks by name: "module:class", imported when a run asks for the sink (a sink's module imports only
#: its own libraries, and none of them is imported by a run that does not use it).
SINKS = {
    "parquet": "transforms.output.sinks:ParquetParts",
}
DEFAULT_SINK = "parquet"


#: A part's encoded bytes are held in memory up to this size, beyond it in an unnamed local temporary
#: file: a worker writing a big part holds its frames, not also their Parquet bytes.
SPOOL_BYTES = 16 * 1024 * 1024


class Encoded:
    """A part as its sink will store it, written like a file (`write`, `tell`) while it is encoded: its bytes
    (`size` of them, the manifest's part bytes) and their sha256, taken as they are written.

    The bytes live in memory up to `SPOOL_BYTES`, then in a local temporary file that has no name (nothing
    is left behind by a worker that dies); `close` lets them go.
    """

    def __init__(self, spool_bytes: Optional[int] = None) -> None:
        self._in_memory = SPOOL_BYTES if spool_bytes is None else spool_bytes
        self._file = tempfile.SpooledTemporaryFile(max_size=self._in_memory)
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        self._hash.update(data)
        if self.size + len(data) > self._in_memory >= self.size:
            # to the file before the write that passes the bound, not after it: a wide episode's page can
            # be tens of MB, which would otherwise be held in memory once more on its way to the file
            self._file.rollover()
        self._file.write(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    @property
    def closed(self) -> bool:
        return self._file.closed

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    @property
    def spilled(self) -> bool:
        """Whether the bytes went to the temporary file (more than `SPOOL_BYTES` of them)."""
        return self.size > self._in_memory

    def copy_to(self, f, chunk_bytes: int = 1024 * 1024) -> None:
        """Write every byte, from the first, into the open file `f` (again from the first on each call)."""
        self._file.seek(0)
        shutil.copyfileobj(self._file, f, chunk_bytes)
        self._file.seek(0, io.SEEK_END)

    def read(self) -> bytes:
        """Every byte (for a small part, or a test)."""
        self._file.seek(0)
        try:
            return self._file.read()
        finally:
            self._file.seek(0, io.SEEK_END)

    def close(self) -> None:
        self._file.close()


def spool_error(ex: BaseException) -> Optional[LeRobotImportError]:
    """A failed write of a part's bytes to the worker's temporary folder as the rule it breaks (`disk_full`,
    `output_not_writable`: a full or read-only disk there is the worker's, not the output's); None for
    anything else."""
    folder = tempfile.gettempdir()
    named = storage.write_error(ex, folder)
    if named is None:
        return None
    return LeRobotImportError(named.rule, f"writing a part's bytes to a temporary file in {folder} failed: "
                              f"{getattr(ex, 'strerror', None) or ex}; a part's bytes beyond {SPOOL_BYTES:,} wait "
                              "in the worker's temporary folder until they are stored: free space there (or point "
                              "TMPDIR at a disk with room) and run the import again; what was committed stays valid")


class EpisodesSink:
    """The interface every sink implements. A sink is made once per worker (`sink`), holds no run state,
    and is called from the part writer, the commit of an episodes file and the finish of a dataset."""

    name = ""

    def encode(self, table: pa.Table) -> Encoded:
        """A part's typed table (`writes.part_table`) as the sink stores it; called on the encoder thread.
        The caller closes what it returns once the part is staged (or given up)."""
        raise NotImplementedError

    def stage(self, out: str, episodes_file: str, part: int, num_parts: int, encoded: Encoded) -> str:
        """Store one part of an episodes file where no reader sees it yet; its temporary location."""
        raise NotImplementedError

    def commit(self, out: str, dataset: str, episodes_file: str, results: Sequence[PartResult],
               extra_failures: Sequence[FailureRecord] = ()) -> FileOutcome:
        """Make every staged part of an episodes file visible at once, or none when any failed; the outcome."""
        raise NotImplementedError

    def discard(self, out: str, episodes_file: str, results: Sequence[PartResult]) -> None:
        """Remove everything of an episodes file, staged or visible: a failed file leaves nothing."""
        raise NotImplementedError

    def remove(self, out: str, episodes_file: str, entry_json: str) -> None:
        """Remove what an earlier run wrote for an episodes file the dataset no longer lists (its last
        manifest entry, JSON), and any staged part of it."""
        raise NotImplementedError


class ParquetParts(EpisodesSink):
    """Parquet parts under the output's `episodes/` folder, moved into place by name (`writes`)."""

    name = "parquet"

    def encode(self, table: pa.Table) -> Encoded:
        encoded = Encoded()
        try:
            writes.write_parquet(table, encoded)
        except BaseException as ex:
            encoded.close()
            named = spool_error(ex)
            if named is None:
                raise
            raise named from None
        return encoded

    def stage(self, out: str, episodes_file: str, part: int, num_parts: int, encoded: Encoded) -> str:
        final = storage.join(out, paths.output_part_path(episodes_file, part, num_parts))
        return storage.write_tmp(final, encoded.copy_to)

    def commit(self, out: str, dataset: str, episodes_file: str, results: Sequence[PartResult],
               extra_failures: Sequence[FailureRecord] = ()) -> FileOutcome:
        return writes.commit_episodes_file(out, dataset, episodes_file, results, extra_failures)

    def discard(self, out: str, episodes_file: str, results: Sequence[PartResult]) -> None:
        writes.discard_episodes_file(out, episodes_file, results)

    def remove(self, out: str, episodes_file: str, entry_json: str) -> None:
        for uri in removed_parts(out, entry_json) + writes.leftover_tmps(out, episodes_file):
            storage.remove(uri)


def removed_parts(out: str, entry_json: str) -> list[str]:
    """The parts of a removed episodes file: those its last manifest entry lists (each confined to
    `episodes/`; the manifest was checked when read), not whatever its name would match."""
    entry = json.loads(entry_json)
    listed = [p for p in entry.get("parts") or [] if isinstance(p, str)]
    return [safety.confined(out, p, folder=paths.EPISODES_DIR, what="episode part") for p in listed]


_MADE: dict[str, EpisodesSink] = {}


def sink(name: str = DEFAULT_SINK) -> EpisodesSink:
    """The sink of that name (made once per process).

    Raises:
        KeyError: no sink has that name (the message lists those there are).
    """
    if name not in _MADE:
        if name not in SINKS:
            raise KeyError(f"no sink named {name!r}; the sinks are {', '.join(sorted(SINKS))}")
        module, _, cls = SINKS[name].partition(":")
        _MADE[name] = getattr(importlib.import_module(module), cls)()
    return _MADE[name]
