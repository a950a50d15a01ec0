"""The package layout holds: the pure libraries under `transforms/` never reach the Beam layer, and the code
explains itself instead of pointing at documents that are not in the repository.

* `transforms` itself and its sub-packages (lerobot, episode, mp4, language, reader, quality) import without
  apache_beam (checked in a fresh interpreter, so nothing the test process imported can hide it);
* no module of a sub-package imports a top-level module of `transforms` other than the ground floor
  (`errors`, `storage`), and none imports apache_beam, not even lazily inside a function;
* the sub-packages depend on each other without cycles, and `lerobot` (the input format) on none;
* no comment or string under `transforms/` and `pipelines/` cites an outside document
  ("mapping §3", "§2", "issue 7", "mapping.md").
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

import pytest

from tests.helpers import run_python

REPO = Path(__file__).resolve().parents[1]
TRANSFORMS = REPO / "transforms"
SUBPACKAGES = ("lerobot", "episode", "mp4", "language", "reader", "quality")
#: Top-level modules of `transforms` that the pure sub-packages may use.
GROUND_FLOOR = {"errors", "storage"}
PURE = ["transforms"] + [f"transforms.{name}" for name in SUBPACKAGES]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _subpackage_modules() -> list[Path]:
    return sorted(p for name in SUBPACKAGES for p in (TRANSFORMS / name).rglob("*.py"))


def _imported_names(path: Path) -> set[str]:
    """Every module (and `module.name`) the file imports, anywhere in it, relative imports resolved."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def _beam_modules_after(imports: list[str]) -> dict[str, list[str]]:
    """In a fresh interpreter: for each module in turn, the apache_beam modules loaded once it is imported."""
    code = (
        "import importlib, json, sys\n"
        "out = {}\n"
        f"for name in {imports!r}:\n"
        "    importlib.import_module(name)\n"
        "    out[name] = sorted(m for m in sys.modules if m.split('.')[0] == 'apache_beam')[:5]\n"
        "print(json.dumps(out))\n")
    return json.loads(run_python(code, timeout=300)[-1])


@pytest.mark.parametrize("package", PURE)
def test_pure_package_imports_without_beam(package):
    loaded = _beam_modules_after([package])
    assert loaded[package] == [], f"importing {package} imports apache_beam: {loaded[package]}"


def test_beam_check_sees_beam():
    """The fresh-interpreter check does see Beam when a module imports it (the Beam layer does)."""
    assert _beam_modules_after(["transforms.import_dataset"])["transforms.import_dataset"] != []


def test_every_subpackage_module_imports_without_beam():
    modules = [_module_name(p) for p in _subpackage_modules()]
    assert len(modules) >= 20
    loaded = _beam_modules_after(modules)
    first = next((m for m in modules if loaded[m]), None)
    assert first is None, f"importing {first} imports apache_beam ({loaded[first]})"


def test_subpackages_import_only_the_ground_floor():
    top_level = {p.stem for p in TRANSFORMS.glob("*.py") if p.name != "__init__.py"}
    assert GROUND_FLOOR <= top_level and "import_dataset" in top_level
    bad = []
    for path in _subpackage_modules():
        for name in sorted(_imported_names(path)):
            parts = name.split(".")
            if parts[0] == "apache_beam":
                bad.append(f"{path.relative_to(REPO)} imports {name}")
            elif parts[0] == "transforms" and len(parts) > 1 and parts[1] in top_level - GROUND_FLOOR:
                bad.append(f"{path.relative_to(REPO)} imports {name} (the Beam layer)")
    assert bad == []


def _subpackage_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in SUBPACKAGES}
    for path in _subpackage_modules():
        own = path.relative_to(TRANSFORMS).parts[0]
        for name in _imported_names(path):
            parts = name.split(".")
            if parts[0] == "transforms" and len(parts) > 1 and parts[1] in SUBPACKAGES and parts[1] != own:
                graph[own].add(parts[1])
    return graph


def test_subpackage_dependencies_have_no_cycle():
    graph = _subpackage_graph()
    assert graph["lerobot"] == set(), "the input format depends on no other sub-package"
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"import cycle between sub-packages: {' -> '.join(path + (node,))}"
        if node not in done:
            for dep in sorted(graph[node]):
                visit(dep, path + (node,))
            done.add(node)
    for package in SUBPACKAGES:
        visit(package, ())


def test_cycle_check_sees_a_cycle():
    """The graph walk above really reads imports: the reader depends on the episode package."""
    assert "episode" in _subpackage_graph()["reader"]


def test_quality_checks_sit_above_the_record_and_media_packages():
    """The quality checks read typed frames and MediaIndex sample times; nothing below depends on them."""
    graph = _subpackage_graph()
    assert graph["quality"] == {"lerobot", "episode", "mp4"}
    assert not any("quality" in deps for name, deps in graph.items() if name != "quality")


OUTSIDE_REFERENCE = re.compile(r"mapping\s*§|§\s*\d|\bissue\s+#?\d|\b(mapping|architecture)\.md\b", re.IGNORECASE)


def _outside_references(source: str) -> list[tuple[int, str]]:
    """(line, the words) of every comment or string literal in `source` that cites an outside document."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        match = OUTSIDE_REFERENCE.search(token.string) if token.type in (tokenize.COMMENT, tokenize.STRING) else None
        if match:
            found.append((token.start[0], match[0]))
    return found


def test_no_comment_points_at_outside_documents():
    files = sorted((REPO / "transforms").rglob("*.py")) + sorted((REPO / "pipelines").rglob("*.py"))
    assert len(files) >= 30
    hits = [f"{path.relative_to(REPO)}:{line}: {words!r}" for path in files
            for line, words in _outside_references(path.read_text())]
    assert not hits, "comments citing outside documents (say the rule itself):\n" + "\n".join(hits)


@pytest.mark.parametrize("source,hits", [
    ("x = 1  # see mapping §4\n", [(1, "mapping §")]),
    ('def f():\n    """As issue 7 asks."""\n', [(2, "issue 7")]),
    ("# rule 3 of mapping.md\n", [(1, "mapping.md")]),
    ("# the 64 MiB rule (§2)\n", [(1, "§2")]),
    ("# one issue with 2 cameras\nissue_7 = 3\n", []),
])
def test_outside_reference_pattern(source, hits):
    assert _outside_references(source) == hits
