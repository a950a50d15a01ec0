"""The README tells the truth: its render example runs as written on the bundled data, what its examples
write is git-ignored, and its test command installs what CI's tests need (PyTorch's CPU build included)."""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import subprocess

import pytest

from tests.helpers import REPO


def _section(title: str) -> str:
    readme = (REPO / "README.md").read_text()
    start = readme.index(f"## {title}\n")
    end = readme.find("\n## ", start + 1)
    return readme[start:end]


def _commands(block: str) -> list[list[str]]:
    """The `lerobot-import ...` lines of a README block (continuations joined, `[optional]` parts left out)."""
    text = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(re.sub(r"\[[^\]]*\]", "", line))[1:] for line in text.splitlines()
            if line.startswith("lerobot-import ")]


def test_the_render_example_runs_as_written(tmp_path, monkeypatch):
    from pipelines import cli
    block = re.search(r"```\n(lerobot-import --dataset .*?)```", _section("Language annotations and recipes"), re.S)
    commands = _commands(block.group(1))
    assert [c[0] for c in commands] == ["--dataset", "render"]
    (tmp_path / "tests").symlink_to(REPO / "tests")  # the README's paths are relative to the checkout
    monkeypatch.chdir(tmp_path)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        for argv in commands:
            with pytest.raises(SystemExit) as done:
                cli.main(argv)
            assert done.value.code == 0, argv
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)
        logging.captureWarnings(False)
    # the render's files alone: its released lease leaves no lock file
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == ["errors.jsonl",
                                                                      "samples-00000-of-00001.parquet"]
    assert (tmp_path / "samples" / "errors.jsonl").read_text() == ""
    assert (tmp_path / "out" / "language" / "manifest.json").is_file()


def test_what_the_examples_write_is_git_ignored():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["out/so101_av1/manifest.json", "out/language/episodes/chunk-000/file-000.parquet",
             "samples/samples-00000-of-00001.parquet", "samples/errors.jsonl"]
    proc = subprocess.run(["git", "check-ignore", *paths], cwd=REPO, capture_output=True, text=True)
    assert proc.stdout.split() == paths


def test_the_readme_test_command_installs_what_ci_tests_need():
    quick = _section("Quick start")
    blocks = re.findall(r"```sh\n(.*?)```", quick, re.S)
    assert len(blocks) == 2
    command = blocks[1].strip()
    assert command == ('pip install -e ".[test]" && pip install torch==2.13.0 --index-url '
                       'https://download.pytorch.org/whl/cpu && python -m pytest -q -n auto --dist loadfile '
                       '--max-worker-restart 0')
    setup = (REPO / "setup.py").read_text()
    test_extra = setup[setup.index('"test": ['):]
    test_extra = test_extra[:test_extra.index("],")]
    for package in ('"duckdb', '"polars', '"av', '"spiral-sdk', '"huggingface_hub', '"pytest-xdist', '"distributed'):
        assert package in test_extra, package
    ci = (REPO / ".ci" / "run").read_text()
    assert "pip install --quiet \"torch" not in ci  # the README's command is the one way tests get torch


DEV_LOG = re.compile(r"\b(stop|issue)s? #?\d+\b|\bthis (session|round)\b|\bthe same session\b|\bhelper session|"
                     r"\(\b[0-9a-f]{7,12}\b\)|\bcommit [0-9a-f]{7,40}\b", re.IGNORECASE)


def test_docs_and_help_texts_speak_to_users_not_of_the_project_history():
    """The README, the benchmark figures, the deploy notes and every help text say what the project is and does,
    not how it got there: no issue or stop numbers, sessions, rounds or commit ids."""
    from pipelines import check, command_line, plan, render_recipes, verify
    docs = {str(p.relative_to(REPO)): p.read_text() for p in [REPO / "README.md", *REPO.glob("tests/**/README.md"),
                                                              *REPO.glob("deploy/**/*.md")]}
    assert "tests/bench/README.md" in docs and len(docs) >= 3
    docs["lerobot-import --help"] = command_line.import_help()
    docs["plan --help"] = plan._parser().format_help()
    docs["verify/check/render help"] = " ".join(
        mod.__doc__ or "" for mod in (check, verify, render_recipes))
    found = [f"{where}: {m.group(0)!r}" for where, text in docs.items() for m in DEV_LOG.finditer(text)]
    assert found == []


@pytest.mark.parametrize("text", ["as stop 27 measured", "issue 25's target", "in this session", "before (1977f65)",
                                  "this round's changes"])
def test_the_history_pattern_sees_history(text):
    assert DEV_LOG.search(text)
