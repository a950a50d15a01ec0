"""The output an import writes: episode parts, errors.jsonl and manifest.json, all written atomically.

A part is written under a temporary name; an episodes file's parts are moved into place together
only when all of them were written, so a crashed or retried run never leaves a partial part where a
reader would take it for a finished one. Where each file goes is `transforms.output.paths`.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import io
import json
from json.encoder import encode_basestring_ascii as _encode_text
from typing import IO, Iterable, Mapping, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.base import storage
from transforms.episode import clips, episode_type
from transforms.output import safety, paths
from transforms.episode.frames import frames_list
from transforms.episode.outcomes import (EpisodeFailures, FileOutcome, PartFile, PartResult, failed_file,
                                         failure_rows)
from transforms.episode.quirks import WarningRecord
from transforms.lerobot.info import DatasetInfo
from transforms.lerobot.episodes_files import EpisodeRow
from transforms.base.errors import FailureRecord, LeRobotImportError, redact

TOOL_NAME = "lerobot-beam-import"
# Row groups of at most this many episodes keep a reader's fetches small.
EPISODES_PER_ROW_GROUP = 64


def tool_version() -> str:
    """The installed package's version (what the manifest records); "unknown" when it is not installed."""
    try:
        return importlib.metadata.version(TOOL_NAME)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def part_table(info: DatasetInfo, rows: Sequence[EpisodeRow], frames: Sequence[pa.StructArray],
               video_files: Mapping[str, clips.Mp4File], *, inline_index: bool) -> pa.Table:
    """One part: its episodes in row order, typed as the episode type.

    Args:
        info: the dataset's info.json.
        rows: the part's episodes, in the episodes file's row order.
        frames: each episode's typed frames, in the same order.
        video_files: what was learnt of each MP4 the episodes use, by relative path.
        inline_index: write each file's MediaIndex into every clip (else null, see media_index/).
    """
    schema = episode_type.episode_schema(info)
    columns = [
        pa.array([r.episode_index for r in rows], pa.int64()),
        pa.array([list(r.tasks) for r in rows], schema.field("tasks").type),
        pa.array([r.length for r in rows], pa.int64()),
        frames_list(frames, episode_type.frame_type(info)),
    ]
    if info.video_features:
        columns.append(clips.videos_column(info, rows, video_files, inline_index=inline_index))
    return pa.Table.from_arrays(columns, schema=schema)


def write_parquet(table: pa.Table, sink) -> None:
    """Write a part's table as Parquet into an open file (anything with `write` and `tell`): same table,
    same bytes."""
    pq.write_table(table, sink, compression="zstd", row_group_size=EPISODES_PER_ROW_GROUP,
                   use_compliant_nested_type=False, use_dictionary=False,
                   write_statistics=["episode_index", "length"], store_schema=True)


def parquet_bytes(table: pa.Table) -> bytes:
    """A part's table as Parquet bytes (`write_parquet`)."""
    sink = io.BytesIO()
    write_parquet(table, sink)
    return sink.getvalue()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _split(out_root: str, relative: str) -> tuple[str, str]:
    """The folder (URI) and name of an output path, the path checked first to lie under `episodes/` (an
    episodes-file name read from an output's state could otherwise point the clean-up elsewhere)."""
    safety.confined(out_root, relative, folder=paths.EPISODES_DIR, what="episode part")
    head, _, tail = relative.rpartition("/")
    return storage.join(out_root, head) if head else out_root, tail


def stale_outputs(out_root: str, episodes_file: str, keep: Iterable[str]) -> list[str]:
    """Outputs an earlier run left for this episodes file that this run does not write.

    The folder is listed and names compared literally: names come from the dataset, and a glob
    pattern built from them (a file named `*.parquet`) would match other episodes files' outputs."""
    single = paths.output_part_path(episodes_file, 0, 1)
    folder, tail = _split(out_root, single)
    stem = tail[: -len(".parquet")]
    found = [n for n in storage.list_dir(folder) if n == tail or paths.is_part_name(n, stem)]
    keep_uris = {storage.join(out_root, k) for k in keep}
    return sorted(u for u in (storage.join(folder, n) for n in found) if u not in keep_uris)


def leftover_tmps(out_root: str, episodes_file: str) -> list[str]:
    """Temporary parts of this episodes file left by attempts that died (a crash, a retried bundle)."""
    single = paths.output_part_path(episodes_file, 0, 1)
    folder, tail = _split(out_root, single)
    stem = tail[: -len(".parquet")]
    found = []
    for name in storage.list_dir(folder):
        own = safety.TMP_PATTERN.match(name)
        if own is None:  # not a temporary name the import gives: someone else's file
            continue
        final = own.group("final")
        if final == tail or paths.is_part_name(final, stem):
            found.append(storage.join(folder, name))
    return found


def discard_episodes_file(out_root: str, episodes_file: str, results: Sequence[PartResult]) -> None:
    """Remove every part of an episodes file, written or temporary: a failed file leaves nothing."""
    for r in results:
        if r.tmp_uri:
            storage.remove(r.tmp_uri)
    for uri in stale_outputs(out_root, episodes_file, keep=()) + leftover_tmps(out_root, episodes_file):
        storage.remove(uri)


def commit_episodes_file(out_root: str, dataset: str, episodes_file: str, results: Sequence[PartResult],
                         extra_failures: Sequence[FailureRecord] = ()) -> FileOutcome:
    """Move every part of an episodes file into place, or none; report the outcome.

    Args:
        out_root: the dataset's output root.
        dataset: the dataset root URI.
        episodes_file: the episodes file, relative to the dataset root.
        results: what the part writers did, one per part.
        extra_failures: failures found elsewhere that fail the file (a duplicated episode).
    """
    results = sorted(results, key=lambda r: r.part)
    expected = results[0].num_parts if results else 0
    episode_indices = tuple(ep for r in results for ep in r.episode_indices)
    failures = [f for r in results for f in r.failures] + list(extra_failures)
    # v2.x episodes left out of their parts (their own files missing or broken): errors of an imported file
    dropped = tuple(sorted({f for r in results for f in r.dropped}, key=FailureRecord.sort_key))
    # and those left out at planning (their folders do not exist), held as ranges of episodes
    many = tuple(dict.fromkeys(f for r in results for f in r.episode_failures))
    lost = tuple(dict.fromkeys([f.episode_index for f in dropped] + [ep for m in many for ep in m.episode_indices()]))
    if not failures and [r.part for r in results] != list(range(expected)):
        failures.append(LeRobotImportError(
            "accounting", f"expected parts 0..{expected - 1}, got {[r.part for r in results]}, please report it",
            dataset=dataset, episodes_file=episodes_file, file=episodes_file).to_record())
    if failures:
        discard_episodes_file(out_root, episodes_file, results)
        return failed_file(dataset, episodes_file, episode_indices + lost, failures + list(dropped), many)
    written = [paths.output_part_path(episodes_file, r.part, expected) for r in results]
    for r, path in zip(results, written):
        storage.commit(r.tmp_uri, storage.join(out_root, path))
    for uri in stale_outputs(out_root, episodes_file, keep=written) + leftover_tmps(out_root, episodes_file):
        storage.remove(uri)
    notes = tuple(f"part {r.part} holds one episode ({r.episode_indices[0]}) whose frames take about {r.data_bytes} "
                  "bytes of data, over the part limit" for r in results if r.oversized and r.episode_indices)
    part_files = tuple(PartFile(path, r.bytes, len(r.episode_indices), r.sha256) for r, path in zip(results, written))
    if lost:
        notes += (f"{len(lost)} of its {len(episode_indices) + len(lost)} episodes not imported: their own files are "
                  f"missing or broken ({paths.ERRORS} names each); the others imported",)
    return FileOutcome(dataset=dataset, episodes_file=episodes_file, status="imported", parts=tuple(written),
                       episodes=len(episode_indices) + len(lost), episodes_written=len(episode_indices),
                       episodes_failed=len(lost), failures=dropped, episode_failures=many,
                       frames=sum(r.frames for r in results), bytes=sum(r.bytes for r in results),
                       data_bytes=sum(r.data_bytes for r in results), notes=notes, part_files=part_files)


def errors_jsonl(failures: Iterable[Union[FailureRecord, EpisodeFailures]]) -> bytes:
    """errors.jsonl: one JSON object per failure, in a stable order."""
    sink = io.BytesIO()
    write_errors_jsonl(sink, failures)
    return sink.getvalue()


def write_errors_jsonl(sink: IO[bytes], failures: Iterable[Union[FailureRecord, EpisodeFailures]]) -> int:
    """Write errors.jsonl to `sink` row by row, in a stable order (`failure_rows`), each line through the
    one redaction every text of the output passes; returns the rows written. Records standing for many
    rows are expanded as they are written, a batch of lines at a time: hundreds of thousands of failed
    episodes never sit in memory as records, nor as one string."""
    batch: list[str] = []
    written = 0
    for f in failure_rows(failures):
        batch.append(_error_line(f))
        written += 1
        if len(batch) >= 4096:
            sink.write(redact("".join(batch), shapes=False).encode())
            batch.clear()
    if batch:
        sink.write(redact("".join(batch), shapes=False).encode())
    return written


def _json_text(value: Optional[str]) -> str:
    return "null" if value is None else _encode_text(value)


def _error_line(f: FailureRecord) -> str:
    """`json.dumps(f.to_json_dict(), sort_keys=True)` and a newline, put together field by field (the same
    bytes, in a fraction of the time over hundreds of thousands of rows)."""
    if type(f.episode_index) is not int and f.episode_index is not None:
        return json.dumps(f.to_json_dict(), sort_keys=True) + "\n"
    episode = "null" if f.episode_index is None else str(f.episode_index)
    return (f'{{"dataset": {_json_text(f.dataset)}, "episode_index": {episode}, '
            f'"episodes_file": {_json_text(f.episodes_file)}, "file": {_json_text(f.file)}, '
            f'"message": {_json_text(f.message)}, "rule": {_json_text(f.rule)}}}\n')


def manifest_bytes(doc: Mapping) -> bytes:
    """manifest.json's bytes, through the one redaction every text of the output passes (the dataset's own
    strings and the notes included; without `shapes`: a file may be named like anything)."""
    return redact(json.dumps(doc, indent=2, sort_keys=True, default=_as_list) + "\n", shapes=False).encode()


def _as_list(value: object) -> list:
    """A sequence that is not a list, as JSON writes it: a v2.x group's source paths are held as what renders
    them (`v2.OwnPaths`) until its manifest entry is written, one entry at a time."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(iter(value))  # not list(value): that asks its length first, which renders it once more
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def write_manifest(sink: IO[bytes], doc: Mapping) -> None:
    """Write `manifest_bytes(doc)` to `sink` a batch of whole lines at a time: the manifest of a dataset of
    hundreds of thousands of episodes (each group's source files listed) is not held whole, twice, as text
    and as bytes. Each batch is redacted as the whole text would be (a JSON line holds no raw newline)."""
    pending: list[str] = []
    size = 0
    for piece in json.JSONEncoder(indent=2, sort_keys=True, default=_as_list).iterencode(doc):
        pending.append(piece)
        size += len(piece)
        if size >= 1 << 20 and "\n" in piece:
            text = "".join(pending)
            cut = text.rindex("\n") + 1
            sink.write(redact(text[:cut], shapes=False).encode())
            pending, size = [text[cut:]], len(text) - cut
    sink.write(redact("".join(pending) + "\n", shapes=False).encode())


def file_entry(o: FileOutcome, source: Optional[Mapping], run_id: str) -> dict:
    """An episodes file's manifest entry: its outcome, the sources it was made from, the run that wrote it."""
    return {
        "status": o.status, "run_id": run_id, **(source or {}), "parts": list(o.parts), "episodes": o.episodes,
        "episodes_written": o.episodes_written, "episodes_failed": o.episodes_failed,
        "frames": o.frames, "bytes": o.bytes, "data_bytes": o.data_bytes, "failures": o.failure_count,
        "notes": list(o.notes), "part_files": [p.to_json() for p in o.part_files],
    }


def totals(entries: Mapping[str, Mapping], *, errors: int, warnings: int) -> dict:
    """A manifest's totals, counted from its episodes files' entries: the one count of every path that
    writes a manifest (the finish of an import, an interrupted run's fold of its journal), so that the
    totals of the same entries are the same whichever path wrote them.

    A `removed` entry counts only as removed. Episodes a file failed count where the file's own import
    counted them (a failed file, or an imported v2.x file that left some out); an `unchanged` file's
    counts are carried as its earlier run wrote them.

    Args:
        entries: the manifest's `episodes_files`.
        errors: the errors.jsonl rows of the run.
        warnings: the warnings the manifest lists.
    """
    listed = [e for e in entries.values() if isinstance(e, Mapping)]
    live = [e for e in listed if e.get("status") != "removed"]

    def count(status: str, among: Sequence[Mapping] = live) -> int:
        return sum(e.get("status") == status for e in among)

    def total(key: str, statuses: Optional[tuple[str, ...]] = None) -> int:
        return sum(int(e.get(key) or 0) for e in live if statuses is None or e.get("status") in statuses)

    return {
        "episodes_files": len(live),
        "episodes_files_imported": count("imported"),
        "episodes_files_failed": count("failed"),
        "episodes_files_unchanged": count("unchanged"),
        "episodes_files_removed": count("removed", listed),
        "episodes": total("episodes"),
        "episodes_written": total("episodes_written"),
        "episodes_failed": total("episodes_failed", ("failed", "imported")),
        "frames": total("frames"),
        "bytes": total("bytes"),
        "errors": errors,
        "warnings": warnings,
    }


def fill_manifest(doc: dict, *, entries: Mapping[str, Mapping], shards: Sequence[Mapping],
                  versions: Mapping[str, str], errors: int, warnings: int) -> dict:
    """Fill in what a manifest lists, the same way whichever path writes it (the finish of an import, an
    interrupted run's fold of its journal): its episodes files, its media_index/ shards and the MP4 tokens
    their rows hold, and the totals counted from those entries.

    Args:
        doc: the manifest being written; the fields above are replaced.
        entries: per episodes file, its entry.
        shards: the media_index/ shards' records (each names its `path`).
        versions: per MP4, the token of its rows.
        errors: the errors.jsonl rows of the run.
        warnings: the warnings the manifest lists.
    """
    doc["episodes_files"] = {rel: entries[rel] for rel in sorted(entries)}
    doc["media_index_files"] = sorted(shards, key=lambda r: str(r.get("path") or ""))
    doc["media_index"] = [r["path"] for r in doc["media_index_files"] if "path" in r]
    doc["video_versions"] = {k: versions[k] for k in sorted(versions)}
    doc["totals"] = totals(doc["episodes_files"], errors=errors, warnings=warnings)
    return doc


def manifest(dataset: str, info_sha256: Optional[str], outcomes: Sequence[FileOutcome], *,
             started_at: str, finished_at: str, media_index_files: Sequence[str] = (),
             dataset_failures: Sequence[FailureRecord] = (), source: Optional[dict] = None,
             run_id: str = "", options: Optional[dict] = None, warnings: Sequence[WarningRecord] = (),
             notes: Sequence[str] = (), file_sources: Optional[Mapping[str, Mapping]] = None) -> dict:
    """manifest.json: what was imported, with totals that must add up (episodes read = written + failed).

    Args:
        dataset: the dataset root URI.
        info_sha256: the digest of its meta/info.json as read, None when it could not be read.
        outcomes: one per episodes file.
        started_at, finished_at: the run's times (ISO 8601, UTC).
        media_index_files: the media_index parts written, relative to the output root.
        dataset_failures: failures of the dataset as a whole (before any episodes file was read).
        source: the dataset's fingerprint, to skip it next time when unchanged.
        run_id: the run's id.
        options: the options that shape the output.
        warnings: quirks that imported fine but matter to readers.
        notes: dataset-level remarks (e.g. that `--skip-videos` imports the rest).
        file_sources: per episodes file, the sources its import was made from (`source_digest` ...), so
            the next run can tell which episodes files changed.

    Each episodes file's entry names the run that wrote it (`run_id`): this one for the entries made
    here; entries of files left unchanged, carried in by the caller, keep their earlier run's.
    """
    listed = sorted(warnings, key=WarningRecord.sort_key)
    entries = {o.episodes_file: file_entry(o, (file_sources or {}).get(o.episodes_file), run_id)
               for o in sorted(outcomes, key=lambda o: o.episodes_file)}
    counted = totals(entries, errors=sum(o.failure_count for o in outcomes) + len(dataset_failures),
                     warnings=len(listed))
    return {
        "dataset": dataset,
        "info_json_sha256": info_sha256,
        "source": source,
        "run_id": run_id,
        "options": options,
        "status": "imported" if counted["errors"] == 0 else "failed",
        "episodes_files": entries,
        "media_index": list(media_index_files),
        "totals": counted,
        "warnings": [w.to_json() for w in listed],
        "notes": list(notes),
        "tool": {"name": TOOL_NAME, "version": tool_version()},
        "started_at": started_at,
        "finished_at": finished_at,
    }


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
