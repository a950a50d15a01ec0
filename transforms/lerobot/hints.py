"""Where a missing dataset file really is: the next step a `file_missing` error can name.

Published datasets often hold their files under a folder with another name than the path template
says (`video/` where `video_path` says `videos/`, a camera folder renamed). When a file is missing,
its name is looked for under the siblings of each folder on its path, one folder at a time.
"""

from __future__ import annotations

from typing import Optional

from transforms import storage

#: At most this many sibling folders are tried per level (each costs a request on remote storage).
MAX_SIBLINGS = 32


def misplaced_file(root: str, relative: str, listings: Optional[dict] = None) -> Optional[str]:
    """The path (relative to `root`) where a missing file's name exists when one folder on its templated
    path is replaced by a sibling folder, or None.

    Args:
        root: the dataset root URI.
        relative: the file the template names, relative to the root (e.g. `videos/cam/chunk-000/file-000.mp4`).
        listings: folder URI -> its sub-folders, kept by the caller to list each folder once over many
            missing files (a dataset whose MP4s are all misplaced).
    """
    listings = {} if listings is None else listings
    parts = relative.split("/")
    for depth in range(len(parts) - 1):
        parent = storage.join(root, "/".join(parts[:depth])) if depth else root
        if parent not in listings:
            listings[parent] = tuple(storage.list_dir(parent, dirs=True))
        siblings = [s for s in listings[parent] if s != parts[depth]]
        for sibling in siblings[:MAX_SIBLINGS]:
            candidate = "/".join(parts[:depth] + [sibling] + parts[depth + 1:])
            try:
                if storage.exists(storage.join(root, candidate)):
                    return candidate
            except OSError:
                continue
    return None


def misplaced_hint(root: str, relative: str, listings: Optional[dict] = None) -> str:
    """A clause naming where a missing file is (to append to its `file_missing` message), or ""."""
    found = misplaced_file(root, relative, listings)
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
