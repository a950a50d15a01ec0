"""What a dataset's files are right now, in one digest, so a scheduled bulk import can skip a dataset
that has not changed since its last successful import (and redo it when anything did)."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Optional

from transforms.base import storage

#: Folders whose files decide an import's output (info.json is under meta/).
SOURCE_DIRS = ("meta", "data", "videos")
#: File-listing keys that change when an object is rewritten, by filesystem: GCS generation, local
#: mtime, S3 ETag/LastModified, others' update times, the Hugging Face Hub's git object id (for a
#: git-LFS file the pointer's, which holds the content's sha256).
VERSION_KEYS = ("generation", "mtime", "ETag", "LastModified", "updated", "last_modified", "etag", "blob_id")


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """What a dataset's files are, in one digest.

    Args:
        sha256: the digest; equal digests mean the same files.
        files, bytes: how many files and bytes it covers (None for a Hub dataset, known by its commit).
        commit: the Hub commit a pinned `hf://` root reads at, else None.
    """

    sha256: str
    files: Optional[int]
    bytes: Optional[int]
    commit: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if self.commit is None:
            del out["commit"]
        return out


def _version(detail: dict) -> str:
    for key in VERSION_KEYS:
        if detail.get(key) is not None:
            return f"{key}={detail[key]}"
    return ""


def fingerprint(root: str) -> Fingerprint:
    """Digest of (path, size, version) of every file under meta/, data/ and videos/.

    A Hub root pinned at a commit is that commit: its files cannot change, so it is known without a
    listing, and an unchanged dataset costs no request at all (beyond the revision lookup that pinned it)."""
    commit = storage.hub_commit(root)
    if commit is not None:
        return Fingerprint(sha256=hashlib.sha256(f"hub commit\t{commit}".encode()).hexdigest(), files=None,
                           bytes=None, commit=commit)
    fs, base = storage.filesystem(root)
    lines, total, count = [], 0, 0
    for folder in SOURCE_DIRS:
        try:
            found = fs.find(f"{base.rstrip('/')}/{folder}", detail=True)
        except FileNotFoundError:
            continue
        for path, detail in found.items():
            size = int(detail.get("size") or 0)
            rel = path[len(base.rstrip("/")) + 1:] if path.startswith(base.rstrip("/") + "/") else path
            lines.append(f"{rel}\t{size}\t{_version(detail)}")
            total += size
            count += 1
    digest = hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()
    return Fingerprint(sha256=digest, files=count, bytes=total)


def up_to_date(manifest: Optional[dict], current: Fingerprint, options: dict) -> bool:
    """A previous import is still valid: it succeeded, with the same options, from the same files."""
    return (bool(manifest) and manifest.get("status") == "imported" and manifest.get("options") == options
            and (manifest.get("source") or {}).get("sha256") == current.sha256)
