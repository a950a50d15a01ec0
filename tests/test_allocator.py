"""Arrow's allocator option (transforms/__init__.py): set before Arrow loads, never over the process's own."""

from __future__ import annotations

from tests.helpers import run_python

KEY = "MIMALLOC_ARENA_EAGER_COMMIT"
REPORT = f"import os; print(os.environ.get({KEY!r}, 'unset'))"


def test_importing_the_project_first_turns_the_eager_arena_commit_off():
    assert run_python(f"import transforms.reader; import pyarrow; {REPORT}", unset=[KEY]) == ["0"]


def test_a_value_the_process_set_is_kept():
    assert run_python(f"import transforms; {REPORT}", env={KEY: "1"}) == ["1"]


def test_nothing_is_set_once_arrow_has_loaded():
    # the option is read when Arrow's library loads: setting it afterwards would only mislead
    assert run_python(f"import pyarrow, transforms; {REPORT}", unset=[KEY]) == ["unset"]
