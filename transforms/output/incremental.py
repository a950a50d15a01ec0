"""The re-run decision: what a run does with a dataset whose output holds an earlier import. Pure: no Beam.

An output's manifest records what its last import was made from (each episodes file's sources, each MP4's
storage token, the media_index/ shards). A run reads it back (`previous_manifest`, with what an interrupted run
committed since, from the journal), finds the output's damage (`find_output_damage`), skips a dataset that is
up to date (`up_to_date`), and otherwise decides per episodes file and per MP4 (`decide`): which files it
imports, which it leaves alone (unchanged, or removed from the dataset), which MP4s it reads and which
media_index/ rows it carries. The import's check step (`transforms.check_datasets`), `plan` and `verify`
decide through the same functions.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.episode.quirks import WarningRecord
from transforms.lerobot import fingerprint
from transforms.lerobot import layouts, sources
from transforms.lerobot.episodes_files import EpisodeRow
from transforms.output import damage, journal, paths, safety
from transforms.output.index_shards import (OLDER_LAYOUT, MediaIndexPlan, ShardRecord, plan_media_index,
                                            previous_media_index, without_shards)

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class KeptFile:
    """An episodes file this run leaves alone: unchanged since the run that imported it (its manifest
    entry is carried as it was, `entry_json`), or gone from the dataset (`removed`: its parts are deleted)."""

    episodes_file: str
    removed: bool
    entry_json: str  # the previous manifest entry, JSON


@dataclasses.dataclass(frozen=True)
class RunDecision:
    """What a run does with one dataset's episodes files and MP4s (`decide`)."""

    file_sources: tuple[sources.EpisodesFileSources, ...] = ()  # every current episodes file's sources
    kept: tuple[KeptFile, ...] = ()  # the files left alone: unchanged or removed
    warnings: tuple[WarningRecord, ...] = ()  # the last import's warnings of the unchanged files
    index_kept: tuple[ShardRecord, ...] = ()  # the shards left alone
    video_versions: tuple[tuple[str, str], ...] = ()  # (MP4, token) of the MP4s whose rows are carried
    media: Optional[MediaIndexPlan] = None  # None: the run cannot tell, and imports everything
    read: Mapping[str, Sequence[EpisodeRow]] = dataclasses.field(default_factory=dict)  # rows read, by file

    @property
    def leave(self) -> frozenset[str]:
        return frozenset(k.episodes_file for k in self.kept)


def previous_manifest(root: str, out: str, options: Mapping[str, Any]) -> Optional[dict]:
    """The output's manifest when it was written with these options from this dataset root, with what an
    interrupted or killed run committed after it (its journal) folded in; else None (an unreadable manifest
    is no proof of anything: everything is imported again).

    Raises:
        LeRobotImportError: rule `output_confinement`, the manifest names paths outside the output's
            folders: the dataset fails before its output is written or cleaned up.
    """
    found = safety.read_manifest(out)
    if found.confinement:
        raise found.problem
    if found.problem is not None:
        _LOG.warning("%s: the output's manifest cannot be used (%s); importing everything again", root,
                     found.problem)
    previous = found.doc
    if not isinstance(previous, dict) or previous.get("options") != options:
        previous = None
    records, _ = journal.read_records(out, options, dataset=root)
    previous = journal.fold(previous, records, dataset=root, options=options)
    if previous is None:
        return None
    if previous.get("dataset") is not None and not storage.same_dataset(str(previous["dataset"]), root):
        return None  # the output names another dataset's files (its clips' URIs): nothing carries over
    return previous


def sweep_journal(root: str, out: str, run_id: str) -> None:
    """An output found up to date holds no commit its manifest lacks (one would have made the fold
    `interrupted`): whatever a dead run left in its journal (part records, claims, records of other
    options or datasets, forged ones) is removed in one sweep, as a finished run removes its own; this
    run's own folder is left."""
    own = storage.join(out, f"{journal.PROGRESS_DIR}/{run_id}/")
    try:
        journal.clear(out, [u for u in journal.record_uris(out) if not u.startswith(own)])
    except (OSError, LeRobotImportError) as ex:  # they stay, for a later run to remove
        _LOG.warning("%s: could not clear the output's journal: %s", root, ex)


def find_output_damage(root: str, out: str, previous: Optional[dict], *, force: bool,
                       checksums: bool) -> damage.OutputDamage:
    """The parts and shards of the output that are not as `previous` records them (sizes; with `checksums`,
    sha256s): what this run repairs. None are looked for with `force` (all is redone).

    Raises:
        LeRobotImportError: rule `output_confinement` (a listed path outside the output).
    """
    if previous is None or force:
        return damage.OutputDamage()
    try:
        return damage.find_damage(out, previous, checksums=checksums)
    except OSError as ex:  # the output cannot be listed: the run's own writes meet it and say so
        _LOG.warning("%s: cannot check the output against its manifest (%s)", root, ex)
        return damage.OutputDamage()


def up_to_date(root: str, source: fingerprint.Fingerprint, previous: Optional[dict],
               options: Mapping[str, Any]) -> bool:
    """The dataset is unchanged since the import `previous` records, made with these options."""
    if previous is None or not fingerprint.up_to_date(previous, source, options):
        return False
    if previous.get("media_index") and previous.get("media_index_layout") != paths.MEDIA_INDEX_LAYOUT:
        return False  # an output of an older media_index/ layout is imported again once
    _LOG.debug("%s is unchanged since its import of %s: skipped (--force redoes it)", root,
               previous.get("finished_at"))
    return True


def decide(root: str, previous: Optional[dict], options: Mapping[str, Any], *, inline_index: bool, force: bool,
           damaged: Sequence[str] = ()) -> RunDecision:
    """The sources of each episodes file, which ones this run leaves alone (unchanged or removed), what it does
    with the MP4s and media_index/ shards (`media` None: it cannot tell, and imports all), and the validated
    rows of the v3 episodes files read to find their sources (by path).

    Args:
        root: the dataset root.
        previous: `previous_manifest`, its damage taken out.
        options: the run's output options.
        inline_index: the run writes each MediaIndex inside the episodes (no media_index/).
        force: redo everything.
        damaged: the shards found damaged, rebuilt with their MP4s read again.
    """
    try:
        scanned = sources.scan_dataset(root, options, previous_manifest=previous)
    except Exception as ex:  # noqa: BLE001 - knowing what changed only saves work: the import itself
        # meets whatever broke here (an info.json too deep to parse, an unreadable file) and reports it
        _LOG.warning("cannot tell which episodes files of %s changed (%s); importing them all", root, ex)
        return RunDecision()
    current = tuple(dataclasses.replace(f, rows=None) for f in scanned.files)
    decisions, media = decide_run(current, previous, scanned.listing.token,
                                  dataset_file=lambda rel: storage.join(root, rel), inline_index=inline_index,
                                  force=force, damaged=damaged, untracked_missing=False)
    kept = []
    for d in decisions:
        if d.action == sources.IMPORT:
            continue
        entry = {"run_id": previous.get("run_id"), **d.previous}  # one without was written by that run
        kept.append(KeptFile(d.episodes_file, d.action == sources.REMOVED, json.dumps(entry)))
    if kept:
        _LOG.debug("%s: %d episodes files unchanged or removed since the last import", root, len(kept))
    carried = tuple((rel, media.tokens[rel]) for rel in sorted(media.carried))
    read = {f.episodes_file: f.rows for f in scanned.files
            if f.rows is not None and f.problem is None and layouts.layout_of(f.episodes_file).sized_by_footers}
    return RunDecision(current, tuple(kept), kept_warnings(root, previous, kept), media.kept_shards, carried, media,
                       read)


def kept_warnings(root: str, previous: Optional[dict], kept: Sequence[KeptFile]) -> tuple[WarningRecord, ...]:
    """The warnings the last import recorded for the episodes files left unchanged: still true of them."""
    unchanged = {k.episodes_file for k in kept if not k.removed}
    fields = ("episodes_file", "episode_index", "file", "what", "by", "message")
    return tuple(WarningRecord(root, *(w.get(f) for f in fields)) for w in (previous or {}).get("warnings") or ()
                 if isinstance(w, dict) and w.get("episodes_file") in unchanged)


def decide_run(files: Sequence[sources.EpisodesFileSources], previous_manifest: Optional[Mapping[str, Any]],
               token: Callable[[str], str], *, dataset_file: Callable[[str], str], inline_index: bool = False,
               force: bool = False, damaged: Iterable[str] = (), untracked_missing: bool = True
               ) -> tuple[tuple[sources.EpisodesFileDecision, ...], MediaIndexPlan]:
    """Per episodes file what a run does (`sources.decide`), and what it does with MP4s and shards.

    An unchanged episodes file is left alone only when every MP4 it uses is accounted for by the last
    run's media_index/ (`video_versions`, same token): else it is imported, which reads its MP4s. An
    output of an older layout (no `media_index_layout`) is imported again whole.

    Args:
        files: the sources of the dataset's current episodes files.
        previous_manifest: the output's manifest written with this run's options, or None.
        token: MP4 path -> its storage token now.
        dataset_file: MP4 path -> its URI.
        inline_index: the run writes each MediaIndex inside the episodes (no media_index/).
        force: redo everything.
        damaged: shards found damaged (`damage.find_damage`): rebuilt, every MP4 of them read again.
        untracked_missing: False: an MP4 that does not exist and that no media_index/ row of the last run
            records is left out of the plan (nothing to read, carry or drop of it: an import's check leaves
            out so the hundreds of thousands of MP4s of gone v2.x chunk folders); True: every MP4 is in it,
            as `plan` and `verify` list them.
    """
    previous = without_shards(previous_media_index(previous_manifest), frozenset(damaged))
    recorded = previous.versions or {}
    tokens: dict[str, str] = {}
    tracked: dict[str, list[str]] = {}  # per episodes file, its MP4s in the plan
    listed = False  # any episodes file names an MP4, in the plan or not
    for f in files:
        kept = tracked[f.episodes_file] = []
        for v in f.video_files:
            listed = True
            found = tokens.get(v)
            if found is None:
                found = token(v)
                if not untracked_missing and found == "missing" and v not in recorded:
                    continue
                tokens[v] = found
            kept.append(v)
    videos = sorted(tokens)
    tokens = {v: tokens[v] for v in videos}
    carry = previous_manifest is not None and not inline_index and not force
    rebuild = OLDER_LAYOUT if carry and previous.older_layout and (
        listed or previous_manifest.get("media_index")) else None
    decisions = sources.decide(files, previous_manifest, force=force, rebuild=rebuild,
                               recorded_videos=previous.versions if carry else None, video_tokens=tokens)
    imported = {v for d in decisions if d.action == sources.IMPORT and d.sources for v in tracked[d.episodes_file]}
    left = {v for d in decisions if d.action == sources.UNCHANGED and d.sources for v in tracked[d.episodes_file]}
    plan = plan_media_index(videos, imported, tokens.__getitem__, previous, dataset_file=dataset_file,
                            inline_index=inline_index, force=force, left_videos=left)
    return decisions, plan
