"""Pytest set-up: the project on sys.path, no network for any library, shared fixtures.

Helpers the tests import live in `tests/helpers.py`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Tests never need a network: no Prism download, no metadata server lookups.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("NO_GCE_CHECK", "true")


@pytest.fixture(scope="session")
def oracle_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("oracle")
