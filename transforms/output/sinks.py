"""Where an import's episodes go: one interface (`EpisodesSink`), one small class per sink, one registry.

Every episode an import writes goes through a sink, in four moves: `encode` a part's Arrow table (on the
part writer's encoder thread), `stage` it under a temporary name, then `commit` all of an episodes file's
staged parts at once (or `discard` them all when the file fails); `remove` takes away what an earlier run
wrote for an episodes file the dataset no longer lists. The Parquet parts under `episodes/` are the
sink the import has (`ParquetParts`). Another one (a table store, say) is one module holding its class,
and one line in `SINKS`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from typing import Sequence

import pyarrow as pa

from transforms.base import storage
from transforms.base.errors import FailureRecord
from transforms.episode.outcomes import FileOutcome, PartResult
from transforms.output import paths, safety, writes

#: The sinks by name: "module:class", imported when a run asks for the sink (a sink's module imports only
#: its own libraries, and none of them is imported by a run that does not use it).
SINKS = {
    "parquet": "transforms.output.sinks:ParquetParts",
}
DEFAULT_SINK = "parquet"


@dataclasses.dataclass(frozen=True)
class Encoded:
    """A part as its sink will store it (`data`, whose length the manifest records as the part's bytes), and
    the digest the manifest records."""

    data: bytes
    sha256: str


class EpisodesSink:
    """The interface every sink implements. A sink is made once per worker (`sink`), holds no run state,
    and is called from the part writer, the commit of an episodes file and the finish of a dataset."""

    name = ""

    def encode(self, table: pa.Table) -> Encoded:
        """A part's typed table (`writes.part_table`) as the sink stores it; called on the encoder thread."""
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
        data = writes.parquet_bytes(table)
        return Encoded(data, writes.sha256_hex(data))

    def stage(self, out: str, episodes_file: str, part: int, num_parts: int, encoded: Encoded) -> str:
        final = storage.join(out, paths.output_part_path(episodes_file, part, num_parts))
        return storage.write_tmp(final, lambda f: f.write(encoded.data))

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
