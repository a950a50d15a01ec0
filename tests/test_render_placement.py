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


def _render(root: Path, out: Path, target: Path) -> int:
    return run(["--recipe", str(root / "expected" / "recipes" / f"{RECIPE}.yaml"), "--input", str(out),
                "--output", str(target), "--runner", "FnApiRunner"])


def test_render_replaces_its_own_files_whole_and_leaves_the_users(imported, tmp_path):
    root, out, _ = imported
    target = tmp_path / "samples"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    (target / "samples-00007-of-00009.parquet").write_bytes(b"a shard of an older render")
    assert _render(root, out, target) == 0
    names = sorted(p.name for p in target.iterdir())
    assert "notes.txt" in names and "samples-00007-of-00009.parquet" not in names, names
    assert "errors.jsonl" in names and any(n.startswith("samples-") for n in names), names
    assert not [n for n in names if ".tmp-" in n or n.startswith("beam-temp")], names
    assert (target / "notes.txt").read_text() == "mine"


def test_render_into_an_output_another_render_holds_is_refused(imported, tmp_path, capsys):
    from transforms.output import lease
    root, out, _ = imported
    target = tmp_path / "samples"
    assert _render(root, out, target) == 0
    before = _tree(target)
    held = lease.acquire(str(target), run_id="other-render")
    try:
        assert _render(root, out, target) == 1
    finally:
        lease.release(held)
    err = capsys.readouterr().err
    assert f"error: the output file://{target} is leased by run other-render (host " in err, err
    assert err.rstrip().endswith("another render (or an import) is writing it; render again once it has finished "
                                 "(a lease of a run that died expires, and is then taken over)"), err
    assert _tree(target) == before


def test_interrupted_render_leaves_the_last_render_whole(imported, tmp_path, monkeypatch):
    from transforms import render_samples
    root, out, _ = imported
    target = tmp_path / "samples"
    assert _render(root, out, target) == 0
    before = _tree(target)
    real = render_samples.render_episode_samples

    def stopping(episode, recipe, tasks):
        if episode.episode_index > 0:  # after the first episode's samples were handed to the writer
            raise KeyboardInterrupt()
        return real(episode, recipe, tasks)

    monkeypatch.setattr(render_samples, "render_episode_samples", stopping)
    with pytest.raises(BaseException):
        _render(root, out, target)
    assert _tree(target) == before  # the last render's files, whole; nothing staged left behind
    assert not [p for p in target.rglob("*") if ".tmp-" in str(p) or "beam-temp" in str(p)]
    monkeypatch.setattr(render_samples, "render_episode_samples", real)
    assert _render(root, out, target) == 0 and _tree(target) == before  # the same samples again


def test_ctrl_c_while_a_render_moves_its_files_waits_for_all_of_them(imported, tmp_path, monkeypatch, capsys):
    """A signal that arrives as the first file moves into place stops the render once every file has moved:
    the output holds one render's files, whole, and the lease is released."""
    import os
    import signal

    from pipelines import cli
    from transforms.base import storage
    from transforms.output.lease import read_lease

    root, out, _ = imported
    target = tmp_path / "samples"
    real, moved = storage.commit, []

    def commit(src, dst):
        if not moved:
            signal.raise_signal(signal.SIGINT)  # the user's Ctrl-C, as the first file moves
        moved.append(dst)
        return real(src, dst)

    monkeypatch.setattr(storage, "commit", commit)
    monkeypatch.setattr(os, "_exit", lambda status: (_ for _ in ()).throw(SystemExit(status)))
    with pytest.raises(SystemExit) as ended:
        cli.dispatch(["render", "--recipe", str(root / "expected" / "recipes" / f"{RECIPE}.yaml"), "--input",
                      str(out), "--output", str(target), "--runner", "FnApiRunner"])
    assert ended.value.code == 130
    assert capsys.readouterr().out.endswith(
        "interrupted by SIGINT: the render stopped; its output keeps the files of the last render that finished, "
        "and its lease is released\n")
    names = sorted(p.name for p in target.iterdir())
    assert len(moved) == len([n for n in names if n.startswith("samples-") or n == "errors.jsonl"]) > 1, names
    assert "errors.jsonl" in names and not [n for n in names if ".tmp-" in n], names
    assert read_lease(str(target)) is None
    monkeypatch.setattr(storage, "commit", real)
    again = tmp_path / "again"
    assert _render(root, out, again) == 0 and _tree(again) == _tree(target)  # the whole render, as a clean one
