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
import logging
import os
import re
import stat
from typing import Any, Iterable, Mapping, Optional

from transforms.base import storage
from transforms.base.errors import LeRobotImportError, quote
from transforms.lerobot import layouts
from transforms.output import paths, safety, writes

_LOG = logging.getLogger(__name__)

PROGRESS_DIR = paths.JOURNAL_DIR
INTERRUPTED = "interrupted"
#: A record is one episodes file's manifest entry (a kilobyte or so); one larger than this is not read.
MAX_RECORD_BYTES = 4 << 20


#: The kinds of record `read_records` reads (the others only coordinate the run that writes them).
FOLDED_KINDS = ("file", "shard")
#: The only names the journal writes (and so the only ones it ever removes): `<run id>/<kind>-<digest>.json`,
#: a part record `<run id>/part-<digest>-NNNNNN.json`, and the temporaries of either (`storage.tmp_name`).
RECORD_NAME = re.compile(r"^(?:(?:file|shard|commit)-[0-9a-f]{24}|part-[0-9a-f]{24}-[0-9]{6})\.json$")
#: A run folder's name: a run id (a uuid's hex digits; tests and tools use short words).
RUN_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _run_folder(out_root: str, run_id: str) -> str:
    return storage.join(out_root, f"{PROGRESS_DIR}/{run_id or 'run'}")


def _record_uri(out_root: str, run_id: str, kind: str, key: str) -> str:
    return _confined_record(out_root, run_id, f"{kind}-{_key(key)}.json")


def _confined_record(out_root: str, run_id: str, name: str) -> str:
    """The URI of a record of the run, checked as every managed path of the output is (rule
    `output_confinement`): `.journal/` and the run's folder are never links, never something other than
    folders, so a record is never written (nor later removed) outside the output."""
    run = run_id or "run"
    if not RUN_NAME.match(run):
        raise LeRobotImportError("output_confinement", f"the run id {quote(run)} cannot name a folder of the "
                                 "output's journal", file=PROGRESS_DIR)
    return safety.confined(out_root, f"{PROGRESS_DIR}/{run}/{name}", folder=PROGRESS_DIR,
                                 what="journal record")


def is_own_name(name: str) -> bool:
    """Whether a file name in a run folder of the journal is one the journal writes (a record, or the
    temporary of one)."""
    own = safety.TMP_PATTERN.match(name)
    return RECORD_NAME.match(own.group("final") if own else name) is not None


def record_file(out_root: str, *, run_id: str, options: Mapping, dataset: str, episodes_file: str,
                entry: Mapping) -> None:
    """Record an episodes file just committed: its manifest entry as the finish step would write it, and
    the dataset it is of (a record names its dataset: a record of another is never folded)."""
    doc = {"kind": "episodes_file", "run_id": run_id, "options": dict(options), "dataset": dataset,
           "episodes_file": episodes_file, "entry": dict(entry)}
    storage.write_atomic(_record_uri(out_root, run_id, "file", episodes_file), _dumps(doc))


def record_shard(out_root: str, *, run_id: str, options: Mapping, dataset: str, shard: str, action: str,
                 record: Optional[Mapping], versions: Mapping[str, str]) -> None:
    """Record a media_index/ shard just written (or emptied) and the tokens of the MP4 rows it wrote."""
    doc = {"kind": "shard", "run_id": run_id, "options": dict(options), "dataset": dataset, "shard": shard,
           "action": action, "record": dict(record) if record else None, "versions": dict(versions)}
    storage.write_atomic(_record_uri(out_root, run_id, "shard", shard), _dumps(doc))


def record_part(out_root: str, *, run_id: str, episodes_file: str, part: int, result: Mapping) -> None:
    """Record a part of a file of several parts just written under its temporary name (`result`: what the
    file's commit needs of it, see `transforms.write_parts`)."""
    doc = {"kind": "part", "run_id": run_id, "episodes_file": episodes_file, "part": part, "result": dict(result)}
    storage.write_atomic(part_record_uri(out_root, run_id, episodes_file, part), _dumps(doc))


def part_record_uri(out_root: str, run_id: str, episodes_file: str, part: int) -> str:
    return _confined_record(out_root, run_id, f"part-{_key(episodes_file)}-{part:06d}.json")


def recorded_parts(out_root: str, run_id: str, episodes_file: str, num_parts: int = 0) -> dict[int, dict]:
    """The parts of an episodes file this run has recorded so far: part number -> its `result`; nothing
    read (empty) while fewer than `num_parts` records are listed."""
    folder = _run_folder(out_root, run_id)
    prefix = f"part-{_key(episodes_file)}-"
    found: dict[int, dict] = {}
    names = [name for name in storage.list_dir(folder) if name.startswith(prefix) and RECORD_NAME.match(name)]
    if len(names) < num_parts:
        return found  # a part not recorded yet: none is read until every one may be there
    for name in names:
        try:  # bounded, as every record is; one that cannot be read leaves the file to the commit step
            doc = json.loads(storage.read_state_file(_confined_record(out_root, run_id, name), what="journal record",
                                                     file=name, max_bytes=MAX_RECORD_BYTES) or b"null")
        except (OSError, ValueError, RecursionError, LeRobotImportError):
            continue
        if (isinstance(doc, dict) and doc.get("episodes_file") == episodes_file and isinstance(doc.get("result"), dict)
                and type(doc.get("part")) is int):
            found[doc["part"]] = doc["result"]
    return found


def commit_claim_uri(out_root: str, run_id: str, episodes_file: str) -> str:
    """The claim the worker committing an episodes file of several parts makes first (created once)."""
    return _record_uri(out_root, run_id, "commit", episodes_file)


def record_uris(out_root: str) -> list[str]:
    """Every file the journal wrote under OUT/.journal/ (folded kinds, part records, claims and their
    temporaries), unread, in one listing: the names the journal writes, in run folders, never through a
    link (a `.journal` or run folder that is a link, or not a folder, lists nothing: the output's check
    refuses it), never anything else someone put there."""
    base = storage.join(out_root, PROGRESS_DIR)
    fs, path = storage.filesystem(base)
    found: list[str] = []
    if storage.is_local(fs):
        try:
            runs = _scan_dirs(path)
        except OSError:
            return []
        for run in runs:
            try:
                with os.scandir(os.path.join(path, run)) as entries:
                    found.extend(f"{base}/{run}/{e.name}" for e in entries
                                 if e.is_file(follow_symlinks=False) and is_own_name(e.name))
            except OSError:
                continue
        return sorted(found)
    try:
        listed = fs.find(path)
    except (FileNotFoundError, OSError, ValueError):
        return []
    prefix = path.rstrip("/") + "/"
    for p in listed:
        rel = p[len(prefix):] if p.startswith(prefix) else ""
        run, _, name = rel.partition("/")
        if RUN_NAME.match(run) and "/" not in name and is_own_name(name):
            found.append(storage.to_uri(fs, p))
    return sorted(found)


def _scan_dirs(path: str) -> list[str]:
    """The run folders directly in the local journal folder `path` (real folders only); nothing when
    `path` is missing, a link or not a folder."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    if not stat.S_ISDIR(st.st_mode):
        return []  # a link or a file: never followed (the output's check names it)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with os.scandir(fd) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False) and RUN_NAME.match(e.name))
    finally:
        os.close(fd)


def read_records(out_root: str, options: Mapping, *, dataset: str) -> tuple[list[dict], list[str]]:
    """The records under OUT/.journal/ of `dataset` made with `options`, each checked as the manifest is,
    and every record's URI (to remove them).

    A record is folded only when it says it is of this dataset (`storage.same_dataset`) and was made with
    these options; one of another dataset or other options is left out quietly (its output would not be
    this run's). A record that is not what the journal writes (an episodes-file key that is no episodes
    file's, a part of another file, a path outside its folder or through a link, a shard that is not the
    one it names) is dropped with a warning naming it: no forged record reaches a manifest or a clean-up.
    """
    found, uris = [], record_uris(out_root)
    for uri in uris:
        name = uri.rsplit("/", 1)[-1]
        if not name.startswith(tuple(f"{kind}-" for kind in FOLDED_KINDS)) or not RECORD_NAME.match(name):
            continue  # a part record, a claim or a temporary: nothing the manifest holds
        rel = storage.relative_to(out_root, uri)
        try:
            # bounded, a regular file only, never through a link: the output's own state
            doc = json.loads(storage.read_state_file(uri, what="journal record", file=rel,
                                                     max_bytes=MAX_RECORD_BYTES) or b"null")
        except (OSError, ValueError, RecursionError, LeRobotImportError):
            continue  # no proof of a commit: what it would record is imported again
        if not isinstance(doc, dict) or doc.get("options") != dict(options):
            continue
        said = doc.get("dataset")
        if not isinstance(said, str) or not storage.same_dataset(said, dataset):
            _LOG.info("%s: journal record %s is of another dataset (%s): left out", out_root, rel, quote(said))
            continue
        why = record_problem(out_root, doc)
        if why is not None:
            _LOG.warning("%s: journal record %s dropped: %s; what it names is imported again", out_root, rel, why)
            continue
        found.append(doc)
    return found, uris


def record_problem(out_root: str, doc: Mapping) -> Optional[str]:
    """Why a folded record is not one the journal writes, or None: the manifest's own checks (keys, parts,
    shards, MP4 paths, confinement, links) and the shape `fold` relies on."""
    kind = doc.get("kind")
    try:
        if kind == "episodes_file":
            return _file_problem(out_root, doc.get("episodes_file"), doc.get("entry"))
        if kind == "shard":
            return _shard_problem(out_root, doc.get("shard"), doc.get("record"), doc.get("versions"))
    except LeRobotImportError as ex:
        return str(ex)
    return f"its kind {quote(kind)} is none the journal writes"


def _is_episodes_key(key: Any) -> bool:
    """An episodes file's name as the dataset's listing gives it: `meta/episodes/….parquet`, or a v2.x group."""
    if not safety.clean_relative(key):
        return False
    layout = layouts.layout_of(key)
    stem = layout.output_stem(key)
    if not safety.clean_relative(stem):
        return False
    return layout.names_unit(key)


def _file_problem(out_root: str, key: Any, entry: Any) -> Optional[str]:
    if not _is_episodes_key(key):
        return f"its episodes file {quote(key)} is not an episodes file's name (a clean path under meta/episodes/)"
    if not isinstance(entry, dict) or entry.get("status") != "imported":
        return f"its entry for {key} is not an imported file's"
    parts = entry.get("parts")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, str) for p in parts):
        return f"its entry for {key} lists no parts"
    expected = [paths.output_part_path(key, i, len(parts)) for i in range(len(parts))]
    if parts != expected:
        return f"its entry for {key} lists parts that are not that file's ({quote(parts[0])}, …)"
    files = entry.get("part_files")
    if files is not None and (not isinstance(files, list) or [f.get("path") if isinstance(f, dict) else None
                                                                for f in files] != parts):
        return f"its entry for {key} lists part files that are not its parts"
    safety.check_manifest({"episodes_files": {key: entry}}, out_root)
    for part in parts:  # locally: no link on the way, a regular file where it exists
        safety.confined(out_root, part, folder=paths.EPISODES_DIR, what="episode part")
    return None


def _shard_problem(out_root: str, shard: Any, record: Any, versions: Any) -> Optional[str]:
    if not safety.clean_relative(shard) or not shard.startswith(paths.MEDIA_INDEX_DIR + "/"):
        return f"its shard {quote(shard)} is not a path under {paths.MEDIA_INDEX_DIR}/"
    if record is not None and (not isinstance(record, dict) or record.get("path") != shard):
        return f"its record of the shard {shard} names another path"
    if not isinstance(versions, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in versions.items()):
        return f"its MP4 versions of the shard {shard} are not names and tokens"
    safety.check_manifest({"episodes_files": {}, "media_index_files": [record] if record else [],
                                 "video_versions": versions}, out_root)
    safety.confined(out_root, shard, folder=paths.MEDIA_INDEX_DIR, what="media_index shard")
    return None


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
    # A file the previous run removed is recorded as removed once, by that run, as a finished run does
    entries = {k: e for k, e in (doc.get("episodes_files") or {}).items()
               if not (isinstance(e, dict) and e.get("status") == "removed")}
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
    earlier = (previous or {}).get("totals") or {}
    writes.fill_manifest(doc, entries=entries, shards=list(shards.values()), versions=versions,
                         errors=int(earlier.get("errors") or 0),
                         warnings=len((previous or {}).get("warnings") or []))
    doc["status"] = INTERRUPTED
    doc["run_id"] = run_id or doc.get("run_id")
    if note:
        doc["notes"] = list(doc.get("notes") or []) + [note]
    return doc


def clear(out_root: str, uris: Iterable[str]) -> None:
    """Remove records (once the manifest that holds them is written) in one sweep, then the run folders and
    OUT/.journal/ they leave empty (records a still-running worker wrote meanwhile stay, for the next run
    to fold). Only names the journal writes are removed, never through a link, never a folder with
    anything else in it."""
    base = storage.join(out_root, PROGRESS_DIR)
    fs, path = storage.filesystem(base)
    prefix = base.rstrip("/") + "/"
    mine = [u for u in uris if u.startswith(prefix) and _own_uri(u[len(prefix):])]
    if storage.is_local(fs):
        _clear_local(path, [u[len(prefix):] for u in mine])
        return
    for uri in mine:
        storage.remove(uri)
    try:
        if fs.exists(path) and not fs.find(path):
            fs.rm(path, recursive=True)
    except (FileNotFoundError, OSError):
        pass


def _own_uri(rel: str) -> bool:
    run, _, name = rel.partition("/")
    return RUN_NAME.match(run) is not None and "/" not in name and is_own_name(name)


def _clear_local(path: str, rels: list[str]) -> None:
    """Unlink each record (relative to the local journal folder `path`) through its run folder opened
    without following links, then remove the folders left empty (`rmdir` removes nothing else)."""
    try:
        runs = set(_scan_dirs(path))
    except OSError:
        return
    by_run: dict[str, list[str]] = {}
    for rel in rels:
        run, _, name = rel.partition("/")
        if run in runs:
            by_run.setdefault(run, []).append(name)
    for run, names in by_run.items():
        try:
            fd = os.open(os.path.join(path, run), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            for name in names:
                try:
                    os.unlink(name, dir_fd=fd)
                except FileNotFoundError:
                    pass
        finally:
            os.close(fd)
    for run in runs:
        try:
            os.rmdir(os.path.join(path, run))
        except OSError:  # not empty (a record written meanwhile, or a file the journal did not write)
            pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def leftover_temporaries(out_root: str) -> list[str]:
    """Every temporary file (`.NAME.tmp-…`, a part, shard or record being written) in the folders the
    import manages under an output root, found without following links: only the import's own names, only
    where it writes them."""
    found: list[str] = []
    fs, base = storage.filesystem(out_root)
    local = storage.is_local(fs)
    for folder in (paths.EPISODES_DIR, paths.MEDIA_INDEX_DIR, paths.QUALITY_DIR, PROGRESS_DIR):
        uri = storage.join(out_root, folder)
        if local:
            found += [f"{uri}/{rel}" for rel in _walk_local(os.path.join(base, folder))
                      if safety.is_own_tmp(rel.rsplit("/", 1)[-1])]
            continue
        try:
            listed = storage.list_files(uri)
        except OSError:
            continue
        found += [u for u in listed if safety.is_own_tmp(u.rsplit("/", 1)[-1])]
    top = storage.list_dir(out_root) if not local else _top_files(base)
    found += [storage.join(out_root, n) for n in top if safety.is_own_tmp(n)]
    return found


def _walk_local(path: str) -> list[str]:
    """The regular files under the local folder `path`, relative to it, never through a link."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return []
    except OSError:
        return []
    out, stack = [], [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(os.path.join(path, rel) if rel else path) as entries:
                for e in entries:
                    child = f"{rel}/{e.name}" if rel else e.name
                    if e.is_dir(follow_symlinks=False):
                        stack.append(child)
                    elif e.is_file(follow_symlinks=False):
                        out.append(child)
        except OSError:
            continue
    return out


def _top_files(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return [e.name for e in entries if e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def _dumps(doc: Mapping) -> bytes:
    return (json.dumps(doc, sort_keys=True) + "\n").encode()
