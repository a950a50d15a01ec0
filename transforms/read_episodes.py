"""Beam: read an import's output back into a PCollection of `Episode`s.

`ReadImportedEpisodes(OUT)` lists the row groups of every episode part (64 episodes each, from the
parts' footers, on a worker), spreads them over workers (Reshuffle) and reads each row group into
`Episode` objects (`transforms.reader`) with their clips' MediaIndex joined back (default layout) or
as stored (`--inline-index`). An `Episode` pickles as its one-row Arrow record, so downstream steps
get the whole logical episode: `ep["observation.state"]` as numpy, `ep.video(camera).frame_at(t)`,
or `ep.to_arrow()`. Each worker keeps one `ImportReader` per output, so a file's MediaIndex is
fetched once per worker, not once per episode.
"""

from __future__ import annotations

from typing import Iterator

import apache_beam as beam

from transforms.reader.import_reader import Episode, ImportReader, RowGroupRef
from transforms.reader.seek import DEFAULT_TOLERANCE


class _ListRowGroups(beam.DoFn):
    def process(self, output_uri: str) -> Iterator[RowGroupRef]:
        yield from ImportReader(output_uri).row_groups()


class _ReadRowGroup(beam.DoFn):
    def __init__(self, output_uri: str, tolerance: float) -> None:
        self._output_uri = output_uri
        self._tolerance = tolerance
        self._reader: ImportReader | None = None

    def setup(self) -> None:
        self._reader = ImportReader(self._output_uri, tolerance=self._tolerance)

    def process(self, ref: RowGroupRef) -> Iterator[Episode]:
        yield from self._reader.read_row_group(ref)


class ReadImportedEpisodes(beam.PTransform):
    """Read every episode of an import back, in either layout.

    Args:
        output_uri: the import's output root (a dataset's output, holding manifest.json), any fsspec URL.
        tolerance: how far (seconds) from the time asked for a frame seek may find its frame.

    Input: the pipeline (PBegin). Returns: a PCollection of `Episode`.
    """

    def __init__(self, output_uri: str, *, tolerance: float = DEFAULT_TOLERANCE) -> None:
        super().__init__()
        self._output_uri = output_uri
        self._tolerance = tolerance

    def expand(self, pbegin):
        return (pbegin
                | "Output" >> beam.Create([self._output_uri])
                | "ListRowGroups" >> beam.ParDo(_ListRowGroups())
                | "Spread" >> beam.Reshuffle()
                | "ReadRowGroups" >> beam.ParDo(_ReadRowGroup(self._output_uri, self._tolerance)))
