"""The package layout holds: the Beam layer on top, the pure libraries beneath it in floors that depend
one way, and the code explains itself instead of pointing at documents that are not in the repository.

* the top level of `transforms` is the Beam layer (its steps import apache_beam, each a thin adapter over
  `transforms.work`, which also holds the elements they pass); every Beam-free library lives in a sub-package;
* `transforms` itself and its sub-packages import without apache_beam (checked in a fresh interpreter, so
  nothing the test process imported can hide it), and no sub-package module imports a top-level module of
  `transforms` or apache_beam, not even lazily inside a function;
* the sub-packages sit on floors (`FLOORS`): each imports only packages on floors below its own, so there
  is no upward import and no circle;
* `pipelines` has no import circle (a module's `if __name__ == "__main__":` block aside);
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
#: The Beam-free sub-packages, floor by floor: a package imports only packages on floors below its own.
FLOORS = (
    ("base",),                  # errors, storage, the Hub, run limits, stopping
    ("lerobot", "language"),    # the input format; language annotations and recipes
    ("episode",),               # the record
    ("mp4", "output"),          # MP4s -> MediaIndex; the output folder
    ("quality",),               # checks over typed frames, sample times and metadata
    ("work", "reader"),         # the import's steps without Beam (and their elements); reading an import back
)
SUBPACKAGES = tuple(name for floor in FLOORS for name in floor)
FLOOR_OF = {name: level for level, floor in enumerate(FLOORS) for name in floor}
#: Top-level modules of `transforms` that are Beam-free by design (the elements the steps pass live in `work`).
BEAM_LAYER_ELEMENTS: set[str] = set()
PURE = ["transforms"] + [f"transforms.{name}" for name in SUBPACKAGES]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _subpackage_modules() -> list[Path]:
    return sorted(p for name in SUBPACKAGES for p in (TRANSFORMS / name).rglob("*.py"))


def _is_main_block(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__")


def _imported_names(path: Path) -> set[str]:
    """Every module (and `module.name`) the file imports, anywhere in it, relative imports resolved."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    # a module's `if __name__ == "__main__":` block runs only when it is the program (`python -m ...`):
    # not part of what importing it imports
    tree.body = [node for node in tree.body if not _is_main_block(node)]
    for node in ast.walk(tree):
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


def _top_level_modules() -> set[str]:
    return {p.stem for p in TRANSFORMS.glob("*.py") if p.name != "__init__.py"}


def test_top_level_is_the_beam_layer():
    """Every top-level module of `transforms` is a Beam step (it imports apache_beam) or the elements the
    steps pass; a Beam-free library at the top belongs in a sub-package."""
    top_level = _top_level_modules()
    assert "import_dataset" in top_level
    pure = sorted(name for name in top_level - BEAM_LAYER_ELEMENTS
                  if not any(n.split(".")[0] == "apache_beam" for n in _imported_names(TRANSFORMS / f"{name}.py")))
    assert pure == [], f"Beam-free modules at the top of transforms/ (move them into a sub-package): {pure}"
    assert {p.name for p in TRANSFORMS.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(SUBPACKAGES)


def test_subpackages_import_no_beam_layer():
    top_level = _top_level_modules()
    bad = []
    for path in _subpackage_modules():
        for name in sorted(_imported_names(path)):
            parts = name.split(".")
            if parts[0] == "apache_beam":
                bad.append(f"{path.relative_to(REPO)} imports {name}")
            elif parts[0] == "transforms" and len(parts) > 1 and parts[1] in top_level:
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


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{name} -> {dep}" for name, deps in graph.items() for dep in deps
                  if FLOOR_OF[dep] >= FLOOR_OF[name])


def test_subpackages_import_only_lower_floors():
    """Floors make circles impossible: an import to the same floor or above is refused, naming it."""
    assert _upward(_subpackage_graph()) == [], "imports to the same floor or above (see FLOORS)"


def test_floor_check_sees_an_upward_import():
    """The check reads real imports: the reader does depend on the record, and a made-up import of the
    reader by the record would be refused."""
    graph = _subpackage_graph()
    assert "episode" in graph["reader"] and graph["base"] == set()
    graph["episode"] = graph["episode"] | {"reader"}
    assert _upward(graph) == ["episode -> reader"]


def test_quality_checks_sit_above_the_record_and_media_packages():
    """The quality checks read typed frames and MediaIndex sample times; nothing below depends on them."""
    graph = _subpackage_graph()
    assert {"lerobot", "episode", "mp4"} <= graph["quality"]
    assert not any("quality" in deps for name, deps in graph.items() if FLOOR_OF[name] <= FLOOR_OF["quality"])
    assert "quality" in graph["work"]  # the import's steps run them


def _pipelines_graph() -> dict[str, set[str]]:
    modules = {p.stem for p in (REPO / "pipelines").glob("*.py") if p.name != "__init__.py"}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name in modules:
        for imported in _imported_names(REPO / "pipelines" / f"{name}.py"):
            parts = imported.split(".")
            if parts[0] == "pipelines" and len(parts) > 1 and parts[1] in modules and parts[1] != name:
                graph[name].add(parts[1])
    return graph


def _circles(graph: dict[str, set[str]]) -> list[str]:
    """Every import circle of `graph`, once each, as "a -> b -> a"."""
    found: list[str] = []
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        if node in path:
            found.append(" -> ".join(path[path.index(node):] + (node,)))
            return
        if node in done:
            return
        for dep in sorted(graph.get(node, ())):
            visit(dep, path + (node,))
        done.add(node)
    for node in sorted(graph):
        visit(node, ())
    return found


def test_pipelines_have_no_import_circle():
    """The command's modules depend one way: the dispatcher (`cli`) on the subcommands, they on what they
    share (`console`, `command_line`, `targets`, ...), never back."""
    graph = _pipelines_graph()
    assert {"import_lerobot", "plan", "verify", "check", "render_recipes"} <= graph["cli"]
    assert _circles(graph) == []


def test_circle_check_sees_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]


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
