"""The state an import keeps in its output (manifest, media_index/ shards, lease), read back without trust.

An output is data like any other: a colleague edits its manifest, a disk breaks a file, a folder is
replaced by a symlink. Whatever it holds, the import, `verify` and `plan` keep to one rule (rule
`output_confinement`):

  * every path taken from the output's state names a file inside the output, under the folder it
    belongs to (a part under `episodes/`, a shard under `media_index/`), as a clean relative path: no
    `..`, no absolute path, no URL, nothing empty;
  * on local storage, the folders and files the import manages (`episodes/`, `media_index/`, `quality/`,
    the journal `.journal/` and everything under them, `manifest.json`, `errors.jsonl`, `.lease.json` and
    its lock) are never symlinks and are regular files or folders: a link would make the import write
    through it, outside the output, and later delete it. Such an output is refused before anything is
    written or deleted.

The manifest is read bounded (`MAX_MANIFEST_BYTES`, `MAX_JSON_DEPTH`) and checked once, here, by
`read_manifest`; what it lists is what the import may later delete (`deletable_files`): the import
removes only files it can prove it wrote, never a file someone else put in its folders.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import re
import stat
from typing import Any, Callable, Iterable, Optional

from transforms.base import storage
from transforms.output import paths
from transforms.base.errors import LeRobotImportError, quote

#: A manifest larger than this is not read: one entry per episodes file is about a kilobyte.
MAX_MANIFEST_BYTES = 64 << 20
#: An import's manifest nests five levels deep; one nested deeper than this is not an import's.
MAX_JSON_DEPTH = 32
#: errors.jsonl can be long (one row per failed episode), but each row is at most a few kilobytes.
MAX_ERRORS_BYTES = 1 << 30

RULE = "output_confinement"
#: The temporary name `storage.tmp_name` gives: `.<final name>.tmp-<32 hex digits>`.
TMP_PATTERN = re.compile(r"^\.(?P<final>.+)" + re.escape(storage.TMP_MARK) + r"[0-9a-f]{32}$")
_STATE_FILES = (paths.MANIFEST, paths.ERRORS, paths.LEASE, paths.LEASE_LOCK)
_STATE_FOLDERS = (paths.EPISODES_DIR, paths.MEDIA_INDEX_DIR, paths.QUALITY_DIR, paths.JOURNAL_DIR)


def is_own_tmp(name: str) -> bool:
    """Whether a file name is one of the import's own temporaries (`storage.tmp_name`)."""
    return TMP_PATTERN.match(name) is not None


def clean_relative(path: Any) -> bool:
    """Whether `path` is a clean relative path: segments that are neither empty, `.` nor `..`, no leading
    `/`, no URL scheme, no NUL."""
    if not isinstance(path, str) or not path or len(path) > 4096 or "\x00" in path or "://" in path:
        return False
    if path.startswith(("/", "\\")):
        return False
    return all(seg not in ("", ".", "..") for seg in path.split("/"))


def _refuse(out_root: str, what: str, why: str, file: Optional[str] = None) -> LeRobotImportError:
    return LeRobotImportError(RULE, f"{what} {why}; the import writes, reads and deletes its own state only "
                              f"inside its output {out_root}, so it stops here. Restore the output from the "
                              "import that wrote it, or remove it and import again", file=file)


def confined(out_root: str, relative: Any, *, folder: Optional[str], what: str) -> str:
    """The URI of a file of the output's state, checked to lie inside the output under `folder`.

    Args:
        out_root: the output root.
        relative: the path as the output's state gives it (relative to `out_root`).
        folder: the managed folder it must lie under (`episodes`, `media_index`), None for a top-level file.
        what: what the file is, for messages ("episode part", "media_index shard").
    Raises:
        LeRobotImportError: rule `output_confinement` when the path leaves its folder, or (locally) passes
            through a symlink or names something other than a regular file.
    """
    shown = quote(relative)
    if not clean_relative(relative):
        raise _refuse(out_root, f"the manifest lists the {what} {shown}, which", "is not a clean relative path "
                      "inside the output", file=paths.MANIFEST)
    if folder is not None and not relative.startswith(folder + "/"):
        raise _refuse(out_root, f"the manifest lists the {what} {shown}, which", f"is not under {folder}/",
                      file=paths.MANIFEST)
    uri = storage.join(out_root, relative)
    fs, base = storage.filesystem(out_root)
    if storage.is_local(fs):
        _check_local_chain(out_root, os.path.realpath(base), relative, what=what)
    return uri


def _check_local_chain(out_root: str, real_base: str, relative: str, *, what: str) -> None:
    """No component of `relative` under the real output folder is a symlink; the last, when it exists, is a
    regular file."""
    path = real_base
    segments = relative.split("/")
    for i, seg in enumerate(segments):
        path = os.path.join(path, seg)
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as ex:
            raise LeRobotImportError("io", f"cannot stat {path}: {ex.strerror or ex}", file=relative) from None
        here = "/".join(segments[: i + 1])
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(out_root, f"{here} (on the way to the {what} {relative})",
                          f"is a symlink (to {os.readlink(path)})", file=here)
        last = i == len(segments) - 1
        if last and not stat.S_ISREG(st.st_mode):
            raise _refuse(out_root, f"the {what} {here}", f"is {_kind(st.st_mode)}, not a regular file", file=here)
        if not last and not stat.S_ISDIR(st.st_mode):
            return  # a file where a folder is expected: the path does not exist


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def check_output(out_root: str) -> None:
    """Refuse an output whose managed folders or files are symlinks or not regular, before a run writes.

    Checks `manifest.json`, `errors.jsonl`, `.lease.json` and its lock, and `episodes/` and `media_index/`
    with everything under them (one listing of each folder: as many entries as the output has files),
    then that the manifest lists no path outside its folders. The output root itself may be a symlink
    (the user chose where it goes); the root that exists but is not a folder, or cannot be written, is
    `output_not_writable`. Object stores have no symlinks: there only the manifest is checked.

    Raises:
        LeRobotImportError: rule `output_confinement` or `output_not_writable`, naming the path.
    """
    fs, base = storage.filesystem(out_root)
    if storage.is_local(fs):
        _check_local_output(out_root, base)
    found = read_manifest(out_root)
    if found.confinement:
        raise found.problem


def _check_local_output(out_root: str, base: str) -> None:
    real = os.path.realpath(base)
    if os.path.lexists(real) and not os.path.isdir(real):
        raise LeRobotImportError("output_not_writable", f"the output {out_root} is a file, not a folder: give "
                                 "--output a folder (it is created if missing)", file=out_root)
    probe = real
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if os.path.isdir(probe) and not os.access(probe, os.W_OK | os.X_OK):
        raise LeRobotImportError("output_not_writable", f"the output {out_root} cannot be written ({probe} is "
                                 "read-only for this user): give --output a folder this run may write, or "
                                 "fix its permissions", file=out_root)
    for name in _STATE_FILES:
        st = _lstat(os.path.join(real, name))
        if st is None:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(out_root, name, f"is a symlink (to {os.readlink(os.path.join(real, name))})", file=name)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(out_root, name, f"is {_kind(st.st_mode)}, not a regular file", file=name)
    for folder in _STATE_FOLDERS:
        _check_tree(out_root, real, folder)


def _lstat(path: str) -> Optional[os.stat_result]:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _check_tree(out_root: str, real: str, folder: str) -> None:
    st = _lstat(os.path.join(real, folder))
    if st is None:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(out_root, folder, f"is a symlink (to {os.readlink(os.path.join(real, folder))})",
                      file=folder)
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(out_root, folder, f"is {_kind(st.st_mode)}, not a folder", file=folder)
    stack = [folder]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(real, rel)) as entries:
            for entry in entries:
                child = f"{rel}/{entry.name}"
                if entry.is_symlink():
                    raise _refuse(out_root, child, f"is a symlink (to {os.readlink(entry.path)})", file=child)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(child)
                elif not entry.is_file(follow_symlinks=False):
                    mode = entry.stat(follow_symlinks=False).st_mode
                    raise _refuse(out_root, child, f"is {_kind(mode)}, not a regular file", file=child)


# ---- the manifest --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ManifestRead:
    """An output's manifest as read: `doc` when there is a sound one, else None and, when a file was
    found but is not a sound manifest, the `problem` (rule `manifest`, `limit`, `not_a_file`, `io` or
    `output_confinement`)."""

    doc: Optional[dict]
    problem: Optional[LeRobotImportError] = None

    @property
    def confinement(self) -> bool:
        """The manifest names paths outside its folders (or is a link): it is refused, not just ignored."""
        return self.problem is not None and self.problem.rule == RULE


def read_manifest(out_root: str, *, listings: bool = True) -> ManifestRead:
    """The output's manifest.json, read bounded and checked (`check_manifest`); never raises.

    `listings=False`: without each episodes file's source listings (`SOURCE_LISTINGS`, a path per episode of
    a v2.x group: 900,000 paths, 50 MB of the 57 MB manifest of a 300,000-episode import), for a reader that
    only sums the manifest up (the run's summary): the file is read a piece at a time and parsed an entry at
    a time (`_ManifestStream`), so what is held at once is a piece of its text and one entry, not the file."""
    if not listings:
        return _read_manifest_streamed(out_root)
    uri = storage.join(out_root, paths.MANIFEST)
    try:
        raw = storage.read_state_file(uri, what="manifest", file=paths.MANIFEST, max_bytes=MAX_MANIFEST_BYTES)
    except LeRobotImportError as ex:
        return ManifestRead(None, ex)
    if raw is None:
        return ManifestRead(None)
    try:
        text = _manifest_text(raw, out_root)
        del raw  # the bytes go before the parse: a large manifest is held as text and objects, not as bytes too
        return ManifestRead(parse_manifest(text, out_root))
    except LeRobotImportError as ex:
        return ManifestRead(None, ex)


#: The keys of an episodes file's manifest entry that list its source files, one path per data file and MP4
#: (`read_manifest(listings=False)` leaves them out).
SOURCE_LISTINGS = frozenset(("source_data_files", "source_video_files"))


def _bad_manifest(out_root: str, why: str) -> LeRobotImportError:
    return LeRobotImportError("manifest", f"{paths.MANIFEST} of {out_root} {why}: it was truncated or "
                              "overwritten; restore it, or remove it and the next import redoes the output "
                              "whole", file=paths.MANIFEST)


def _manifest_text(raw: bytes, out_root: str) -> str:
    """The manifest's bytes as text, decoded as `json.loads` decodes bytes (UTF-8, -16 or -32, a BOM dropped)."""
    try:
        return raw.decode(json.detect_encoding(raw), "surrogatepass")
    except UnicodeDecodeError as ex:
        raise _bad_manifest(out_root, f"is not JSON ({str(ex)[:200]})") from None


def parse_manifest(raw: bytes | str, out_root: str) -> dict:
    """A manifest's bytes (or text) -> its document, checked (`checked_manifest`).

    Raises:
        LeRobotImportError: rule `manifest` (not a manifest) or `output_confinement` (a path outside).
    """
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise _bad_manifest(out_root, "is nested too deeply to read") from None
    except (UnicodeDecodeError, ValueError) as ex:
        raise _bad_manifest(out_root, f"is not JSON ({str(ex)[:200]})") from None
    return checked_manifest(doc, out_root)


def checked_manifest(doc: Any, out_root: str) -> dict:
    """A parsed manifest, checked: an object with `episodes_files`, nested at most `MAX_JSON_DEPTH` deep, every
    path it lists confined to its folder (lexically: `confined` checks links).

    Raises:
        LeRobotImportError: rule `manifest` (not a manifest) or `output_confinement` (a path outside).
    """
    if _depth_over(doc, MAX_JSON_DEPTH):
        raise _bad_manifest(out_root, f"nests deeper than {MAX_JSON_DEPTH} levels, which no import writes")
    if not isinstance(doc, dict) or not isinstance(doc.get("episodes_files"), dict):
        raise _bad_manifest(out_root, "is not an import's manifest (no `episodes_files` object)")
    check_manifest(doc, out_root)
    return doc


def _read_manifest_streamed(out_root: str) -> ManifestRead:
    """`read_manifest(listings=False)`: the same checks (a regular file, never through a link, at most
    `MAX_MANIFEST_BYTES`, JSON, `checked_manifest`), the file parsed as it is read."""
    try:
        f = storage.open_state_file(storage.join(out_root, paths.MANIFEST), what="manifest", file=paths.MANIFEST)
    except LeRobotImportError as ex:
        return ManifestRead(None, ex)
    if f is None:
        return ManifestRead(None)
    try:
        with f:
            doc = _ManifestStream(f).document()
        return ManifestRead(checked_manifest(doc, out_root))
    except _TooLarge:
        return ManifestRead(None, LeRobotImportError(
            "limit", f"manifest {paths.MANIFEST} is more than {MAX_MANIFEST_BYTES:,} bytes; at most "
            f"{MAX_MANIFEST_BYTES:,} bytes of a manifest are read: is it the right file?", file=paths.MANIFEST))
    except RecursionError:
        return ManifestRead(None, _bad_manifest(out_root, "is nested too deeply to read"))
    except (UnicodeDecodeError, ValueError) as ex:
        return ManifestRead(None, _bad_manifest(out_root, f"is not JSON ({str(ex)[:200]})"))
    except LeRobotImportError as ex:
        return ManifestRead(None, ex)
    except OSError as ex:
        return ManifestRead(None, LeRobotImportError("io", f"cannot read manifest {paths.MANIFEST}: "
                                                     f"{ex.strerror or ex}", file=paths.MANIFEST))


class _TooLarge(Exception):
    pass


def _without_listings(pairs: list) -> dict:
    return {k: v for k, v in pairs if k not in SOURCE_LISTINGS}


class _ManifestStream:
    """A manifest parsed as its text is read (`MANIFEST_PIECE` bytes at a time): its top-level object key by key
    and `episodes_files` entry by entry, each value by Python's own JSON parser (`raw_decode`) and without the
    keys `SOURCE_LISTINGS` (dropped as each object is built). What json.loads accepts it accepts, and what
    json.loads refuses it refuses (ValueError), a value that runs past the text read so far being parsed again
    once more is read (the read doubles then, so a large value costs no more than twice its parse)."""

    _SPACE = re.compile(r"[ \t\n\r]*")

    def __init__(self, f) -> None:
        self._f = f
        self._decoder = None
        self._json = json.JSONDecoder(object_pairs_hook=_without_listings)
        self._text, self._at, self._read, self._eof = "", 0, 0, False

    def _more(self) -> bool:
        """Read on (at least as much again as is held); False at the end of the file."""
        if self._eof:
            return False
        raw = self._f.read(max(MANIFEST_PIECE, len(self._text) - self._at))
        self._read += len(raw)
        if self._read > MAX_MANIFEST_BYTES:
            raise _TooLarge()
        if self._decoder is None:
            if raw and len(raw) < 4:  # the encoding is told by the first four bytes
                raw += self._f.read(4 - len(raw))
            self._decoder = codecs.getincrementaldecoder(json.detect_encoding(raw))("surrogatepass")
        self._eof = not raw
        self._text = self._text[self._at:] + self._decoder.decode(raw, final=self._eof)
        self._at = 0
        return not self._eof

    def _peek(self) -> str:
        """The next character that is not white space ("" at the end), not consumed."""
        while True:
            self._at = self._SPACE.match(self._text, self._at).end()
            if self._at < len(self._text) or not self._more():
                return self._text[self._at:self._at + 1]

    def _expect(self, chars: str) -> str:
        found = self._peek()
        if not found or found not in chars:
            raise ValueError(f"Expecting {' or '.join(repr(c) for c in chars)} at byte {self._read} or before")
        self._at += 1
        return found

    def _value(self) -> Any:
        """The next JSON value; it ends before the text read so far does, or at the end of the file (a number
        cut by a read is not taken for a shorter one)."""
        self._peek()
        while True:
            try:
                value, end = self._json.raw_decode(self._text, self._at)
                if end < len(self._text) or self._eof:
                    self._at = end
                    return value
            except json.JSONDecodeError:
                if self._eof:
                    raise
            self._more()

    def _key(self) -> str:
        if self._peek() != '"':
            raise ValueError(f"Expecting property name enclosed in double quotes at byte {self._read} or before")
        return self._value()

    def document(self) -> Any:
        if self._peek() != "{":
            doc = self._value()
        else:  # the top level key by key, `episodes_files` entry by entry
            doc = self._object(lambda key: self._object(lambda _: self._value())
                               if key == "episodes_files" and self._peek() == "{" else self._value())
        if self._peek():
            raise ValueError(f"Extra data after the manifest's object, at byte {self._read} or before")
        return doc

    def _object(self, value: Callable[[str], Any]) -> dict:
        """The object whose `{` is next, each member's value read by `value(key)`."""
        self._at += 1
        members: dict = {}
        if self._peek() == "}":
            self._at += 1
            return members
        while True:
            key = self._key()
            self._expect(":")
            members[key] = value(key)
            if self._expect(",}") == "}":
                return members


#: The manifest is read this many bytes at a time when it is read piece by piece (`_ManifestStream`).
MANIFEST_PIECE = 1 << 20


def _depth_over(doc: Any, limit: int) -> bool:
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


def check_manifest(doc: dict, out_root: str) -> None:
    """Every path the manifest lists, checked lexically to lie in its folder (rule `output_confinement`):
    episodes-file keys (they name output paths under `episodes/`), parts and part records, media_index
    shards and their records, MP4 paths (their shards' names derive from them)."""
    def refuse(what: str, value: Any, why: str) -> LeRobotImportError:
        return _refuse(out_root, f"the manifest lists the {what} {quote(value)}, which", why, file=paths.MANIFEST)

    for key, entry in doc["episodes_files"].items():
        if not clean_relative(key):
            raise refuse("episodes file", key, "is not a clean relative path (the output of an episodes file lies "
                         "under episodes/)")
        if not isinstance(entry, dict):
            continue
        for part in _paths_of(entry, "parts", "part_files"):
            _check_in(refuse, "episode part", part, paths.EPISODES_DIR)
        table = entry.get("quality", {}).get("table") if isinstance(entry.get("quality"), dict) else None
        if table:
            _check_in(refuse, "quality table", table, paths.QUALITY_DIR)
    for shard in _paths_of(doc, "media_index", "media_index_files"):
        _check_in(refuse, "media_index shard", shard, paths.MEDIA_INDEX_DIR)
    versions = doc.get("video_versions")
    if isinstance(versions, dict):
        for mp4 in versions:
            if not clean_relative(mp4):
                raise refuse("video file", mp4, "is not a clean relative path of the dataset")


def _paths_of(doc: dict, listed: str, records: str) -> Iterable[Any]:
    """The paths under `doc[listed]` (a list of paths) and `doc[records]` (a list of {path: ...})."""
    found = doc.get(listed)
    if isinstance(found, list):
        yield from found
    found = doc.get(records)
    if isinstance(found, list):
        yield from (r.get("path") for r in found if isinstance(r, dict))


def _check_in(refuse, what: str, path: Any, folder: str) -> None:
    if not clean_relative(path):
        raise refuse(what, path, "is not a clean relative path inside the output")
    if not path.startswith(folder + "/"):
        raise refuse(what, path, f"is not under {folder}/")


def listed_files(doc: Optional[dict]) -> frozenset[str]:
    """Every file (relative to the output root) a sound manifest lists: parts, shards, older-layout parts."""
    if not doc:
        return frozenset()
    found = set()
    for entry in (doc.get("episodes_files") or {}).values():
        if isinstance(entry, dict):
            found.update(p for p in _paths_of(entry, "parts", "part_files") if isinstance(p, str))
    found.update(p for p in _paths_of(doc, "media_index", "media_index_files") if isinstance(p, str))
    return frozenset(found)
