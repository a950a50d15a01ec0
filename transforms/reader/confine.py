"""Where a reader may read: an import's output is data, and data can be edited to point anywhere.

A manifest's part paths, a clip's video URI, a media_index row's URI are all read from the output. The
reader opens an episode part or a media_index part only inside the import root, and a video file only
inside the roots it was given (the import root and the dataset root the manifest names, or those the
caller lists). A path with a `..` segment is refused outright; a local path is also resolved
(symlinks followed) and must stay inside a root (or inside the `blobs/` of a Hugging Face cache
snapshot root, where a snapshot's files really are). A Hub root (`hf://datasets/OWNER/NAME@<commit>`)
admits its repository at any commit: an episodes file left unchanged by a later import still names
its MP4 at the commit it was imported from, which reads the same bytes for as long as the repository lives.

A dataset that moved (or was copied to another bucket) after its import is read where it is now with a
`Relocation`: each clip URI under the dataset root the manifest names is read at the same relative path
under the new root, once the file there has the size the import recorded for it (the manifest's
`video_versions`); a file of another size, or missing, is a clear error, never a wrong frame.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Mapping, Optional, Sequence

from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.reader.seek import ReaderError

__all__ = ["Relocation", "confined", "part_uri", "relocation"]


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


@dataclasses.dataclass
class Relocation:
    """Clip URIs under `old_root` read under `new_root` instead, each file checked against its recorded size.

    Args:
        old_root: the dataset root the import read (its manifest's `dataset`).
        new_root: where the same files are now.
        sizes: each video file's size at import, by its path relative to the dataset root.
    """

    old_root: str
    new_root: str
    sizes: Mapping[str, int]
    _checked: set = dataclasses.field(default_factory=set, repr=False)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def relative(self, uri: str) -> Optional[str]:
        """`uri`'s path relative to the old dataset root (a Hub root: in its repository at any commit), or None."""
        old_repo = storage.hub_repo(self.old_root)
        if old_repo is not None:
            if storage.hub_repo(uri) != old_repo:
                return None
            rel, base = _hub_path(uri), _hub_path(self.old_root)
            if base:
                if not rel.startswith(base + "/"):
                    return None
                rel = rel[len(base) + 1:]
            return rel or None
        prefix = self.old_root.rstrip("/") + "/"
        return uri[len(prefix):] if uri.startswith(prefix) else None

    def uri(self, uri: str) -> str:
        """Where `uri` is read now, checked: under the new root with the recorded size (once per file).

        Raises:
            ReaderError: the file is missing at the new root, has another size, or has no recorded size.
        """
        rel = self.relative(uri)
        if rel is None:
            return uri  # not a file of the dataset: read where it is (confinement has allowed it)
        new = storage.join(self.new_root, rel)
        with self._lock:
            if new in self._checked:
                return new
        if _dot_segments(rel) or not confined(new, [self.new_root]):
            raise ReaderError(f"{new} is not inside the new dataset root {self.new_root}")
        expected = self.sizes.get(rel)
        if expected is None:
            raise ReaderError(f"the import's manifest records no size for {rel}, so its copy under {self.new_root} "
                              f"cannot be checked to be the file imported; import the dataset again from "
                              f"{self.new_root}")
        try:
            size = storage.file_size(new, what="video file", file=rel)
        except LeRobotImportError as ex:
            raise ReaderError(f"{rel} is not where the dataset moved ({new}): {ex.message}; give the root that "
                              f"holds the imported dataset's files as dataset_root") from None
        if size != expected:
            raise ReaderError(f"{new} has {size} bytes where the import read {expected} bytes at "
                              f"{storage.join(self.old_root, rel)}: the dataset at {self.new_root} is not the one "
                              f"imported; import it again from {self.new_root}")
        with self._lock:
            self._checked.add(new)
        return new

    def __reduce__(self):  # pickled into DataLoader workers: the roots and sizes, not the lock
        return Relocation, (self.old_root, self.new_root, dict(self.sizes))


def _hub_path(uri: str) -> str:
    """The path inside its repository of a Hub URI (`hf://datasets/OWNER/NAME[@REVISION][/PATH]`)."""
    rest = uri[len(storage.hub_repo(uri) or ""):]
    if rest.startswith("@"):
        rest = rest.partition("/")[2]
    return rest.strip("/")


def relocation(import_root: str, old_root: Optional[str], new_root: str, *,
               max_manifest_bytes: int = 64 << 20) -> Relocation:
    """The `Relocation` of the import at `import_root` (dataset read at `old_root`) to `new_root`, with the
    video sizes its manifest recorded.

    Raises:
        ReaderError: the import names no dataset root (an output without a manifest), or its manifest
            cannot be read.
    """
    new = storage.normalize_root(new_root)
    if not old_root:
        raise ReaderError(f"the import at {import_root} names no dataset root (no manifest.json), so its clips "
                          "cannot be read under another one")
    uri = storage.join(import_root, "manifest.json")
    try:
        doc = json.loads(storage.read_bytes(uri, what="manifest", file="manifest.json", max_bytes=max_manifest_bytes))
    except (LeRobotImportError, ValueError, RecursionError) as ex:
        raise ReaderError(f"cannot read {uri}: {getattr(ex, 'message', ex)}") from None
    versions = doc.get("video_versions") if isinstance(doc, dict) else None
    sizes = {}
    for rel, token in (versions.items() if isinstance(versions, dict) else ()):
        head = token.split(":", 1)[0] if isinstance(token, str) else ""
        if head.isdigit():
            sizes[rel] = int(head)
    return Relocation(old_root, new, sizes)
