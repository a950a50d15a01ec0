"""Arrow's allocator option (transforms/__init__.py): set before Arrow loads, never over the process's own."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import REPO

KEY = "MIMALLOC_ARENA_EAGER_COMMIT"
REPORT = f"import os; print(os.environ.get({KEY!r}, 'unset'))"


def _run(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != KEY}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**base, "PYTHONPATH": str(REPO), **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_importing_the_project_first_turns_the_eager_arena_commit_off():
    assert _run(f"import transforms.reader; import pyarrow; {REPORT}") == "0"


def test_a_value_the_process_set_is_kept():
    assert _run(f"import transforms; {REPORT}", **{KEY: "1"}) == "1"


def test_nothing_is_set_once_arrow_has_loaded():
    # the option is read when Arrow's library loads: setting it afterwards would only mislead
    assert _run(f"import pyarrow, transforms; {REPORT}") == "unset"
