"""Where a missing dataset file really is: the next step a `file_missing` error can name.

Published datasets often hold their files under a folder with another name than the path template
says (`video/` where `video_path` says `videos/`, a camera folder renamed). When a file is missing,
its name is looked for under the siblings of each folder on its path, one folder at a time. A sibling
that is another camera's folder, or another chunk folder, is never one: every camera has a
`chunk-000/file-000.mp4` and every chunk a `file-000.mp4`, so a file of the same name there is another
file, and renaming a folder after it would break the camera or chunk that owns it.
"""

from __future__ import annotations

import re
from typing import Collection, Optional

from transforms.base import storage

#: At most this many sibling folders are tried per level (each costs a request on remote storage).
MAX_SIBLINGS = 32


_CHUNK = re.compile(r"chunk-\d+")


def misplaced_file(root: str, relative: str, listings: Optional[dict] = None, *,
                   other_cameras: Collection[str] = ()) -> Optional[str]:
    """The path (relative to `root`) where a missing file's name exists when one folder on its templated
    path is replaced by a sibling folder of the same role, or None.

    Args:
        root: the dataset root URI.
        relative: the file the template names, relative to the root (e.g. `videos/cam/chunk-000/file-000.mp4`).
        listings: folder URI -> its sub-folders, kept by the caller to list each folder once over many
            missing files (a dataset whose MP4s are all misplaced).
        other_cameras: the dataset's other camera keys: their folders hold other cameras' files.
    """
    listings = {} if listings is None else listings
    parts = relative.split("/")
    for depth in range(len(parts) - 1):
        parent = storage.join(root, "/".join(parts[:depth])) if depth else root
        if parent not in listings:
            listings[parent] = tuple(storage.list_dir(parent, dirs=True))
        siblings = [s for s in listings[parent] if s != parts[depth] and not _other_owner(parts[depth], s,
                                                                                          other_cameras)]
        for sibling in siblings[:MAX_SIBLINGS]:
            candidate = "/".join(parts[:depth] + [sibling] + parts[depth + 1:])
            try:
                if storage.exists(storage.join(root, candidate)):
                    return candidate
            except OSError:
                continue
    return None


def _other_owner(want: str, sibling: str, other_cameras: Collection[str]) -> bool:
    """Whether `sibling` is a folder whose files belong to another camera or another chunk than `want`'s."""
    return sibling in other_cameras or bool(_CHUNK.fullmatch(want) and _CHUNK.fullmatch(sibling))


def misplaced_hint(root: str, relative: str, listings: Optional[dict] = None, *,
                   other_cameras: Collection[str] = ()) -> str:
    """A clause naming where a missing file is (to append to its `file_missing` message), or ""."""
    found = misplaced_file(root, relative, listings, other_cameras=other_cameras)
    if found is None:
        return ""
    want, have = _first_difference(relative, found)
    return (f"; a file of that name is at {found}: the dataset's folder is `{have}/` where the path template "
            f"says `{want}/` (rename the folder, or fix the template in meta/info.json)")


def _first_difference(a: str, b: str) -> tuple[str, str]:
    for x, y in zip(a.split("/"), b.split("/")):
        if x != y:
            return x, y
    return a, b
