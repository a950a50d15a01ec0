"""What of an output is no longer as its manifest records it, so that the next run repairs it by itself.

An import that is up to date leaves its output alone; but a part deleted, truncated or overwritten
since (a disk, a colleague, a sync tool) makes "up to date" false. Before a run leaves anything alone it
looks at the output (`find_damage`):

  * every part of an imported episodes file, and every media_index/ shard, that the manifest lists
    exists with the size it records: one listing of `episodes/` and one of `media_index/` (a thousand
    files per request on an object store), no file opened;
  * with `--verify-output`, also the sha256 the manifest records, which reads every such file (several
    at once): a damage that keeps the size is found only so.

What is damaged is then taken as never written (`without_damage`): an episodes file with a damaged part is
imported again (all its parts, rule of the commit: all or none), a damaged shard is rebuilt from its MP4s
(the episodes files using them are imported again). Every path comes from the manifest and is checked to
lie inside the output first (`safety.confined`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
from typing import Any, Iterable, Mapping, Optional

from transforms.base import storage
from transforms.output import safety, paths
from transforms.lerobot import sources

#: Files hashed at once with --verify-output (reads from an object store overlap).
HASH_THREADS = 8
#: Damaged files a run names one by one in its notes; the rest are counted.
MAX_NOTES = 10
_BLOCK = 8 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class DamagedFile:
    """One file of the output that is not as the manifest records it."""

    path: str  # relative to the output root
    found: str  # what is wrong with it: "is missing", "is 10 bytes, the manifest records 20", ...
    episodes_file: Optional[str] = None  # the episodes file whose part it is; None for a media_index shard

    def note(self) -> str:
        if self.episodes_file is not None:
            return (f"repair: the part {self.path} {self.found}: its episodes file {self.episodes_file} is "
                    "imported again")
        return (f"repair: the media_index shard {self.path} {self.found}: it is rebuilt, its MP4s read again "
                "and the episodes files that use them imported again")


@dataclasses.dataclass(frozen=True)
class OutputDamage:
    """The damaged files of one output (none: the output is as its manifest records it)."""

    files: tuple[DamagedFile, ...] = ()
    checksums: bool = False  # sha256s were compared, not sizes only

    def __bool__(self) -> bool:
        return bool(self.files)

    @property
    def episodes_files(self) -> frozenset[str]:
        return frozenset(f.episodes_file for f in self.files if f.episodes_file is not None)

    @property
    def shards(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files if f.episodes_file is None)

    def notes(self) -> list[str]:
        """One note per damaged file (the first `MAX_NOTES`, then one counting the rest)."""
        found = [f.note() for f in self.files[:MAX_NOTES]]
        if len(self.files) > MAX_NOTES:
            found.append(f"repair: {len(self.files) - MAX_NOTES} more damaged files of the output, imported again "
                         "the same way")
        return found


def find_damage(out_root: str, manifest: Optional[Mapping[str, Any]], *, checksums: bool = False) -> OutputDamage:
    """The parts and media_index shards the manifest lists that are missing or not as it records them.

    Args:
        out_root: the output root.
        manifest: its manifest (checked by `safety.read_manifest`), or None.
        checksums: also compare the recorded sha256 (reads every listed file); else sizes only.
    Raises:
        LeRobotImportError: rule `output_confinement`, a listed path lies outside its folder (or, locally,
            passes through a link).
        OSError: the output cannot be listed.
    """
    if not manifest:
        return OutputDamage(checksums=checksums)
    listed = [(rel, rec, path) for rel, path, rec in _parts(manifest)]
    listed += [(None, rec, path) for path, rec in _shards(manifest)]
    if not listed:
        return OutputDamage(checksums=checksums)
    uris = {path: safety.confined(out_root, path, folder=_folder(path), what=_what(path))
            for _, _, path in listed}
    sizes = {**_listed_sizes(out_root, paths.EPISODES_DIR), **_listed_sizes(out_root, paths.MEDIA_INDEX_DIR)}
    damaged, to_hash = [], []
    for rel, rec, path in listed:
        size = sizes.get(path)
        recorded = _int(rec.get("bytes")) if rec else None
        if size is None:
            damaged.append(DamagedFile(path, "is missing", rel))
        elif recorded is not None and size != recorded:
            damaged.append(DamagedFile(path, f"is {size} bytes, the manifest records {recorded}", rel))
        elif checksums and rec and isinstance(rec.get("sha256"), str) and rec["sha256"]:
            to_hash.append((rel, rec["sha256"], path))
    if to_hash:
        with concurrent.futures.ThreadPoolExecutor(max_workers=HASH_THREADS) as pool:
            digests = list(pool.map(lambda item: _sha256(uris[item[2]]), to_hash))
        for (rel, recorded, path), digest in zip(to_hash, digests):
            if digest is None:
                damaged.append(DamagedFile(path, "is missing", rel))
            elif digest != recorded:
                damaged.append(DamagedFile(path, f"has sha256 {digest[:16]}..., the manifest records "
                                           f"{recorded[:16]}... (same size, other bytes)", rel))
    return OutputDamage(tuple(sorted(damaged, key=lambda d: d.path)), checksums)


def without_damage(manifest: Optional[dict], damage: OutputDamage) -> Optional[dict]:
    """The manifest as a run decides from it once `damage` is known: each episodes file with a damaged part
    is taken as not imported (status `damaged`: `sources.decide` imports it again). Damaged shards are
    handed to `incremental.decide_run(damaged=)`, which takes them as never written."""
    if manifest is None or not damage.episodes_files:
        return manifest
    entries = dict(manifest.get("episodes_files") or {})
    for rel in damage.episodes_files:
        if isinstance(entries.get(rel), dict):
            entries[rel] = dict(entries[rel], status=sources.DAMAGED)
    return dict(manifest, episodes_files=entries)


def _parts(manifest: Mapping[str, Any]) -> Iterable[tuple[str, str, Optional[dict]]]:
    """(episodes file, part, its record or None) of every episodes file the manifest counts as imported."""
    for rel, entry in (manifest.get("episodes_files") or {}).items():
        if not isinstance(entry, dict) or entry.get("status") not in sources.GOOD_STATUSES:
            continue
        records = {r.get("path"): r for r in entry.get("part_files") or [] if isinstance(r, dict)}
        for part in entry.get("parts") or []:
            if isinstance(part, str):
                yield rel, part, records.get(part)


def _shards(manifest: Mapping[str, Any]) -> Iterable[tuple[str, Optional[dict]]]:
    records = {r.get("path"): r for r in manifest.get("media_index_files") or [] if isinstance(r, dict)}
    listed = [p for p in manifest.get("media_index") or [] if isinstance(p, str)]
    for path in dict.fromkeys(listed + [p for p in records if isinstance(p, str)]):
        yield path, records.get(path)


def _folder(path: str) -> str:
    return paths.MEDIA_INDEX_DIR if path.startswith(paths.MEDIA_INDEX_DIR + "/") else paths.EPISODES_DIR


def _what(path: str) -> str:
    return "media_index shard" if _folder(path) == paths.MEDIA_INDEX_DIR else "episode part"


def _listed_sizes(out_root: str, folder: str) -> dict[str, int]:
    """Path (relative to the output root) -> size, of every file under one of its folders, from one listing."""
    fs, base = storage.filesystem(storage.join(out_root, folder))
    base = base.rstrip("/")
    fs.invalidate_cache(base)  # what is there now, not what this process listed before
    try:
        found = storage.with_retries(lambda: fs.find(base, detail=True))
    except FileNotFoundError:
        return {}
    sizes = {}
    for name, detail in found.items():
        if name.startswith(base + "/") and detail.get("type") != "directory":
            sizes[f"{folder}/{name[len(base) + 1:]}"] = int(detail.get("size") or 0)
    return sizes


def _sha256(uri: str) -> Optional[str]:
    """The file's sha256 (hex), or None when it is gone."""
    fs, path = storage.filesystem(uri)
    sha = hashlib.sha256()
    try:
        with fs.open(path, "rb") as f:
            while block := f.read(_BLOCK):
                sha.update(block)
    except FileNotFoundError:
        return None
    return sha.hexdigest()


def _int(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None
