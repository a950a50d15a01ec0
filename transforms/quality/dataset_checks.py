"""The checks of a dataset's metadata as a whole and of its data files' columns.

    dataset_totals       info.json's total_episodes / total_frames / splits vs what the episodes files hold
    undeclared_columns   columns of a data file that info.json does not declare (the import does not read them)
    depth_features       depth cameras whose info.json entry lacks what LeRobot needs to read them as depth
"""

from __future__ import annotations

import json
import re
from typing import Iterable, Optional, Sequence

import numpy as np

from transforms.lerobot.info import DatasetInfo
from transforms.quality.findings import Finding

#: Columns a data file may hold besides the declared features: the pandas index LeRobot's older writers left.
_PANDAS_INDEX = re.compile(r"^__index_level_\d+__$")
_SPLIT = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


def info_document(raw: bytes) -> dict:
    """info.json as a dict ({} when it is not a JSON object: the import reports that itself)."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _count(value) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def dataset_totals(dataset: str, info_doc: dict, episodes: int, frames: int,
                   episode_indices: Optional[np.ndarray] = None) -> list[Finding]:
    """Findings where info.json's totals and splits disagree with the episodes files' rows and lengths.

    Args:
        dataset: the dataset root URI.
        info_doc: info.json, parsed.
        episodes: the episodes the episodes files list (rows).
        frames: the frames they hold (the sum of their lengths).
        episode_indices: every episode_index they list, when known: a split `START:END` must name episodes
            that exist, and every episode must lie in a split (else only END <= episodes is checked).
    """
    out = []

    def finding(feature: str, detail: str, count: int) -> Finding:
        return Finding(dataset, None, None, "dataset_totals", feature, count, None, detail, file="meta/info.json")

    declared_episodes = _count(info_doc.get("total_episodes"))
    if declared_episodes is not None and declared_episodes != episodes:
        out.append(finding("total_episodes", f"info.json declares total_episodes {declared_episodes}, the episodes "
                           f"files hold {episodes}", abs(declared_episodes - episodes)))
    declared_frames = _count(info_doc.get("total_frames"))
    if declared_frames is not None and declared_frames != frames:
        out.append(finding("total_frames", f"info.json declares total_frames {declared_frames}, the episodes files "
                           f"hold {frames}", abs(declared_frames - frames)))
    splits = info_doc.get("splits")
    indices = None if episode_indices is None else np.unique(np.asarray(episode_indices, np.int64))
    in_split = np.zeros(0 if indices is None else len(indices), bool)
    for name, spec in sorted(splits.items()) if isinstance(splits, dict) else ():
        m = _SPLIT.match(spec) if isinstance(spec, str) else None
        if m is None:
            out.append(finding(f"splits.{name}", f"info.json split `{name}` is {str(spec)[:80]!r}, not `START:END`", 1))
            continue
        start, end = int(m[1]), int(m[2])
        if indices is None:
            if end > episodes or start > end:
                out.append(finding(f"splits.{name}", f"info.json split `{name}` is {start}:{end} but the episodes "
                                   f"files hold {episodes} episodes", max(end - episodes, 1)))
            continue
        inside = (indices >= start) & (indices < end)
        in_split |= inside
        absent = max(end - start, 0) - int(inside.sum())
        if absent > 0 or start > end:
            missing = np.setdiff1d(np.arange(start, min(end, start + 1_000_000)), indices[inside])[:5]
            out.append(finding(f"splits.{name}", f"info.json split `{name}` is {start}:{end} ({max(end - start, 0)} "
                               f"episodes) but the episodes files hold {int(inside.sum())} of them; absent: "
                               f"{', '.join(map(str, missing.tolist()))}{', ...' if absent > 5 else ''}",
                               max(absent, 1)))
    if isinstance(splits, dict) and splits and indices is not None and not in_split.all():
        left = indices[~in_split]
        out.append(finding("splits", f"{len(left)} episodes lie in no split of info.json "
                           f"({', '.join(map(str, left[:5].tolist()))}{', ...' if len(left) > 5 else ''})", len(left)))
    return out


def depth_features(dataset: str, info_doc: dict) -> list[Finding]:
    """Findings for depth cameras (`is_depth_map: true`) whose info.json entry lacks what LeRobot 0.6.1 reads to
    turn their pixels into depth: a depth video's quantization (`video.depth_min`, `video.depth_max`,
    `video.shift`, `video.use_log`; LeRobot then de-quantizes with its defaults, right only if the writer used
    them), or any depth camera's `depth_unit` (LeRobot then takes millimetres).

    Args:
        dataset: the dataset root URI.
        info_doc: info.json, parsed.
    """
    from transforms.lerobot import depth

    features = info_doc.get("features")
    out = []
    for name, spec in sorted(features.items()) if isinstance(features, dict) else ():
        if not isinstance(spec, dict) or spec.get("dtype") not in ("video", "image"):
            continue
        info = spec.get("info")
        if not depth.is_depth(info):
            continue
        problems = []
        missing = depth.missing_quantization(info) if spec["dtype"] == "video" else []
        if missing:
            defaults = ", ".join(f"{k} {depth.QUANTIZATION_DEFAULTS[k]}" for k in missing)
            problems.append(f"lacks {', '.join(f'`{k}`' for k in missing)}: LeRobot de-quantizes its 12-bit codes "
                            f"with its defaults ({defaults}), which give the right depth only if the writer "
                            "quantized with them")
        unit = (info or {}).get("depth_unit")
        if unit not in depth.DEPTH_UNITS:
            problems.append(("has no `depth_unit`" if unit is None else f"has `depth_unit` {str(unit)[:20]!r}, not "
                             "'mm' or 'm'") + ": LeRobot takes the depth to be in millimetres")
        if problems:
            out.append(Finding(dataset, None, None, "depth_features", name, len(missing) + (unit not in
                               depth.DEPTH_UNITS), None, f"depth camera `{name}` " + "; it ".join(problems),
                               file="meta/info.json"))
    return out


def index_ranges(indices: Sequence[int]) -> list[list[int]]:
    """Episode indices as [[start, end), ...] runs (an episodes file's are mostly one run)."""
    values = np.unique(np.asarray(indices, np.int64))
    if len(values) == 0:
        return []
    breaks = np.flatnonzero(np.diff(values) != 1) + 1
    starts = values[np.concatenate(([0], breaks))]
    ends = values[np.concatenate((breaks - 1, [len(values) - 1]))] + 1
    return [[int(a), int(b)] for a, b in zip(starts, ends)]


def indices_of(ranges: Iterable[Sequence[int]]) -> np.ndarray:
    """The episode indices of [[start, end), ...] runs."""
    parts = [np.arange(int(a), int(b), dtype=np.int64) for a, b in ranges]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def undeclared_columns(dataset: str, episodes_file: str, data_file: str, columns: Iterable[str], info: DatasetInfo,
                       episode_index: Optional[int]) -> Optional[Finding]:
    """A finding naming the columns of a data file that info.json does not declare (None when there are none).

    Args:
        columns: the data file's column names.
        episode_index: the first episode of the episodes file that reads the data file.
    """
    declared = {f.name for f in info.features} | {"index"}
    extra = [c for c in columns if c not in declared and not _PANDAS_INDEX.match(c)]
    if not extra:
        return None
    shown = ", ".join(f"`{c}`" for c in extra[:10]) + (", ..." if len(extra) > 10 else "")
    return Finding(dataset, episodes_file, episode_index, "undeclared_columns", ",".join(extra[:10]), len(extra),
                   None, f"{data_file} holds {len(extra)} column{'s' if len(extra) > 1 else ''} info.json does not "
                   f"declare ({shown}): not imported; declare {'them' if len(extra) > 1 else 'it'} in info.json "
                   "`features` to import", file=data_file)
