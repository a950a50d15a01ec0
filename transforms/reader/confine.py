"""Where a reader may read: an import's output is data, and data can be edited to point anywhere.

A manifest's part paths, a clip's video URI, a media_index row's URI are all read from the output. The
reader opens an episode part or a media_index part only inside the import root, and a video file only
inside the roots it was given (the import root and the dataset root the manifest names, or those the
caller lists). A path with a `..` segment is refused outright; a local path is also resolved
(symlinks followed) and must stay inside a root (or inside the `blobs/` of a Hugging Face cache
snapshot root, where a snapshot's files really are). A Hub root (`hf://datasets/OWNER/NAME@<commit>`)
admits its repository at any commit: an episodes file left unchanged by a later import still names
its MP4 at the commit it was imported from, which reads the same bytes for as long as the repository lives.
"""

from __future__ import annotations

from typing import Sequence

from transforms import storage
from transforms.errors import LeRobotImportError
from transforms.reader.seek import ReaderError

__all__ = ["confined", "part_uri"]


def _dot_segments(path: str) -> bool:
    return any(seg == ".." for seg in path.replace("\\", "/").split("/"))


def _resolved(uri: str) -> str:
    try:
        return storage.resolved(uri)
    except (LeRobotImportError, ValueError, OSError) as ex:
        raise ReaderError(f"cannot read {uri}: {getattr(ex, 'message', ex)}") from None


def confined(uri: str, roots: Sequence[str]) -> bool:
    """Whether `uri` has no `..` segment and lies inside one of `roots` (symlinks resolved locally)."""
    if _dot_segments(uri):
        return False
    target = _resolved(uri)
    for root in roots:
        real_root = _resolved(root)
        if storage.within(target, real_root):
            return True
        repo = storage.hub_repo(real_root)
        if repo is not None and storage.hub_repo(target) == repo:
            return True
        if real_root.startswith("file://"):
            blobs = storage.hf_cache_blobs(real_root[len("file://"):])
            if blobs and storage.within(target, "file://" + blobs):
                return True
    return False


def part_uri(root: str, relative: object, what: str) -> str:
    """The URI of a file the manifest lists relative to the import root, checked to stay inside it.

    Args:
        root: the import root.
        relative: the path as the manifest gives it.
        what: what the file is, for messages ("episode part", "media_index part").
    Returns:
        `root/relative`.
    Raises:
        ReaderError: the path is not a relative path inside the root.
    """
    if not isinstance(relative, str) or not relative:
        raise ReaderError(f"manifest.json of {root} lists a {what} that is not a path: {relative!r:.200}")
    uri = storage.join(root, relative)
    if relative.startswith(("/", "\\")) or "://" in relative or "::" in relative or not confined(uri, [root]):
        raise ReaderError(f"manifest.json of {root} lists the {what} {relative!r:.200}, which is not inside the "
                          "import root: an import only lists its own files, so the manifest was edited; the "
                          "reader never reads outside the import")
    return uri
