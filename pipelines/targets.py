"""Which datasets a run imports and where each one's output goes (Beam-free: `plan` uses it too).

One dataset imports into OUT; several (or `--datasets`) each into OUT/<dataset name>/. An output that
overlaps its dataset is refused before anything runs. A folder a `--datasets` glob matches that holds
no meta/info.json (a stray folder in a bucket of datasets) is not a dataset: it is skipped and said so,
never a failure. A root named on the command line that does not exist or is not a dataset is refused
before any output is touched (`resolve_run`): such a run creates nothing under OUT. A Hugging Face Hub dataset
(`hf://datasets/OWNER/NAME[@REVISION]`) is pinned here, once, at the commit its revision names now:
the run reads everything at that commit and its outputs name it, however the branch moves meanwhile.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Optional, Sequence

from pipelines.console import UsageError

from transforms.base import hub, storage
from transforms.output import paths
from transforms.base.errors import LeRobotImportError
from transforms.lerobot.dataset import check_is_dataset
from transforms.lerobot.info import INFO_PATH

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RunTargets:
    """What a run imports, and the roots it leaves out before any output is touched."""

    targets: tuple[tuple[str, str], ...]  # (dataset root, output root) to import
    not_datasets: tuple[str, ...] = ()  # folders a --datasets glob matched that hold no meta/info.json
    refused: tuple[tuple[str, str, str], ...] = ()  # (root, its output, why): named roots that are no dataset
    bulk: bool = False  # each dataset into OUT/<dataset name>/


def resolve_run(dataset: Sequence[str], datasets: Optional[str], output: str, *, check: bool = True) -> RunTargets:
    """The run's targets, each named root checked to exist and hold meta/info.json (not yet read).

    A single dataset that fails the check stops the run (SystemExit, one line); in a run over several,
    it is refused alone (`refused`) and the others go on. Hub roots are checked by the import itself.
    `check=False` (a dry run, a template launcher) asks storage nothing about the named roots.
    """
    not_datasets: list[str] = []
    targets, bulk = _resolve(dataset, datasets, output, not_datasets)
    if not check:
        return RunTargets(targets, tuple(not_datasets), (), bulk)
    keep, refused = [], []
    for root, out in targets:
        problem = root_problem(root)
        if problem is None:
            keep.append((root, out))
        elif not bulk:
            raise SystemExit(f"error: {problem}")
        else:
            refused.append((root, out, problem))
    return RunTargets(tuple(keep), tuple(not_datasets), tuple(refused), bulk)


def root_problem(root: str) -> Optional[str]:
    """Why `root` is not a dataset an import can start on (it does not exist, is a file, or holds no
    meta/info.json), as the one-line error; None when it may be one (or storage cannot tell now: the
    import then meets and records the cause)."""
    if hub.is_hub(root):
        return None
    try:
        check_is_dataset(root)
    except LeRobotImportError as ex:  # any other cause (a link leaving the root...) is the import's to record
        return str(ex) if ex.rule in ("dataset_root", "info_json") else None
    except OSError:
        return None
    return None


def resolve_targets(dataset: Sequence[str], datasets: Optional[str], output: str) -> tuple[tuple[str, str], ...]:
    """(dataset root, output root) pairs for `--dataset` roots and a `--datasets` spec (folders a glob
    matched that hold no meta/info.json left out).

    Raises:
        UsageError (exit status 2): no dataset given, two datasets importing into one folder, an output
            inside its dataset, a Hub repo id given as a path.
        SystemExit: a `--datasets` pattern matching nothing, or no dataset.
    """
    return _resolve(dataset, datasets, output, [])[0]


def _resolve(dataset: Sequence[str], datasets: Optional[str], output: str,
             not_datasets: list[str]) -> tuple[tuple[tuple[str, str], ...], bool]:
    pins: dict[str, str] = {}
    several = bool(datasets) or len(dataset) > 1
    roots = [_root(d, pins, tolerate=several) for d in dataset]
    bulk = resolve_datasets(datasets, pins, not_datasets) if datasets else []
    out = storage.normalize_root(output)
    if not roots and not bulk:
        raise UsageError("error: give --dataset ROOT (repeatable) or --datasets ROOTS|GLOB|@FILE (see --help)")
    roots = list(dict.fromkeys(roots + bulk))
    if len(roots) == 1 and not bulk:
        targets = ((roots[0], out),)
    else:
        names: dict[str, str] = {}
        for root in roots:
            name = dataset_name(root)
            if name in names:
                raise UsageError(f"error: datasets {names[name]} and {root} would both import into "
                                 f"{storage.join(out, name)}; import them in separate runs")
            names[name] = root
        targets = tuple((r, storage.join(out, dataset_name(r))) for r in roots)
    for root, target in targets:
        problem = paths.placement_problem(root, target)
        if problem:
            raise UsageError(f"error: {problem}")
    return targets, not (len(roots) == 1 and not bulk)


def resolve_datasets(spec: str, pins: Optional[dict[str, str]] = None,
                     not_datasets: Optional[list[str]] = None) -> list[str]:
    """`a,b`, glob patterns and `@file` (one root or pattern per line, `#` comments) -> dataset roots.

    Args:
        spec: the `--datasets` value.
        pins: Hub roots already pinned in this run (filled in), so each is looked up once.
        not_datasets: filled in with the folders a glob matched that hold no meta/info.json (left out).
    """
    pins = {} if pins is None else pins
    not_datasets = [] if not_datasets is None else not_datasets
    # A Hub pattern lists the owner's datasets through the Hub's API; a Hub root is pinned at its commit.
    if spec.startswith("@"):
        raw = storage.read_bytes(storage.normalize_root(spec[1:]), what="dataset list", file=spec[1:])
        items = [line.split("#", 1)[0].strip() for line in raw.decode("utf-8", "replace").splitlines()]
    else:
        items = [item.strip() for item in spec.split(",")]
    roots = []
    for item in filter(None, items):
        if hub.is_hub(item) and any(c in item for c in "*?["):
            matches = hub.list_datasets(item)
            if not matches:
                raise SystemExit(f"error: --datasets pattern {item!r} matches no dataset of that owner on the Hub")
            roots += [_root(m, pins, tolerate=True) for m in matches]
        elif hub.is_hub(item):
            roots.append(_root(item, pins, tolerate=True))
        elif any(c in item for c in "*?["):
            matches = [m for m in storage.glob(storage.normalize_root(item)) if storage.is_dir(m)]
            if not matches:
                raise SystemExit(f"error: --datasets pattern {item!r} matches no folder")
            found = [m for m in matches if _holds_info(m)]
            if not found:
                raise SystemExit(f"error: --datasets pattern {item!r} matches {len(matches)} folder"
                                 f"{'s' if len(matches) > 1 else ''}, none of them a dataset (no {INFO_PATH})")
            not_datasets += [m for m in matches if m not in found]
            roots += found
        else:
            roots.append(_local_or_url(item))
    return roots


def _holds_info(folder: str) -> bool:
    """Whether a folder a glob matched holds meta/info.json (when storage cannot tell, it is kept: the
    import then records why it cannot be read)."""
    try:
        return storage.exists(storage.join(folder, INFO_PATH))
    except OSError:
        return True


def _root(item: str, pins: dict[str, str], *, tolerate: bool = False) -> str:
    """A dataset root as the run reads it: normalised, a Hub root pinned at its commit (once per run).

    Args:
        item: the root as the user wrote it.
        pins: Hub roots already pinned in this run (filled in).
        tolerate: a Hub root that cannot be pinned (missing, private, gated, no such revision) is kept
            as written instead of stopping the run: in a run over several datasets one dataset's failure
            never stops the others, and its import meets the same refusal and records it in its own
            errors.jsonl. A run over one dataset stops at once with the clear error instead.
    """
    if not hub.is_hub(item):
        return _local_or_url(item)
    key = item.rstrip("/")
    if key not in pins:
        try:
            pins[key] = hub.pin(key)
        except LeRobotImportError as ex:
            if not tolerate or ex.rule not in ("hub_access", "hub_revision"):
                raise
            _LOG.warning("%s cannot be imported (%s); the other datasets go on", key, ex)
            pins[key] = key
    return storage.normalize_root(pins[key])


#: OWNER/NAME as the Hub spells a dataset's id (what a LeRobot user types, e.g. lerobot/svla_so101_pickplace).
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def hub_id_hint(item: str) -> Optional[str]:
    """The message for a root that is a Hub repo id (OWNER/NAME) where no such local folder exists, else None."""
    if "://" in item or not _REPO_ID.match(item.rstrip("/")) or os.path.exists(item):
        return None
    repo = item.rstrip("/")
    return (f"error: there is no folder {repo!r} here; did you mean hf://datasets/{repo} (the Hugging Face Hub "
            f"dataset {repo})? Give Hub datasets as hf://datasets/OWNER/NAME[@REVISION].")


def _local_or_url(item: str) -> str:
    hint = hub_id_hint(item)
    if hint:
        raise UsageError(hint)
    return storage.normalize_root(item)


def dataset_name(root: str) -> str:
    """The folder a dataset imports into in a bulk run: its root's last name (NAME for a Hub dataset)."""
    if hub.is_hub(root):
        return hub.dataset_name(root)
    return root.rstrip("/").rsplit("/", 1)[-1]
