"""The media_index/ table: one row per MP4 file (uri, size, version, spql.MediaIndex), in shards by MP4 folder.

By default each file's MediaIndex is written once, here, and the episode parts leave
`clip.media.index` null: a reader joins the index back by the clip's URI. Rows are kept in one shard per
folder of MP4s (`paths.media_index_shard_path`), sorted by URI, in row groups of consecutive rows of at
most `ROW_GROUP_BYTES` of index (an MP4 of ~10,000 samples or more has a row group of its own), so a
reader fetches only the rows near the one it needs. Decoding a row group costs about a millisecond
whatever its size up to that budget (a MediaIndex has ~30 leaf columns): one row group per small MP4
(one episode each) made a reader's first use of each file cost that much; grouped, the first lookup
in a group serves its neighbours.

A row's `version` is the storage token (`size:generation`, `size:mtime=...`) the MP4 had when the run
that wrote the row listed the dataset; the manifest's `video_versions` repeats them. A later run reads
again only the MP4s whose token changed or that have no row yet (`plan_media_index`), and rewrites only
the shards that gain, change or lose a row (`update_media_index_shard`): the rows of unchanged MP4s are
carried from the old shard file by an Arrow filter, never by reading the MP4 again.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import io
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.base import storage
from transforms.output import safety, paths
from transforms.episode import spql_types
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import sources

#: Bytes of MediaIndex values (uncompressed, estimated from their sample counts) per row group of a shard.
ROW_GROUP_BYTES = 1 << 20
#: Estimated bytes of one sample's entries in a MediaIndex (size, flags, ctts, its share of the runs).
_SAMPLE_BYTES = 12
#: Estimated bytes of a MediaIndex's fixed part (sample entry, scalars, list offsets).
_INDEX_BYTES = 1024

#: What a run does with a shard (`ShardOutcome.action`).
WRITTEN, UNCHANGED, EMPTIED, FAILED = "written", "unchanged", "emptied", "failed"


def media_index_schema() -> pa.Schema:
    return pa.schema([pa.field("uri", pa.utf8(), nullable=False), pa.field("size", pa.uint64(), nullable=False),
                      pa.field("version", pa.utf8(), nullable=False), pa.field("index", spql_types.media_index())])


@dataclasses.dataclass(frozen=True)
class MediaIndexRow:
    """One MP4's row of the media_index/ table: the dataset and the MP4 it is of, the MP4's URI, size, storage
    token when listed, and MediaIndex (a length-1 spql.MediaIndex array).

    Its index is held as Arrow IPC bytes, made once where the MP4 is read and turned back into an array
    only where it is used (the shard writer): across each shuffle the row is pickled as those bytes, where
    pickling a nested Arrow array builds a Python object per child array and buffer (ten times the cost of
    copying its bytes once), and making the bytes again at every shuffle was most of the step's cost."""

    dataset: str
    file: str  # the MP4, relative to the dataset root
    uri: str
    size: int
    version: str  # its storage token when the run listed it
    index_ipc: bytes  # length-1 spql.MediaIndex, `spql_types.array_to_ipc`

    @classmethod
    def of(cls, dataset: str, file: str, uri: str, size: int, version: str, index: pa.Array) -> "MediaIndexRow":
        return cls(dataset, file, uri, size, version, spql_types.array_to_ipc(index))

    @functools.cached_property
    def index(self) -> pa.Array:
        """The length-1 spql.MediaIndex (its buffers views of `index_ipc`)."""
        return spql_types.array_from_ipc(self.index_ipc)

    @property
    def shard(self) -> str:
        return paths.media_index_shard_path(self.file)

    def __reduce__(self):  # the fields alone: never the array `index` may have cached
        return MediaIndexRow, (self.dataset, self.file, self.uri, self.size, self.version, self.index_ipc)


def media_index_table(rows: Iterable[MediaIndexRow]) -> pa.Table:
    """Rows -> the table, sorted by URI."""
    rows = sorted(rows, key=lambda r: r.uri)
    index = pa.concat_arrays([r.index for r in rows]) if rows else pa.array([], spql_types.media_index())
    return pa.Table.from_arrays([pa.array([r.uri for r in rows], pa.utf8()),
                                 pa.array([r.size for r in rows], pa.uint64()),
                                 pa.array([r.version for r in rows], pa.utf8()), index],
                                schema=media_index_schema())


@dataclasses.dataclass(frozen=True)
class ShardRecord:
    """What the manifest records of one shard (`media_index_files`), so `verify` can check it."""

    path: str  # relative to the output root
    bytes: int
    rows: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "bytes": self.bytes, "rows": self.rows, "sha256": self.sha256}

    @classmethod
    def from_json(cls, doc: Any) -> Optional["ShardRecord"]:
        """The record, or None when `doc` is not one (a manifest is data: anything may be in it)."""
        try:
            return cls(str(doc["path"]), int(doc["bytes"]), int(doc["rows"]), str(doc["sha256"]))
        except (KeyError, TypeError, ValueError):
            return None


@dataclasses.dataclass(frozen=True)
class ShardOutcome:
    """What a run did with one shard: `written` (record of the new file), `unchanged` (record of the file
    as found), `emptied` (no row left: the file goes), `failed` (nothing known of it any more)."""

    path: str
    action: str
    record: Optional[ShardRecord] = None
    lost: tuple[str, ...] = ()  # URIs whose old rows were lost with a damaged file ("*": every one)


def _sort_by_uri(table: pa.Table) -> pa.Table:
    """Rows by URI; a table already in order (rows appended after the kept ones: the usual growth of a
    folder) is returned as it is, without copying its indexes."""
    uris = table.column("uri").to_pylist()
    if all(a < b for a, b in zip(uris, uris[1:])):
        return table
    return table.take(pc.sort_indices(table, sort_keys=[("uri", "ascending")]))


def _row_bytes(table: pa.Table) -> np.ndarray:
    """Estimated bytes of each row's MediaIndex, from its tracks' sample counts (no row is copied)."""
    index = spql_types.storage_of(table.column("index").combine_chunks())
    tracks = index.field("tracks")
    per_track = pc.list_value_length(tracks.values.field("sizes")).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = tracks.offsets.to_numpy().astype(np.int64)
    csum = np.concatenate([[0], np.cumsum(per_track.astype(np.int64))])
    samples = csum[offsets[1:]] - csum[offsets[:-1]]
    return np.where(index.is_valid().to_numpy(zero_copy_only=False), samples * _SAMPLE_BYTES + _INDEX_BYTES, 64)


def row_group_bounds(row_bytes: np.ndarray, budget: int = ROW_GROUP_BYTES) -> list[tuple[int, int]]:
    """[start, end) of each row group: consecutive rows while their bytes stay within `budget` (a row
    larger than the budget alone)."""
    bounds, start, total = [], 0, 0
    for i, b in enumerate(row_bytes.tolist()):
        if i > start and total + b > budget:
            bounds.append((start, i))
            start, total = i, 0
        total += b
    if len(row_bytes):
        bounds.append((start, len(row_bytes)))
    return bounds


def shard_bytes(table: pa.Table) -> bytes:
    """A shard's Parquet bytes: zstd, rows in row groups of at most ROW_GROUP_BYTES of index (a reader
    finds a row's group by the `uri` statistics).

    Statistics are kept for `uri` alone (the only column a reader looks one up by) and no column is
    dictionary-encoded: an index's offsets and times are all distinct, so the dictionary Parquet tries first
    for every column chunk is built only to be dropped, which took a third of the write, and its pages made
    the file a third larger."""
    sink = io.BytesIO()  # one write request per shard, whatever the Parquet writer's call pattern
    with pq.ParquetWriter(sink, table.schema, compression="zstd", use_compliant_nested_type=False,
                          use_dictionary=False, write_statistics=["uri"]) as w:
        for a, b in row_group_bounds(_row_bytes(table), ROW_GROUP_BYTES) if table.num_rows else []:
            w.write_table(table.slice(a, b - a), row_group_size=b - a)
    return sink.getvalue()


def update_media_index_shard(out_root: str, shard: str, rows: Sequence[MediaIndexRow],
                             keep: Optional[frozenset[str]]) -> ShardOutcome:
    """Bring one shard up to date: its old rows that stay, plus this run's rows; written atomically.

    Args:
        out_root: the dataset's output root.
        shard: the shard's path relative to `out_root` (`paths.media_index_shard_path`).
        rows: the rows this run read for MP4s of this shard (they replace old rows of the same URI).
        keep: URIs whose old rows stay (the MP4s unchanged since); None keeps every old row that `rows`
            does not replace. An empty set never opens the old file.
    Returns:
        The outcome: `unchanged` when no row is added, replaced or dropped (the file is not rewritten),
        `emptied` when no row is left (the caller removes the file), else `written`.
    """
    final = storage.join(out_root, shard)
    new = media_index_table(rows)
    old, old_data = None, None
    if keep is None or keep:
        try:
            old_data = storage.read_state_file(final, what="media_index shard", file=shard,
                                               max_bytes=storage.READ_BYTES_LIMIT)
            old = pq.read_table(io.BytesIO(old_data), schema=media_index_schema()) if old_data is not None else None
        except (LeRobotImportError, pa.ArrowException, OSError, ValueError):
            # Damaged (or swapped) since the planning step checked its size: rebuilt from this run's rows;
            # the rows it would have carried are lost, and their MP4s read again by the next run.
            data = shard_bytes(_sort_by_uri(new)) if len(rows) else None
            if data is not None:
                storage.commit(storage.write_tmp(final, lambda f: f.write(data)), final)
            record = ShardRecord(shard, len(data), new.num_rows, hashlib.sha256(data).hexdigest()) if data else None
            return ShardOutcome(shard, WRITTEN if data else EMPTIED, record,
                                lost=tuple(sorted(keep)) if keep is not None else ("*",))
    if old is not None:
        stays = pc.invert(pc.is_in(old.column("uri"), value_set=new.column("uri")))
        if keep is not None:
            stays = pc.and_(stays, pc.is_in(old.column("uri"), value_set=pa.array(sorted(keep), pa.utf8())))
        kept = old.filter(stays)
        if not len(rows) and kept.num_rows == old.num_rows:
            return ShardOutcome(shard, UNCHANGED, ShardRecord(shard, len(old_data), old.num_rows,
                                                              hashlib.sha256(old_data).hexdigest()))
        table = pa.concat_tables([kept, new]) if kept.num_rows else new
    else:
        table = new
    if table.num_rows == 0:
        return ShardOutcome(shard, EMPTIED)
    data = shard_bytes(_sort_by_uri(table))
    storage.commit(storage.write_tmp(final, lambda f: f.write(data)), final)
    return ShardOutcome(shard, WRITTEN, ShardRecord(shard, len(data), table.num_rows, hashlib.sha256(data).hexdigest()))


class ShardRows:
    """Rows of existing shards looked up by URI, reading each shard's footer once and one row group per
    lookup (the row group whose `uri` statistics can hold it). The row group read last is kept per shard:
    a run carries the rows of an episodes file's MP4s, neighbours in their shard, one after another, and a
    row group holds several of them (each read of it decodes all of them)."""

    def __init__(self, out_root: str) -> None:
        self._out = out_root
        self._footers: dict[str, Optional[tuple[pq.FileMetaData, list[tuple[str, str, int]]]]] = {}
        self._last: dict[str, tuple[int, pa.Table]] = {}  # per shard: (row group, its rows)

    def _footer(self, shard: str) -> Optional[tuple[pq.FileMetaData, list[tuple[str, str, int]]]]:
        if shard not in self._footers:
            fs, path = storage.filesystem(storage.join(self._out, shard))
            try:
                with fs.open(path, "rb") as f:
                    md = pq.ParquetFile(f).metadata
            except FileNotFoundError:
                self._footers[shard] = None
                return None
            groups = []
            column = md.schema.names.index("uri")
            for rg in range(md.num_row_groups):
                st = md.row_group(rg).column(column).statistics
                if st is not None and st.has_min_max:
                    groups.append((st.min, st.max, rg))
            self._footers[shard] = (md, sorted(groups))
        return self._footers[shard]

    def _row_group(self, shard: str, md: pq.FileMetaData, rg: int) -> pa.Table:
        last = self._last.get(shard)
        if last is None or last[0] != rg:
            fs, path = storage.filesystem(storage.join(self._out, shard))
            with fs.open(path, "rb") as f:
                last = (rg, pq.ParquetFile(f, metadata=md).read_row_group(rg))
            self._last[shard] = last
        return last[1]

    def get(self, dataset: str, file: str, uri: str) -> Optional[MediaIndexRow]:
        """The row of an MP4 (`file` of `dataset`, at `uri`) in its shard, or None when there is none."""
        shard = paths.media_index_shard_path(file)
        found = self._footer(shard)
        if found is None:
            return None
        md, groups = found
        k = bisect.bisect_right([g[0] for g in groups], uri) - 1
        if k < 0 or uri > groups[k][1]:
            return None
        table = self._row_group(shard, md, groups[k][2])
        hits = pc.equal(table.column("uri"), uri).to_numpy(zero_copy_only=False).nonzero()[0]
        if not len(hits):
            return None
        row = table.slice(int(hits[0]), 1)
        return MediaIndexRow.of(dataset, file, uri, int(row.column("size")[0].as_py()),
                                str(row.column("version")[0].as_py()), row.column("index").combine_chunks())


# ---- what a run does with a dataset's media_index/ -----------------------------------------------


@dataclasses.dataclass(frozen=True)
class PreviousMediaIndex:
    """What the output's last manifest says of its media_index/: None `versions` when it cannot be carried
    from (no manifest, another layout, an inline-index output)."""

    versions: Optional[dict[str, str]]  # MP4 path -> token of the row (or of the no-row MP4) it accounts for
    shards: tuple[ShardRecord, ...] = ()

    @property
    def older_layout(self) -> bool:
        return self.versions is None


def previous_media_index(previous: Optional[Mapping[str, Any]]) -> PreviousMediaIndex:
    """The previous manifest's media_index/ state (`video_versions`, `media_index_files`), if carried from.

    Args:
        previous: the output's manifest, or None.
    """
    if not previous or previous.get("media_index_layout") != paths.MEDIA_INDEX_LAYOUT:
        return PreviousMediaIndex(None)
    versions = previous.get("video_versions")
    records = previous.get("media_index_files")
    if not isinstance(versions, dict) or not isinstance(records, list):
        return PreviousMediaIndex(None)
    shards = tuple(r for r in map(ShardRecord.from_json, records) if r is not None)
    return PreviousMediaIndex({str(k): str(v) for k, v in versions.items()}, shards)


@dataclasses.dataclass(frozen=True)
class MediaIndexPlan:
    """What a run does with one dataset's MP4s and media_index/ shards.

    `carried`: MP4s whose row (or the knowledge that they need none) stays as the last run recorded it;
    `to_read`: MP4s whose MediaIndex is read this run (new, changed, or never recorded) — all of them
    used by episodes files being imported; `touched`: shard -> URIs whose old rows stay in it, for
    every shard that may gain, change or lose a row; `kept_shards`: the previous shard records, for
    the shards this run leaves alone."""

    tokens: dict[str, str]  # MP4 path -> its token now, for every MP4 the current episodes files use
    used: frozenset[str]  # the MP4s the episodes files being imported use
    shared: frozenset[str]  # of those, the ones episodes files left alone use too (their clips are not seen)
    carried: frozenset[str]
    to_read: frozenset[str]
    touched: dict[str, frozenset[str]]
    kept_shards: tuple[ShardRecord, ...]


def plan_media_index(current_videos: Iterable[str], imported_videos: Iterable[str], token: Callable[[str], str],
                     previous: PreviousMediaIndex, *, dataset_file: Callable[[str], str],
                     inline_index: bool = False, force: bool = False,
                     left_videos: Iterable[str] = ()) -> MediaIndexPlan:
    """Decide which MP4s to read and which shards to rewrite.

    Args:
        current_videos: every MP4 the dataset's current episodes files reference.
        imported_videos: the MP4s of the episodes files this run imports.
        token: MP4 path -> its storage token now.
        previous: the last run's media_index/ state (`previous_media_index`).
        dataset_file: MP4 path -> its URI (as rows name it).
        inline_index: the run writes no media_index/ (every MP4 an imported file uses is read).
        force: carry nothing.
        left_videos: the MP4s of the current episodes files this run leaves alone.
    """
    current = set(current_videos)
    tokens = {rel: token(rel) for rel in sorted(current)}
    recorded = {} if inline_index or force or previous.versions is None else previous.versions
    carried = frozenset(tokens).difference(sources.changed_video_files(tokens, recorded))
    used = frozenset(imported_videos)
    shared = used & frozenset(left_videos)
    to_read = used - carried
    if inline_index:
        return MediaIndexPlan(tokens, used, shared, carried, to_read, {}, ())
    touched_shards = {paths.media_index_shard_path(rel) for rel in to_read}
    touched_shards |= {paths.media_index_shard_path(rel) for rel in recorded if rel not in carried}
    keep: dict[str, set[str]] = {s: set() for s in touched_shards}
    for rel in carried:
        shard = paths.media_index_shard_path(rel)
        if shard in keep:
            keep[shard].add(dataset_file(rel))
    kept_shards = () if force or previous.versions is None else previous.shards
    return MediaIndexPlan(tokens, used, shared, carried, to_read, {s: frozenset(u) for s, u in sorted(keep.items())},
                          kept_shards)


def without_shards(previous: PreviousMediaIndex, shards: frozenset[str]) -> PreviousMediaIndex:
    """`previous` as if `shards` had never been written: their MP4s have no recorded row (so they are read
    again, and the episodes files using them imported again) and their records are not carried."""
    if not shards or previous.versions is None:
        return previous
    versions = {rel: t for rel, t in previous.versions.items() if paths.media_index_shard_path(rel) not in shards}
    return PreviousMediaIndex(versions, tuple(r for r in previous.shards if r.path not in shards))


#: Why every episodes file of an output written in an older media_index/ layout is imported again.
OLDER_LAYOUT = "older media_index layout"


def final_media_index(kept: Iterable[ShardRecord], outcomes: Iterable[ShardOutcome], versions: Iterable[tuple[str, str]]
                      ) -> tuple[list[ShardRecord], dict[str, str]]:
    """The shards an output holds after a run, and the MP4 tokens they account for.

    Args:
        kept: the previous shard records (for the shards this run did not touch).
        outcomes: what this run did with the shards it touched.
        versions: (MP4 path, token) of every MP4 carried or read this run.
    Returns:
        (shard records sorted by path, MP4 path -> token). A failed shard is dropped with every MP4 of it,
        so the next run reads those MP4s again (their episodes files are imported again).
    """
    records = {r.path: r for r in kept}
    failed, lost = set(), set()
    for o in outcomes:
        if o.record is not None and o.action in (WRITTEN, UNCHANGED):
            records[o.path] = o.record
        else:
            records.pop(o.path, None)
            if o.action == FAILED:
                failed.add(o.path)
        if "*" in o.lost:
            failed.add(o.path)
        lost.update(u for u in o.lost if u != "*")

    def gone(rel: str) -> bool:
        return paths.media_index_shard_path(rel) in failed or any(u.endswith("/" + rel) for u in lost)

    tokens = {rel: t for rel, t in sorted(versions) if not gone(rel)}
    return [records[p] for p in sorted(records)], tokens


def stale_media_index_files(out_root: str, keep: Iterable[str], ours: Iterable[str]) -> tuple[list[str], list[str]]:
    """The files under `out_root`'s media_index/ to remove, and the ones left because the import did not write
    them.

    A file goes only when the import can prove it wrote it: it is in `ours` (what the last manifest lists,
    and the shards this run's MP4s map to) or it is one of the import's own temporaries; anything else
    (a README, a user's `old/` folder) stays, and is reported.

    Args:
        out_root: the dataset's output root.
        keep: the shards the output holds after this run, relative to `out_root`.
        ours: the media_index/ files known to be the import's, relative to `out_root`.
    Returns:
        (URIs to remove, paths relative to `out_root` of the files left as they are).
    """
    folder = storage.normalize_root(storage.join(out_root, paths.MEDIA_INDEX_DIR))
    keep, ours = set(keep), set(ours)
    stale, unknown = [], []
    for uri in storage.list_files(folder):
        if not uri.startswith(folder + "/"):
            continue
        rel = f"{paths.MEDIA_INDEX_DIR}/{uri[len(folder) + 1:]}"
        if rel in keep:
            continue
        if rel in ours or safety.is_own_tmp(rel.rsplit("/", 1)[-1]):
            stale.append(uri)
        else:
            unknown.append(rel)
    return stale, unknown
