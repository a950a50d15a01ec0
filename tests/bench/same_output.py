"""Do two checkouts of the project write the same import? Byte for byte, the manifest but for its run.

    python tests/bench/same_output.py --code OLD_CHECKOUT --code . DATASET [DATASET ...] [-- IMPORT OPTIONS]

Each checkout imports each dataset (`python -m pipelines.import_lerobot --dataset D --output TMP -q`, in a fresh
process with the checkout's own modules first on the path) into its own folder; then every file of the two
outputs is compared: each must exist in both and hold the same bytes, except `manifest.json`, whose run id and
times (`run_id`, `started_at`, `finished_at`, and the run id each episodes file records) are left out of the
comparison. Exit status 0 when every dataset's outputs are the same, 1 otherwise (the differing files named).
A refactoring that must not change what an import writes is checked with it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RUN_KEYS = ("run_id", "started_at", "finished_at")


def _import(code: Path, dataset: str, out: Path, options: list[str]) -> int:
    proc = subprocess.run([sys.executable, "-m", "pipelines.import_lerobot", "--dataset", dataset, "--output",
                           str(out), "-q", *options], cwd=code, capture_output=True, text=True)
    return proc.returncode


def _without_run(doc):
    """The manifest without what names its run (its id and times, and each entry's run id)."""
    if isinstance(doc, dict):
        return {k: _without_run(v) for k, v in doc.items() if k not in RUN_KEYS}
    if isinstance(doc, list):
        return [_without_run(v) for v in doc]
    return doc


def _files(out: Path) -> dict[str, Path]:
    return {str(p.relative_to(out)): p for p in sorted(out.rglob("*")) if p.is_file()}


def compare(a: Path, b: Path) -> list[str]:
    """The differences between two outputs, one line each ([] when they are the same)."""
    fa, fb = _files(a), _files(b)
    problems = [f"only in {a.name}: {k}" for k in sorted(set(fa) - set(fb))]
    problems += [f"only in {b.name}: {k}" for k in sorted(set(fb) - set(fa))]
    for rel in sorted(set(fa) & set(fb)):
        x, y = fa[rel].read_bytes(), fb[rel].read_bytes()
        if rel.endswith("manifest.json"):
            if _without_run(json.loads(x)) != _without_run(json.loads(y)):
                problems.append(f"differs: {rel} (beyond its run id and times)")
        elif x != y:
            problems.append(f"differs: {rel} ({len(x)} vs {len(y)} bytes)")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", help="LeRobot datasets (v3 or v2.x) to import with each checkout")
    parser.add_argument("--code", action="append", required=True, help="a checkout of the project (twice)")
    args, options = parser.parse_known_args()
    options = [o for o in options if o != "--"]
    if len(args.code) != 2:
        parser.error("give --code twice: the two checkouts to compare")
    codes = [Path(c).resolve() for c in args.code]
    work = Path(tempfile.mkdtemp(prefix="same_output_"))
    status = 0
    try:
        for i, dataset in enumerate(args.datasets):
            outs = [work / f"{i}-{side}" for side in ("a", "b")]
            codes_status = [_import(code, str(Path(dataset).resolve()), out, options) for code, out in zip(codes, outs)]
            problems = compare(*outs)
            if codes_status[0] != codes_status[1]:
                problems.insert(0, f"exit status {codes_status[0]} vs {codes_status[1]}")
            files = len(_files(outs[0]))
            print(f"{dataset}: {'same' if not problems else 'DIFFERENT'} ({files} files, exit {codes_status[0]})")
            for line in problems[:20]:
                print(f"  {line}")
            status |= bool(problems)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
