"""WriteParts, the fourth step of the import: per part, read only the data-file row groups its episodes need,
type the frames, run the quality checks, and write the part under a temporary name; the writer of an
episodes file's last part commits the file at once (all its parts).

    (part key, PartInputs: header, MP4 facts, failures) ─► WriteParts ─► a temporary part, or why not

The work is `transforms.work.part_writer.PartWriter`'s; this step groups the parts into read units and
hands each worker's writer its units.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from transforms.safety_net import ImportDoFn, counters, guarded
from transforms.work.messages import FileInputs, ImportConfig, PartInputs
from transforms.work.part_writer import PartWriter, by_read_unit, unit_bug


class WriteParts(beam.PTransform):
    """Write each part under a temporary name: its episodes' frames, typed, with their clips.

    The frames are read here, from only the row groups the part's episodes need. Parts that share a row
    group (one holding rows of several parts: data files written with few, large row groups) form one
    read unit, written one part after the other by one worker, which keeps the row group it read last:
    each row group is read once per run, and a worker holds one part's frames at a time. A worker keeps
    its last few data files open, so parts sharing a data file read its footer and `index` once. Frames
    never cross a shuffle: only plans, paths and MP4 facts do.

    An episodes file is committed as soon as its last part is written, by the worker that wrote it (see
    `transforms.output.journal`), not after every part of the run: a run stopped halfway keeps the files
    it finished. A file with a duplicated episode or a strict check's error, or whose storage offers no
    conditional create (when it has several parts), is committed by `CommitEpisodesFiles` instead.

    Args:
        config: the run's configuration.
        file_facts: ((root, episodes file), FileInputs) of each file's sources and duplicated episodes,
            what a commit needs besides its parts; None: the parts are left for `CommitEpisodesFiles`.

    Input: (part key, PartInputs), the part key being (root, episodes file, part): its header, the
    facts of the MP4s it uses, failures (an MP4 it needs is unusable). Returns: ((root, episodes
    file), FileInputs) holding each part's PartResult, or the file's outcome once committed.
    """

    def __init__(self, config: ImportConfig, file_facts=None) -> None:
        super().__init__()
        self._config = config
        self._file_facts = file_facts

    def expand(self, inputs):
        facts = {} if self._file_facts is None else {"facts": beam.pvalue.AsMultiMap(self._file_facts)}
        written = (inputs
                   | "GroupByPart" >> beam.GroupByKey()
                   | "ByReadUnit" >> beam.MapTuple(by_read_unit)
                   | "GroupByReadUnit" >> beam.GroupByKey()
                   | "Write" >> guarded(_WriteParts(self._config), main="results", **facts))
        bugs = written.bad | "PartBugs" >> beam.FlatMap(_unit_bug)
        return (written.results, bugs) | "PartResults" >> beam.Flatten()


class _WriteParts(ImportDoFn):
    """Hands each read unit to the worker's `PartWriter`; the bundle's last part is stored as it ends."""

    def setup(self) -> None:
        self._writer = PartWriter(self._config, counters(PartWriter.COUNTERS))

    def teardown(self) -> None:
        self._writer.close()

    def start_bundle(self) -> None:
        self._writer.new_bundle()

    def process(self, element: tuple[tuple, Iterable[tuple[tuple, PartInputs]]], facts=None
                ) -> Iterator[tuple[tuple[str, str], FileInputs]]:
        unit, parts = element
        yield from self._writer.write_unit(unit, parts, facts)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        done = self._writer.flush()
        if done is not None:
            yield GlobalWindows.windowed_value(done)


def _unit_bug(bad) -> Iterator[tuple[tuple[str, str], FileInputs]]:
    """A read unit whose writing raised outside any one part: each of its parts fails with the error."""
    (_, parts), exc_info = bad
    yield from unit_bug(parts, exc_info)
