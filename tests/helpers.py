"""Test helpers: where the test data is, running an import in-process, reading its outputs, running the
reference implementation (the oracle, `tests/oracle.py`).

Test data:
* `tests/data/lerobot/<name>/`: small datasets written by LeRobot's own writer, with what LeRobot returned
  for them (`expected_items/`, `language/expected/`). Always there: `lerobot_dataset(name)`.
* `tests/data/lerobot061/<name>/`: datasets written by LeRobot 0.6.1 (depth cameras), with what LeRobot 0.6.1
  returned for them (`expected_items/`). Always there: `lerobot061_dataset(name)`.
* `tests/data/so101_av1`: the quick-start sample (the same files as `tests/data/lerobot/so101_av1`).
* Third-party published datasets are never copied into the project: their tests look for them in
  `../shared/corpus/third_party/` (or `$LEROBOT_SHARED/corpus/third_party/`) and skip, naming the
  folder, when it is not there: `third_party_path(name)`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
LEROBOT_DATA = DATA / "lerobot"
LEROBOT061_DATA = DATA / "lerobot061"
SAMPLE = DATA / "so101_av1"
THIRD_PARTY = Path(os.environ.get("LEROBOT_SHARED", REPO.parent / "shared")) / "corpus" / "third_party"

# Tests never need a network: no Prism download, no metadata server lookups.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("NO_GCE_CHECK", "true")

sys.path.insert(0, str(REPO))

from tests.oracle import OracleError, reference_episodes, spiral_missing  # noqa: E402,F401  (re-exported)


def lerobot_dataset(name: str) -> Path:
    """A LeRobot-writer dataset of the project (`tests/data/lerobot/<name>`); fails if it is missing."""
    path = LEROBOT_DATA / name
    assert (path / "meta" / "info.json").is_file(), f"test dataset {path} is missing from the project"
    return path


def lerobot061_dataset(name: str) -> Path:
    """A dataset written by LeRobot 0.6.1 (`tests/data/lerobot061/<name>`: depth_video, depth_image); fails if
    it is missing."""
    path = LEROBOT061_DATA / name
    assert (path / "meta" / "info.json").is_file(), f"test dataset {path} is missing from the project"
    return path


def third_party_path(*parts: str) -> Path:
    """A third-party published dataset (or a file in one); skips the test, naming the folder, if absent."""
    path = THIRD_PARTY.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"third-party dataset folder {path} is not there (third-party data is never part of the "
                    f"project; set LEROBOT_SHARED to the folder holding corpus/third_party/)")
    return path


def corpus_path(*parts: str) -> Path:
    """`corpus_path("lerobot", name, ...)`: the project's copy; `corpus_path("third_party", ...)`: skips if absent."""
    kind, rest = parts[0], parts[1:]
    if kind == "lerobot":
        return lerobot_dataset(rest[0]).joinpath(*rest[1:])
    if kind == "third_party":
        return third_party_path(*rest)
    raise ValueError(f"unknown test data kind {kind!r}: 'lerobot' or 'third_party'")


def lerobot_corpus() -> list[Path]:
    """Every LeRobot-writer dataset of the project, by name."""
    return sorted(p for p in LEROBOT_DATA.iterdir() if (p / "meta" / "info.json").exists())


def lerobot061_corpus() -> list[Path]:
    """Every dataset of the project written by LeRobot 0.6.1 (depth cameras), by name."""
    return sorted(p for p in LEROBOT061_DATA.iterdir() if (p / "meta" / "info.json").exists())


def copy_dataset(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("expected"))
    return dest


def imported_sample(base: Path) -> tuple[Path, Path]:
    """A copy of the sample dataset under `base` and its import (default options): (dataset, output),
    for modules that damage copies of one import."""
    dataset = copy_dataset(SAMPLE, base / "so101")
    out = base / "out"
    assert run_import(dataset, out) == 0
    return dataset, out


def run_python(code: str, *, timeout: int = 120, env: Optional[dict] = None, unset: Sequence[str] = ()) -> list[str]:
    """Run `code` in a fresh interpreter with the repository importable (so nothing this test process
    imported can hide what it loads); its stdout lines. Fails the test, with its stderr, if it fails.

    Args:
        env: variables set for it, over this process's environment.
        unset: variables of this process's environment it does not get."""
    base = {k: v for k, v in os.environ.items() if k not in unset}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**base, "PYTHONPATH": str(REPO), **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


def run_import(dataset, output, *extra: str, verbosity: int = 1) -> int:
    """Run the import pipeline in-process on FnApiRunner (never Prism, never the network); at -v by default,
    so its `metrics:` line is printed (verbosity=0: the default terminal output)."""
    from pipelines.import_lerobot import run
    datasets = dataset if isinstance(dataset, (list, tuple)) else [dataset]  # [] with --datasets in extra
    argv = [a for d in datasets for a in ("--dataset", str(d))] + ["--output", str(output)]
    if not any(a.startswith("--runner") for a in extra):
        argv += ["--runner", "FnApiRunner"]
    return run(argv + list(extra), verbosity=verbosity)


def assert_items_equal(a: dict, b: dict) -> None:
    """Two training items (dicts of tensors and plain values) are the same: the same keys, every tensor of the same
    dtype and values, every other value equal."""
    import torch

    assert set(a) == set(b)
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def read_errors(output: Path) -> list[dict]:
    path = Path(output) / "errors.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_manifest(output: Path) -> dict:
    return json.loads((Path(output) / "manifest.json").read_text())


def read_part(output: Path, episodes_file_rel: str = "chunk-000/file-000.parquet") -> pa.Table:
    return pq.read_table(Path(output) / "episodes" / episodes_file_rel)


def output_files(output: Path) -> dict[str, bytes]:
    """Every output file's bytes, by relative path (manifest timing fields blanked; the lease files, run
    bookkeeping rather than output, left out)."""
    out = {}
    for path in sorted(Path(output).rglob("*")):
        if path.is_file() and not path.name.startswith(".lease.json"):
            data = path.read_bytes()
            if path.name == "manifest.json":
                doc = json.loads(data)
                doc["started_at"] = doc["finished_at"] = doc["run_id"] = None
                for entry in (doc.get("episodes_files") or {}).values():  # each entry names the run that wrote it
                    if isinstance(entry, dict) and "run_id" in entry:
                        entry["run_id"] = None
                data = json.dumps(doc, sort_keys=True).encode()
            out[str(path.relative_to(output))] = data
    return out


def spiral_available() -> Optional[str]:
    """None when the reference can run, else why not."""
    return spiral_missing()


def run_oracle(root: Path, episodes_rel: str, tmp_dir: Optional[Path] = None) -> pa.Table:
    """The reference's episodes for one episodes file (cached per session). Raises OracleError.

    spiral-sdk comes with the test extra, so a missing reference fails the test rather than skip it."""
    reason = spiral_missing()
    if reason:
        pytest.fail(reason)
    return reference_episodes(root, episodes_rel, work_dir=tmp_dir)
