"""Pytest set-up: the project on sys.path, no network for any library, shared fixtures.

Helpers the tests import live in `tests/helpers.py`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.scheduling import restore_normal_scheduling  # noqa: E402  (needs the path set-up above)

# Tests never need a network: no Prism download, no metadata server lookups.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("NO_GCE_CHECK", "true")


@pytest.fixture(autouse=True)
def _normal_scheduling():
    """A test that encoded AV1 leaves no real-time thread behind (tests/scheduling.py says why)."""
    yield
    restore_normal_scheduling()


@pytest.fixture(scope="session")
def oracle_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("oracle")
