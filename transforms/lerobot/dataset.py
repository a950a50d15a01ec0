"""Is this folder a LeRobot v3 dataset? The checks a person makes, in the order they make them.

    the root exists and is a folder -> it holds meta/info.json -> info.json parses -> its codebase
    version is v3.0 -> it lists its episodes in meta/episodes/<chunk>/<file>.parquet (v2.0 / v2.1:
    in meta/episodes.jsonl, planned in groups of a chunk's episodes, `transforms.lerobot.v2`)

Each check that fails says what was found instead and the next step: the sub-folders that are
datasets when the root is a repository holding one, the dataset a `meta/` folder belongs to, LeRobot's
converter for a v2.x dataset. Pure: no Beam; every read goes through `storage` (regular files only,
git-LFS pointers recognised, sizes bounded).
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import Optional

from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import v2
from transforms.lerobot.info import (CONVERTER, INFO_JSON_MAX_BYTES, INFO_PATH, META_EPISODES_DIR, DatasetInfo,
                                    parse_info)

#: Sub-folders looked into (per level, two levels deep) for datasets when the root is not one.
MAX_SUBFOLDERS = 50
#: Datasets named in the message when the root holds several.
MAX_NAMED = 5
#: A Hugging Face hub cache folder of a dataset repository: `datasets--<org>--<name>`.
_HF_REPO_FOLDER = re.compile(r"^datasets--(?P<org>[^/]+?)--(?P<name>[^/]+)$")


@dataclasses.dataclass(frozen=True)
class CheckedDataset:
    """A dataset root that passed every dataset-level check.

    root: the root as a normalised URI (`file:///abs/path`, `gs://bucket/path`, ...).
    info: its info.json model (without the video features when the import skips videos).
    episodes_files: its episodes files, relative to the root, sorted by path.
    """

    root: str
    info: DatasetInfo
    episodes_files: tuple[str, ...]


def check_dataset(root: str, *, skip_videos: bool = False) -> CheckedDataset:
    """Check that `root` is a LeRobot v3 dataset the import can read, in the order a person would.

    Args:
        root: a local path or fsspec URL.
        skip_videos: drop the video features from the returned info (`--skip-videos`).
    Returns:
        The CheckedDataset. Raises LeRobotImportError with rule `url`, `dataset_root`, `info_json`,
        `lfs_pointer`, `not_a_file`, `limit`, `codebase_version` (or another info.json rule) or
        `episodes_file`, the first check that fails."""
    uri = check_root(root)
    info = read_info(uri, skip_videos=skip_videos)
    files = v2_groups(uri, info) if info.is_v2 else list_episodes_files(uri)
    if not files:
        raise _no_episodes_files(uri)
    return CheckedDataset(uri, info, files)


def v2_groups(root: str, info: DatasetInfo) -> tuple[str, ...]:
    """The groups of a v2.x dataset's episodes (`meta/episodes.jsonl:chunk-NNN`, planned as episodes files
    are), once its layout is v2.x: rule `codebase_version` when meta/episodes.jsonl is missing."""
    try:
        episodes = v2.load_episodes(root)
    except LeRobotImportError as ex:
        if ex.rule != "file_missing":
            raise
        names = {v2.EPISODES_JSONL: False, META_EPISODES_DIR: storage.is_dir(storage.join(root, META_EPISODES_DIR))}
        raise LeRobotImportError("codebase_version", f"the dataset is not laid out as LeRobot {info.codebase_version}: "
                                 f"{v2.layout_problem(root, names)}", file=v2.EPISODES_JSONL) from None
    if not len(episodes):
        raise LeRobotImportError("episodes_file", f"{v2.EPISODES_JSONL} lists no episodes", file=v2.EPISODES_JSONL)
    return tuple(episodes.groups(info.chunks_size))


def check_root(root: str) -> str:
    """The root as a normalised URI, if it exists and is a folder."""
    uri = storage.normalize_root(root)
    fs, path = storage.filesystem(uri)
    try:
        is_dir = storage.with_retries(lambda: fs.isdir(path))
        exists = is_dir or storage.with_retries(lambda: fs.exists(path))
    except OSError as ex:
        raise LeRobotImportError("io", f"cannot look at the dataset root {uri}: {ex}") from None
    if not exists:
        raise LeRobotImportError("dataset_root", f"the dataset root {uri} does not exist{_nearest_parent(uri)}")
    if not is_dir:
        hint = ""
        if uri.endswith("/" + INFO_PATH):
            hint = f": give the dataset's folder, {uri[:-len(INFO_PATH) - 1]}"
        raise LeRobotImportError("dataset_root", f"the dataset root {uri} is a file, not a folder{hint}")
    return uri


def check_is_dataset(root: str) -> str:
    """The root as a normalised URI if it exists, is a folder and holds meta/info.json (not read here);
    raises LeRobotImportError rule `dataset_root` or `info_json` (saying where datasets are) otherwise."""
    uri = check_root(root)
    if not storage.exists(storage.dataset_file(uri, INFO_PATH)):
        raise _not_a_dataset(uri)
    return uri


def read_info(root: str, *, repo_id: Optional[str] = None, skip_videos: bool = False) -> DatasetInfo:
    """meta/info.json of the dataset at `root` (a normalised URI), read (at most INFO_JSON_MAX_BYTES) and
    parsed (`skip_videos`: without its video features, `video_path` unread). A missing info.json says the
    folder is not a LeRobot dataset and where datasets are."""
    try:
        raw = storage.read_bytes(storage.dataset_file(root, INFO_PATH), what="info file", file=INFO_PATH,
                                 max_bytes=INFO_JSON_MAX_BYTES)
    except LeRobotImportError as ex:
        if ex.rule != "file_missing":
            raise
        raise _not_a_dataset(root) from None
    return parse_info(raw, repo_id=repo_id or hf_repo_id(root), skip_videos=skip_videos)


def list_episodes_files(root: str) -> tuple[str, ...]:
    """`meta/episodes/<chunk>/<file>.parquet` relative to the root, sorted by path. The folders are
    listed rather than globbed: the names are the dataset's and may hold `*`, `?` or `[`; a chunk
    folder that is a symlink is followed (a link leaving the root fails when its files are read)."""
    base = storage.join(root, META_EPISODES_DIR)
    return tuple(sorted(f"{META_EPISODES_DIR}/{chunk}/{name}" for chunk in storage.list_dir(base, dirs=True)
                        for name in storage.list_dir(storage.join(base, chunk)) if name.endswith(".parquet")))


def hf_repo_id(root: str) -> Optional[str]:
    """`org/name` when `root` lies in a Hugging Face hub cache (`.../datasets--org--name/snapshots/REV`),
    for LeRobot commands that take `--repo-id`; None elsewhere."""
    parts = root.rstrip("/").split("/")
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots":
            match = _HF_REPO_FOLDER.match(parts[i - 1])
            return f"{match['org']}/{match['name']}" if match else None
    return None


def _not_a_dataset(root: str) -> LeRobotImportError:
    message = f"not a LeRobot dataset: {INFO_PATH} does not exist under {root}"
    inside = _enclosing_dataset(root)
    found = _datasets_below(root)
    if inside:
        message += f"; {root} is a folder inside the dataset {inside}: import that one (--dataset {_shown(inside)})"
    elif found:
        named = ", ".join(f"{f}/" for f in found[:MAX_NAMED]) + (" and more" if len(found) > MAX_NAMED else "")
        message += (f"; these sub-folders are LeRobot datasets: {named}. Import one (--dataset "
                    f"{_shown(storage.join(root, found[0]))}) or several (--datasets "
                    f"{','.join(_shown(storage.join(root, f)) for f in found[:2])}{',...' if len(found) > 2 else ''})")
    else:
        message += "; a LeRobot dataset's root holds meta/info.json, meta/episodes/, data/ and usually videos/"
    return LeRobotImportError("info_json", message, file=INFO_PATH)


def _datasets_below(root: str) -> list[str]:
    """Sub-folders (one or two levels down, bounded) that hold meta/info.json, relative to `root`."""
    found = []
    try:
        children = storage.list_dir(root, dirs=True)[:MAX_SUBFOLDERS]
        for child in children:
            if _has_info(storage.join(root, child)):
                found.append(child)
        for child in children[:MAX_NAMED * 2]:
            if child in found or child in ("meta", "data", "videos"):
                continue
            for grandchild in storage.list_dir(storage.join(root, child), dirs=True)[:MAX_SUBFOLDERS]:
                if _has_info(storage.join(root, f"{child}/{grandchild}")):
                    found.append(f"{child}/{grandchild}")
    except (OSError, LeRobotImportError):
        pass  # a hint only: the error stands without it
    return sorted(found)


def _enclosing_dataset(root: str) -> Optional[str]:
    """The dataset `root` lies inside (root = DATASET/meta, DATASET/data/chunk-000, ...), or None."""
    parent = root
    for _ in range(3):
        parent = _parent(parent)
        if parent is None:
            return None
        try:
            if _has_info(parent):
                return parent
        except (OSError, LeRobotImportError):
            return None
    return None


def _shown(uri: str) -> str:
    """A root as a user would type it on the command line: local roots as paths."""
    return uri[len("file://"):] if uri.startswith("file://") else uri


def _has_info(folder: str) -> bool:
    return storage.exists(storage.join(folder, INFO_PATH))


def _parent(uri: str) -> Optional[str]:
    """The folder holding `uri`, or None at the top of its filesystem (or bucket)."""
    scheme, sep, path = uri.rstrip("/").rpartition("://")
    head = posixpath.dirname(path)
    if not head or head == path or head == "/":
        return None
    return f"{scheme}{sep}{head}"


def _nearest_parent(uri: str) -> str:
    """`; the nearest folder that exists is P` for the deepest existing ancestor (a typo is usually in the
    last name), with the folders it holds."""
    parent = uri
    for _ in range(8):
        parent = _parent(parent)
        if parent is None:
            return ""
        try:
            if storage.is_dir(parent):
                names = storage.list_dir(parent, dirs=True)[:8]
                listed = f" (its folders: {', '.join(names)})" if names else ""
                return f"; the nearest folder that exists is {parent}{listed}"
        except (OSError, LeRobotImportError):
            return ""
    return ""


def _no_episodes_files(root: str) -> LeRobotImportError:
    """Why a dataset with a v3.0 info.json lists no episodes files, as far as its files say."""
    where = f"{META_EPISODES_DIR}/<chunk>/<file>.parquet"
    if storage.exists(storage.join(root, "meta/episodes.jsonl")):
        message = (f"the dataset has no episodes files ({where}) but has meta/episodes.jsonl, the v2.x layout, "
                   "although its info.json says v3.0: if its files are v2.1, set codebase_version to \"v2.1\" "
                   "(with v2.x's data_path and video_path) to import it as it is, or convert it with LeRobot's "
                   f"converter, `{CONVERTER.format(repo_id=hf_repo_id(root) or '<repo id>')}`")
    else:
        loose = [n for n in storage.list_dir(storage.join(root, META_EPISODES_DIR)) if n.endswith(".parquet")]
        message = f"the dataset has no episodes files: its episodes are listed in {where}"
        if loose:
            message += (f"; {META_EPISODES_DIR}/{loose[0]} lies directly in {META_EPISODES_DIR}/, where no episodes "
                        f"file is read: move it into a chunk folder ({META_EPISODES_DIR}/chunk-000/)")
        else:
            message += " (LeRobot writes meta/episodes/chunk-000/file-000.parquet first)"
    return LeRobotImportError("episodes_file", message, file=META_EPISODES_DIR)
