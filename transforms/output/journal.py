"""What a run has committed so far, recorded as it commits, so an interrupted run loses nothing it finished.

The manifest is written once per dataset, at the end; a run stopped before (Ctrl-C, SIGTERM, a killed
worker) would leave committed parts that no manifest names, and the next run would import them again.
So each commit also writes one small record under `OUT/.journal/<run id>/`: an episodes file's manifest
entry (its parts with size, rows and sha256, its sources digest), or a media_index/ shard's record and
the MP4 tokens of the rows it holds. `fold` turns the last manifest and these records into the manifest
as it stands (status `interrupted`): the interrupted run writes it as it stops, and the next run's check
reads it (folding in records a killed run left) so it imports only what was not committed. The finish
step, having written the real manifest, removes the records.

Records are only ever added by the run holding the output's lease; one whose options differ from the
run reading it is ignored (its output would not be this run's).

An episodes file is committed by the worker that writes its last part, as soon as that is done (not after
every part of the run): a file of one part at once; a file of several parts by way of one `part` record
per temporary part written (its size, rows, sha256 and findings), the worker that finds them all recorded
committing the file once it wins the file's `commit` claim (a create that only one worker can make). Part
records and claims are never folded: a part is committed only when its file's record is written, and the
temporaries of a run stopped before that are removed with their records.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping, Optional

from transforms.base import storage
from transforms.output import safety, paths
from transforms.base.errors import LeRobotImportError

PROGRESS_DIR = ".journal"
INTERRUPTED = "interrupted"
#: A record is one episodes file's manifest entry (a kilobyte or so); one larger than this is not read.
MAX_RECORD_BYTES = 4 << 20


#: The kinds of record `read_records` reads (the others only coordinate the run that writes them).
FOLDED_KINDS = ("file", "shard")


def _key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _run_folder(out_root: str, run_id: str) -> str:
    return storage.join(out_root, f"{PROGRESS_DIR}/{run_id or 'run'}")


def _record_uri(out_root: str, run_id: str, kind: str, key: str) -> str:
    return storage.join(_run_folder(out_root, run_id), f"{kind}-{_key(key)}.json")


def record_file(out_root: str, *, run_id: str, options: Mapping, episodes_file: str, entry: Mapping) -> None:
    """Record an episodes file just committed: its manifest entry as the finish step would write it."""
    doc = {"kind": "episodes_file", "run_id": run_id, "options": dict(options), "episodes_file": episodes_file,
           "entry": dict(entry)}
    storage.write_atomic(_record_uri(out_root, run_id, "file", episodes_file), _dumps(doc))


def record_shard(out_root: str, *, run_id: str, options: Mapping, shard: str, action: str,
                 record: Optional[Mapping], versions: Mapping[str, str]) -> None:
    """Record a media_index/ shard just written (or emptied) and the tokens of the MP4 rows it wrote."""
    doc = {"kind": "shard", "run_id": run_id, "options": dict(options), "shard": shard, "action": action,
           "record": dict(record) if record else None, "versions": dict(versions)}
    storage.write_atomic(_record_uri(out_root, run_id, "shard", shard), _dumps(doc))


def record_part(out_root: str, *, run_id: str, episodes_file: str, part: int, result: Mapping) -> None:
    """Record a part of a file of several parts just written under its temporary name (`result`: what the
    file's commit needs of it, see `transforms.write_parts`)."""
    doc = {"kind": "part", "run_id": run_id, "episodes_file": episodes_file, "part": part, "result": dict(result)}
    storage.write_atomic(part_record_uri(out_root, run_id, episodes_file, part), _dumps(doc))


def part_record_uri(out_root: str, run_id: str, episodes_file: str, part: int) -> str:
    return storage.join(_run_folder(out_root, run_id), f"part-{_key(episodes_file)}-{part:06d}.json")


def recorded_parts(out_root: str, run_id: str, episodes_file: str, num_parts: int = 0) -> dict[int, dict]:
    """The parts of an episodes file this run has recorded so far: part number -> its `result`; nothing
    read (empty) while fewer than `num_parts` records are listed."""
    folder = _run_folder(out_root, run_id)
    prefix = f"part-{_key(episodes_file)}-"
    found: dict[int, dict] = {}
    names = [name for name in storage.list_dir(folder) if name.startswith(prefix) and name.endswith(".json")]
    if len(names) < num_parts:
        return found  # a part not recorded yet: none is read until every one may be there
    for name in names:
        try:  # bounded, as every record is; one that cannot be read leaves the file to the commit step
            doc = json.loads(storage.read_state_file(storage.join(folder, name), what="journal record", file=name,
                                                     max_bytes=MAX_RECORD_BYTES) or b"null")
        except (OSError, ValueError, RecursionError, LeRobotImportError):
            continue
        if isinstance(doc, dict) and doc.get("episodes_file") == episodes_file and isinstance(doc.get("result"), dict):
            found[int(doc["part"])] = doc["result"]
    return found


def commit_claim_uri(out_root: str, run_id: str, episodes_file: str) -> str:
    """The claim the worker committing an episodes file of several parts makes first (created once)."""
    return _record_uri(out_root, run_id, "commit", episodes_file)


def record_uris(out_root: str) -> list[str]:
    """Every record under OUT/.journal/ (folded kinds, part records and claims alike), unread."""
    try:
        return storage.list_files(storage.join(out_root, PROGRESS_DIR), suffix=".json")
    except (OSError, ValueError):
        return []


def read_records(out_root: str, options: Mapping) -> tuple[list[dict], list[str]]:
    """The records under OUT/.journal/ made with `options`, and every record's URI (to remove them)."""
    found, uris = [], record_uris(out_root)
    for uri in uris:
        if not uri.rsplit("/", 1)[-1].startswith(tuple(f"{kind}-" for kind in FOLDED_KINDS)):
            continue  # a part record or a claim: nothing the manifest holds
        try:
            # bounded, a regular file only, never through a link: the output's own state
            doc = json.loads(storage.read_state_file(uri, what="journal record", file=storage.relative_to(
                out_root, uri), max_bytes=MAX_RECORD_BYTES) or b"null")
        except (OSError, ValueError, RecursionError, LeRobotImportError):
            continue  # no proof of a commit: what it would record is imported again
        if isinstance(doc, dict) and doc.get("options") == dict(options):
            found.append(doc)
    return found, uris


def fold(previous: Optional[Mapping[str, Any]], records: Iterable[Mapping[str, Any]], *, dataset: str,
         options: Mapping, run_id: str = "", note: Optional[str] = None) -> Optional[dict]:
    """The manifest as it stands: `previous` (or an empty one) with every recorded commit in it.

    Args:
        previous: the output's manifest.json (made with `options`), or None.
        records: `read_records`' records.
        dataset: the dataset root URI.
        options: the run's output options.
        run_id: names the folded manifest (the interrupted run's id).
        note: added to the manifest's notes (why it is `interrupted`).
    Returns:
        None when there is nothing to fold (no record and no previous manifest), else the manifest, with
        status `interrupted` when any record was folded in (never taken as an up-to-date import).
    """
    records = list(records)
    if not records:
        return dict(previous) if previous else None
    doc: dict[str, Any] = json.loads(json.dumps(previous)) if previous else {
        "dataset": dataset, "options": dict(options), "episodes_files": {}, "media_index": [],
        "media_index_files": [], "video_versions": {}, "warnings": [], "notes": [], "source": None,
        "media_index_layout": paths.MEDIA_INDEX_LAYOUT}
    if previous and not isinstance(doc.get("video_versions"), dict):
        doc["video_versions"] = {}
    entries = dict(doc.get("episodes_files") or {})
    shards = {r.get("path"): r for r in doc.get("media_index_files") or [] if isinstance(r, dict)}
    versions = dict(doc.get("video_versions") or {})
    for r in records:
        if r.get("kind") == "episodes_file" and isinstance(r.get("entry"), dict):
            entries[str(r["episodes_file"])] = r["entry"]
        elif r.get("kind") == "shard":
            shard = str(r.get("shard"))
            if r.get("record"):
                shards[shard] = r["record"]
            else:
                shards.pop(shard, None)
            versions.update({str(k): str(v) for k, v in (r.get("versions") or {}).items()})
    doc["episodes_files"] = {rel: entries[rel] for rel in sorted(entries)}
    doc["media_index_files"] = [shards[p] for p in sorted(shards)]
    doc["media_index"] = [r["path"] for r in doc["media_index_files"] if "path" in r]
    doc["video_versions"] = {k: versions[k] for k in sorted(versions)}
    doc["status"] = INTERRUPTED
    doc["run_id"] = run_id or doc.get("run_id")
    if note:
        doc["notes"] = list(doc.get("notes") or []) + [note]
    doc["totals"] = _totals(doc["episodes_files"].values(), previous)
    return doc


def _totals(entries: Iterable[Mapping], previous: Optional[Mapping]) -> dict:
    entries = [e for e in entries if isinstance(e, dict) and e.get("status") != "removed"]
    good = [e for e in entries if e.get("status") in ("imported", "unchanged")]
    totals = {
        "episodes_files": len(entries),
        "episodes_files_imported": sum(e.get("status") == "imported" for e in entries),
        "episodes_files_failed": sum(e.get("status") == "failed" for e in entries),
        "episodes_files_unchanged": sum(e.get("status") == "unchanged" for e in entries),
        "episodes_files_removed": 0,
        "episodes": sum(int(e.get("episodes") or 0) for e in entries),
        "episodes_written": sum(int(e.get("episodes_written") or 0) for e in good),
        "episodes_failed": sum(int(e.get("episodes_failed") or 0) for e in entries if e.get("status") == "failed"),
        "frames": sum(int(e.get("frames") or 0) for e in good),
        "bytes": sum(int(e.get("bytes") or 0) for e in good),
        "errors": int(((previous or {}).get("totals") or {}).get("errors") or 0),
        "warnings": len((previous or {}).get("warnings") or []),
    }
    return totals


def clear(out_root: str, uris: Iterable[str]) -> None:
    """Remove records (once the manifest that holds them is written), and OUT/.journal/ when that
    leaves it empty (records a still-running worker wrote meanwhile stay, for the next run to fold)."""
    for uri in uris:
        storage.remove(uri)
    base = storage.join(out_root, PROGRESS_DIR)
    fs, path = storage.filesystem(base)
    try:
        if fs.exists(path) and not fs.find(path):
            fs.rm(path, recursive=True)
    except (FileNotFoundError, OSError):
        pass


def leftover_temporaries(out_root: str) -> list[str]:
    """Every temporary file (`.NAME.tmp-…`, a part or shard being written) under an output root."""
    try:
        listed = storage.list_files(out_root)
    except OSError:
        return []
    return [uri for uri in listed if safety.is_own_tmp(uri.rsplit("/", 1)[-1])]


def _dumps(doc: Mapping) -> bytes:
    return (json.dumps(doc, sort_keys=True) + "\n").encode()
