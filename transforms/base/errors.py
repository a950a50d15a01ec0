"""The importer's one exception family.

Every failure names the rule it broke (a short stable id, listed in `RULES`), the file it was found
in and, where there is one, the episode. The pipeline adds the dataset and the episodes file as the
error travels up (`with_context`), and writes each failure as one row of `errors.jsonl`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
import threading
import time
from typing import Any, Callable, Optional, Sequence

#: A message longer than this is cut (with the number of characters left out): values quoted from a
#: hostile dataset (a megabyte-long template, a 5,000-digit number) must not make megabyte-long records.
MAX_MESSAGE_CHARS = 4000
#: A `file` longer than this cannot be a real path (PATH_MAX is 4096 on Linux) and is cut the same way.
MAX_FILE_CHARS = 4096
#: A value quoted inside a message (`quote`) keeps at most this many characters.
MAX_QUOTED_CHARS = 200


def shorten(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and how many more there were. Idempotent: a text it
    already cut (at most `limit` + the note) is returned as it is."""
    if len(text) <= limit + 64:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def quote(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """`repr(value)` for a message, cut to `limit` characters: dataset values can be arbitrarily long."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 640:
        return f"a {value.bit_length()}-bit integer"  # repr would print (or refuse) thousands of digits
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}… ({len(value) - limit} more characters)"
    try:
        text = repr(value)
    except ValueError:  # e.g. a list holding an integer of more than 4,300 digits
        return f"a {type(value).__name__} too large to print"
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


# ---- secrets ---------------------------------------------------------------------------------
#
# Nothing the importer writes (a message, errors.jsonl, the manifest, a log line) may hold a credential,
# whatever a library or a server put in the text it hands over (an error quoting the request's
# `Authorization` header). `redact` is the one place that removes them: the token configured for the
# Hub, and anything shaped like a credential.

#: Environment variables whose values are credentials.
SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_SECRET_SHAPES = (
    re.compile(r"(?i)\b((?:proxy-)?authorization|x-amz-security-token|x-goog-api-key)(['\"]?\s*[:=]\s*['\"]?)"
               r"(?:(?:bearer|basic|token)\s+)?[^\s'\",;}]+"),
    re.compile(r"\b(Bearer)(\s+)[A-Za-z0-9._~+/=-]{8,}"),
)
#: The words without which no `_SECRET_SHAPES` pattern matches (lower case; `Bearer` is matched as written).
_SHAPE_WORDS = ("authorization", "x-amz-security-token", "x-goog-api-key")
_TOKEN_CACHE: dict[str, Any] = {"at": -1.0, "token": None}
_TOKEN_LOCK = threading.Lock()


def _hub_login_token() -> Optional[str]:
    """The token huggingface_hub would send (its login cache too), when it is loaded; asked at most once
    a second (it reads a file)."""
    if "huggingface_hub" not in sys.modules:
        return None
    now = time.monotonic()
    with _TOKEN_LOCK:
        if now - _TOKEN_CACHE["at"] > 1.0:
            try:
                _TOKEN_CACHE["token"] = sys.modules["huggingface_hub"].get_token()
            except Exception:  # noqa: BLE001 - no token to hide then
                _TOKEN_CACHE["token"] = None
            _TOKEN_CACHE["at"] = now
        return _TOKEN_CACHE["token"]


def redact(text: str, *, shapes: bool = True) -> str:
    """`text` without credentials: the configured tokens replaced by `***`, and, with `shapes`, anything
    shaped like one (an `Authorization:` header's value, `Bearer ...`). Data that holds paths (the
    manifest) is redacted without `shapes`: a file may be named like anything."""
    return _redact(text, _secrets(), shapes)


def redactor(*, shapes: bool = True) -> Callable[[str], str]:
    """`redact` with the secrets of this moment asked once: for many texts written in one go (the rows of
    errors.jsonl), each of which would otherwise read the environment again."""
    secrets = _secrets()
    return lambda text: _redact(text, secrets, shapes)


def _secrets() -> list[Optional[str]]:
    return [os.environ.get(name) for name in SECRET_ENV] + [_hub_login_token()]


def _redact(text: str, secrets: Sequence[Optional[str]], shapes: bool) -> str:
    if not isinstance(text, str) or not text:
        return text
    for secret in secrets:
        if secret and len(secret) >= 8 and secret in text:
            text = text.replace(secret, "***")
    if not shapes:
        return text
    if text.isascii() and "Bearer" not in text:
        # no shape can match without one of its words (an ASCII text has no other spelling of them): the
        # patterns are not run over every row of a large errors.jsonl for nothing
        low = text.lower()
        if not any(word in low for word in _SHAPE_WORDS):
            return text
    for shape in _SECRET_SHAPES:
        text = shape.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)
    return text


def _redacting_factory(make):
    def factory(*args, **kwargs):
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log call: leave it to logging's own report
            return record
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return record
    factory.redacts = True  # type: ignore[attr-defined]
    return factory


def install_log_redaction() -> None:
    """Make every log record of this process pass through `redact` (idempotent): log lines are written
    by handlers the importer does not own (Beam's, Dataflow's), so the record itself is cleaned."""
    current = logging.getLogRecordFactory()
    if not getattr(current, "redacts", False):
        logging.setLogRecordFactory(_redacting_factory(current))


install_log_redaction()


#: rule id -> what it means; the id is what errors.jsonl's `rule` holds.
RULES: dict[str, str] = {
    "info_json": "meta/info.json is missing or is not a JSON object",
    "codebase_version": "codebase_version must be v2.0, v2.1 or v3.0, and the dataset laid out as that version is",
    "missing_data_path": "info.json has no data_path",
    "missing_video_path": "info.json declares video features but no video_path",
    "path_template": "a path template is malformed or leaves the dataset root",
    "path_outside_root": "a dataset file resolves (through a symlink) outside the dataset root",
    "unknown_dtype": "a feature has a dtype the mapping does not know",
    "scalar_shape": "a bool or string feature has a shape other than [1]",
    "bad_feature": "a feature entry in info.json is malformed",
    "episodes_file": "the episodes metadata file is unreadable or lacks a required column",
    "missing_column": "a data file has no column for a feature",
    "column_type": "a column does not convert to its declared type",
    "image_column": "an image column is not a struct with binary bytes",
    "index_not_consecutive": "a data file's index column is not consecutive",
    "frames_outside_file": "an episode's frames are not all in its data file",
    "quality": "a quality check named in --strict found something (see quality/ and the manifest's quality)",
    "length_mismatch": "an episode's length does not match its frame range",
    "file_missing": "a data or video file does not exist",
    "data_file": "a data file is not readable Parquet",
    "mp4_structure": "an MP4 has no ftyp or moov, is truncated, or has a box larger than its parent",
    "mp4_track": "an MP4 has no supported H.264, H.265 or AV1 video track",
    "depth_mismatch": "info.json declares a camera a depth map (is_depth_map) and its MP4 holds colour pictures, or "
                      "declares a colour camera whose MP4 holds one-plane pictures of more than 8 bits (depth)",
    "mp4_limits": "an MP4 passes a limit on its moov size, sample count, box count or range requests (named)",
    "data_span": "an episodes file spans more than the data-file byte limit (64 MiB rule)",
    "episode_order": "episodes of an episodes file are not in increasing episode_index order, or overlap",
    "duplicate_episode": "an episode_index appears more than once in the dataset's episodes files",
    "timestamps": "an episode's timestamps are NaN or go backwards, or a clip ends before it starts",
    "language": "a language annotation breaks a rule of the language columns",
    "v2_layout": "a v2.x episode's data file does not hold the frames meta/episodes.jsonl lists for it",
    "file_failed": "the episode itself is fine, but its episodes file failed for another episode's error",
    "internal": "the importer met an unexpected error (a bug): the element failed, the run went on",
    "accounting": "episodes read do not equal episodes written plus episodes failed",
    "io": "reading or writing storage failed",
    "recipe": "a training recipe cannot be read (size, YAML, anchors, nesting) or breaks LeRobot's recipe rules",
    "render": "a frame cannot be rendered with the recipe (LeRobot raises for it, e.g. an ambiguous resolver)",
    "lfs_pointer": "a file is a git-LFS pointer instead of its content",
    "dataset_root": "the dataset root does not exist or is not a folder",
    "url": "a URL names a filesystem that is unknown or not installed, or chains filesystems with `::`",
    "not_a_file": "a dataset path names a FIFO, device, socket or folder where a regular file must be",
    "limit": "a file or a value passes a limit that bounds the import's memory and time (named in the message)",
    "hub_access": "a Hugging Face Hub dataset does not exist, or is private or gated and the token cannot read it",
    "hub_revision": "a Hugging Face Hub dataset has no such branch, tag or commit",
    "hub_unreachable": "the Hugging Face Hub cannot be reached: offline mode (HF_HUB_OFFLINE) or a host name that "
                       "does not resolve",
    "output_confinement": "a path the output's own state names (manifest, media_index shard, lease) leaves its "
                          "folder of the output, or a folder or file the import manages is a symlink or not a "
                          "regular file",
    "manifest": "the output's manifest.json is not an import's manifest (not JSON, nested too deeply, malformed)",
    "lease": "the output's lease file is not a lease this importer wrote (unreadable, absurd values, too large)",
    "disk_full": "the output's storage has no space left (or the quota is used up)",
    "output_not_writable": "the output cannot be written: a read-only folder, a file where a folder must be, "
                           "or no permission",
    "deadline": "a piece of a run phase (checking a dataset, planning an episodes file, writing a part, "
                "finishing) ran past its deadline: the source is stuck or too slow (--phase_deadline)",
}


class LeRobotImportError(Exception):
    """A dataset breaks a rule. `str()` gives a message a user can act on."""

    def __init__(self, rule: str, message: str, *, file: Optional[str] = None,
                 episode_index: Optional[int] = None, dataset: Optional[str] = None,
                 episodes_file: Optional[str] = None) -> None:
        if rule not in RULES:
            raise ValueError(f"unknown rule id {rule!r}")
        message = shorten(redact(str(message)), MAX_MESSAGE_CHARS)
        super().__init__(message)
        self.rule = rule
        self.message = message
        self.file = shorten(redact(file, shapes=False), MAX_FILE_CHARS) if isinstance(file, str) else file
        self.episode_index = episode_index
        self.dataset = dataset
        self.episodes_file = episodes_file

    def with_context(self, *, dataset: Optional[str] = None, episodes_file: Optional[str] = None,
                     episode_index: Optional[int] = None, file: Optional[str] = None) -> "LeRobotImportError":
        """Fill in what the raiser did not know; never overwrite what it did."""
        self.dataset = self.dataset or dataset
        self.episodes_file = self.episodes_file or episodes_file
        if self.episode_index is None:
            self.episode_index = episode_index
        self.file = self.file or file
        return self

    def __str__(self) -> str:
        where = []
        if self.dataset:
            where.append(f"dataset {self.dataset}")
        if self.episodes_file:
            where.append(f"episodes file {self.episodes_file}")
        if self.episode_index is not None:
            where.append(f"episode {self.episode_index}")
        if self.file and self.file != self.episodes_file:
            where.append(f"file {self.file}")
        prefix = ", ".join(where)
        return f"[{self.rule}] {prefix + ': ' if prefix else ''}{self.message}"

    def __repr__(self) -> str:
        # Beam's exception handling hands on an exception as its type and repr: the repr keeps its rule and
        # context, so a rule met where no step expected it is still recorded as that rule (`rule_of_repr`).
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self):
        return (_rebuild, (self.rule, self.message, self.file, self.episode_index, self.dataset, self.episodes_file))

    def to_record(self) -> "FailureRecord":
        return FailureRecord(dataset=self.dataset, episodes_file=self.episodes_file,
                             episode_index=self.episode_index, file=self.file, rule=self.rule, message=str(self))


def rule_of_repr(exc_type: type, text: str) -> Optional[tuple[str, str]]:
    """(rule, message) of a `LeRobotImportError` known only by its type and repr (as Beam's exception
    handling reports it), or None for any other exception."""
    import ast
    if not (isinstance(exc_type, type) and issubclass(exc_type, LeRobotImportError)):
        return None
    head = f"{exc_type.__name__}("
    if not (text.startswith(head) and text.endswith(")")):
        return None
    try:
        message = ast.literal_eval(text[len(head):-1])
    except (ValueError, SyntaxError):
        return None
    rule = message[1:message.find("]")] if isinstance(message, str) and message.startswith("[") else None
    return (rule, message) if rule in RULES else None


def _rebuild(rule, message, file, episode_index, dataset, episodes_file) -> LeRobotImportError:
    return LeRobotImportError(rule, message, file=file, episode_index=episode_index, dataset=dataset,
                              episodes_file=episodes_file)


@dataclasses.dataclass(frozen=True, order=True)
class FailureRecord:
    """One row of errors.jsonl."""

    dataset: Optional[str]
    episodes_file: Optional[str]
    episode_index: Optional[int]
    file: Optional[str]
    rule: str
    message: str

    def __post_init__(self) -> None:
        # Records are also made from other exceptions' text (rule `internal`): cleaned here, whoever made it.
        object.__setattr__(self, "message", redact(self.message))

    @classmethod
    def cleaned(cls, dataset: Optional[str], episodes_file: Optional[str], episode_index: Optional[int],
                file: Optional[str], rule: str, message: str) -> "FailureRecord":
        """A record whose message its maker has already passed through `redact` (`redactor`): not cleaned
        again, for rows made by the hundred thousand."""
        record = object.__new__(cls)
        for name, value in (("dataset", dataset), ("episodes_file", episodes_file), ("episode_index", episode_index),
                            ("file", file), ("rule", rule), ("message", message)):
            object.__setattr__(record, name, value)
        return record

    def to_json_dict(self) -> dict[str, Any]:
        # the fields by name, in their order (dataclasses.asdict deep-copies each value: slow over many rows)
        return {"dataset": self.dataset, "episodes_file": self.episodes_file, "episode_index": self.episode_index,
                "file": self.file, "rule": self.rule, "message": self.message}

    def sort_key(self) -> tuple:
        return (self.dataset or "", self.episodes_file or "",
                -1 if self.episode_index is None else self.episode_index, self.file or "", self.rule, self.message)
