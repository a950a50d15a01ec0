"""`lerobot-import render --output` placed where it would destroy records: the import being read, its
dataset, another import or dataset, or a folder inside any of them. Refused before anything runs, with
nothing changed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pipelines.render_recipes import run
from tests.helpers import lerobot_dataset, run_import

RECIPE = "subtask"


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = lerobot_dataset("language")
    base = tmp_path_factory.mktemp("placement")
    out = base / "out"
    assert run_import(root, out) == 0
    other = base / "other_import"
    assert run_import(root, other) == 0
    return root, out, other


@pytest.mark.parametrize("where, why", [
    ("import", "is inside the import being read ({out})"),
    ("import/episodes", "is inside the import being read ({out})"),
    ("dataset", "is inside its dataset ({dataset})"),
    ("other", "is inside an import ({other} holds manifest.json)"),
    ("other/sub", "is inside an import ({other} holds manifest.json)"),
])
def test_render_output_over_an_import_or_dataset_is_refused(imported, where, why, capsys):
    root, out, other = imported
    target = {"import": out, "import/episodes": out / "episodes", "dataset": root / "samples", "other": other,
              "other/sub": other / "sub"}[where]
    before = {p: _tree(p) for p in (out, other, root)}
    status = run(["--recipe", str(root / "expected" / "recipes" / f"{RECIPE}.yaml"), "--input", str(out),
                  "--output", str(target), "--runner", "FnApiRunner"])
    assert status == 1
    err = capsys.readouterr().err
    expected = why.format(out=out, dataset=f"file://{root}", other=f"file://{other}")
    assert f"error: --output {target} {expected}" in err, err
    assert {p: _tree(p) for p in (out, other, root)} == before
    assert not (other / "sub").exists()
