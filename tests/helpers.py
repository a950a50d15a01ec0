"""Test helpers: where the test data is, running an import in-process, reading its outputs, running the
reference implementation (the oracle)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("LEROBOT_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpus"
ORACLE = SHARED / "tools" / "spql_oracle.py"
SAMPLE = REPO / "tests" / "data" / "so101_av1"

# Tests never need a network: no Prism download, no metadata server lookups.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("NO_GCE_CHECK", "true")

sys.path.insert(0, str(REPO))


def corpus_path(*parts: str) -> Path:
    path = CORPUS.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"corpus not found at {path} (set LEROBOT_SHARED to the shared/ folder)")
    return path


def lerobot_corpus() -> list[Path]:
    root = CORPUS / "lerobot"
    return sorted(p for p in root.iterdir() if (p / "meta" / "info.json").exists()) if root.exists() else []


def copy_dataset(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("expected"))
    return dest


def run_import(dataset, output, *extra: str) -> int:
    """Run the import pipeline in-process on FnApiRunner (never Prism, never the network)."""
    from pipelines.import_lerobot import run
    datasets = dataset if isinstance(dataset, (list, tuple)) else [dataset]  # [] with --datasets in extra
    argv = [a for d in datasets for a in ("--dataset", str(d))] + ["--output", str(output)]
    if not any(a.startswith("--runner") for a in extra):
        argv += ["--runner", "FnApiRunner"]
    return run(argv + list(extra))


def read_errors(output: Path) -> list[dict]:
    path = Path(output) / "errors.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_manifest(output: Path) -> dict:
    return json.loads((Path(output) / "manifest.json").read_text())


def read_part(output: Path, episodes_file_rel: str = "chunk-000/file-000.parquet") -> pa.Table:
    return pq.read_table(Path(output) / "episodes" / episodes_file_rel)


def output_files(output: Path) -> dict[str, bytes]:
    """Every output file's bytes, by relative path (manifest timing fields blanked)."""
    out = {}
    for path in sorted(Path(output).rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "manifest.json":
                doc = json.loads(data)
                doc["started_at"] = doc["finished_at"] = doc["run_id"] = None
                data = json.dumps(doc, sort_keys=True).encode()
            out[str(path.relative_to(output))] = data
    return out


class OracleError(Exception):
    pass


_ORACLE_CACHE: dict[tuple, object] = {}


def spiral_available() -> Optional[str]:
    try:
        import spiral  # noqa: F401
        import spiral.types  # noqa: F401
    except Exception as ex:  # noqa: BLE001
        return f"spiral-sdk is not installed ({ex}); pip install spiral-sdk==0.16.56"
    if not ORACLE.exists():
        return f"the oracle script is not at {ORACLE}"
    return None


def run_oracle(root: Path, episodes_rel: str, tmp_dir: Path) -> pa.Table:
    """The reference's episodes for one episodes file (cached per session). Raises OracleError."""
    reason = spiral_available()
    if reason:
        pytest.skip(reason)
    key = (str(root), episodes_rel, _tree_stamp(root))
    if key not in _ORACLE_CACHE:
        out = tmp_dir / f"oracle-{len(_ORACLE_CACHE)}.arrow"
        proc = subprocess.run([sys.executable, str(ORACLE), str(root), episodes_rel, str(out), "--frames", "0"],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            _ORACLE_CACHE[key] = OracleError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else
                                             f"oracle exit {proc.returncode}")
        else:
            import spiral.types  # noqa: F401  (registers spql.* for reading)
            with pa.OSFile(str(out), "rb") as f:
                _ORACLE_CACHE[key] = pa.ipc.open_file(f).read_all()
    value = _ORACLE_CACHE[key]
    if isinstance(value, OracleError):
        raise value
    return value


def _tree_stamp(root: Path) -> tuple:
    return tuple(sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in Path(root).rglob("*")
                        if p.is_file()))
