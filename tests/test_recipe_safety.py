"""Hostile recipes: recipe text is never taken for a path, YAML is parsed with a bounded safe loader (size,
anchors and aliases, value count, nesting depth), and every problem is a `RecipeError` (rule `recipe`)
naming the recipe and the cause, with the line and column of a YAML problem. Time and memory of each
case are measured by `tests/bench/bench_language.py --hostile`."""

from __future__ import annotations

import os
import pickle
import tracemalloc

import pytest

from tests.helpers import lerobot_dataset, run_import
from transforms.base.errors import LeRobotImportError
from transforms.language.errors import RecipeError
from transforms.language.recipe import (
    MAX_RECIPE_BYTES,
    MAX_RECIPE_DEPTH,
    MAX_RECIPE_NODES,
    TrainingRecipe,
    load_recipe,
    parse_recipe,
    read_recipe_file,
)
from transforms.render_samples import RenderTrainingSamples

GOOD = "messages:\n  - {role: user, content: '${task}', stream: low_level}\n"


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    """A valid-looking recipe whose content blocks hold 9 levels of 9 aliases: 9**9 strings when expanded
    (the shape that, rendered, wrote 1.7 GB per frame)."""
    lines = ["messages:", "  - role: user", "    stream: low_level", "    content:",
             "      - {type: text, text: hi, l0: &l0 [" + ",".join(["lol"] * width) + "]}"]
    for k in range(1, levels):
        lines.append(f"      - {{type: text, l{k}: &l{k} [" + ",".join([f"*l{k - 1}"] * width) + "]}")
    return "\n".join(lines) + "\n"


def _error(text, name="hostile.yaml") -> RecipeError:
    with pytest.raises(RecipeError) as info:
        parse_recipe(text, name=name)
    err = info.value
    assert isinstance(err, LeRobotImportError) and isinstance(err, ValueError)
    assert err.rule == "recipe" and err.recipe == name
    assert str(err).startswith(f"[recipe] recipe {name}: ")
    return err


# ---------------------------------------------------------------------------------------------
# Text is never a path


def test_text_naming_a_file_is_not_read(tmp_path):
    path = tmp_path / "other.yaml"
    path.write_text(GOOD)
    assert load_recipe(path).messages[0].content == "${task}"  # the file itself is a fine recipe
    for call in (lambda: parse_recipe(str(path), name="cli"), lambda: TrainingRecipe.from_yaml(str(path))):
        with pytest.raises(RecipeError) as info:
            call()
        assert f"got the text {str(path)!r}" in info.value.cause
        assert "never read as a file path" in info.value.cause
    with pytest.raises(RecipeError, match="a recipe is YAML text, got PosixPath"):
        TrainingRecipe.from_yaml(path)


def test_one_line_flow_recipe_is_text():
    recipe = parse_recipe("{messages: [{role: user, content: hi, stream: low_level}]}")
    assert recipe.messages[0].content == "hi"


# ---------------------------------------------------------------------------------------------
# YAML errors with line and column


@pytest.mark.parametrize("text,line,column,cause", [
    ("messages: [\n  - {role: user\n", 2, 3, "expected the node content, but found '-' (while parsing a flow node)"),
    ("messages:\n\t- x\n", 2, 1, "found character '\\t' that cannot start any token"),
    ("messages: !!python/object/apply:os.system ['echo hi']\n", 1, 11,
     "could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'"),
    ("blend:\n  a:\n    weight: " + "9" * 5000 + "\n", 3, 13,
     "cannot read this value: Exceeds the limit (4300 digits) for integer string conversion"),
    ("messages: 2001-13-45\n", 1, 11, "cannot read this value: month must be in 1..12"),
    ("messages: x\nroute: \x00\n", 2, 8, "the character #x0000 is not allowed in YAML"),
    ("? [a, b]\n: x\n", 1, 3, "found unhashable key"),
    ("a: 1\n---\nb: 2\n", 2, 1, "expected a single document in the stream"),
])
def test_yaml_errors_name_line_and_column(text, line, column, cause):
    err = _error(text)
    assert (err.line, err.column) == (line, column)
    assert cause in err.cause
    assert f"line {line}, column {column}: " in str(err)


def test_not_utf8_and_not_a_mapping():
    assert "not UTF-8 text (byte 10: invalid start byte)" in _error(b"messages: \xff\n").cause
    assert _error("").cause == "Recipe YAML must contain a mapping at the top level, got NoneType"
    assert _error("- a\n- b\n").cause == "Recipe YAML must contain a mapping at the top level, got list"


def test_rule_errors_name_the_recipe_and_quote_values_short():
    err = _error("blend:\n  a:\n    weight: " + "9" * 400 + "\n    messages: [{role: user, content: x, "
                 "stream: low_level}]\n")
    assert err.cause == "Blend component 'a': weight must be a finite number, got a 1329-bit integer"
    assert _error("{1: x, foo: y}\n").cause == "TrainingRecipe got unexpected key(s) ['1', 'foo']"
    err = _error("messages:\n  - {role: user, content: '${b}', stream: low_level}\n"
                 "bindings: {b: 'active_at(t, style=x)'}\n")
    assert err.cause == "binding 'b': Unknown language style: 'x' (in 'active_at(t, style=x)')"


# ---------------------------------------------------------------------------------------------
# Bounds: aliases, values, depth, size


def test_billion_laughs_is_refused_before_expanding():
    text = billion_laughs()
    assert len(text) < 700
    tracemalloc.start()
    try:
        err = _error(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (err.line, err.column) == (5, 36)
    assert err.cause.startswith("found the YAML anchor &l0: anchors and aliases are not allowed in a recipe")
    assert peak < 5 << 20


@pytest.mark.parametrize("text,word", [
    ("messages: *x\n", "alias *x"),
    ("base: &b {role: user}\nmessages: [{<<: *b, content: x, stream: low_level}]\n", "anchor &b"),
])
def test_aliases_and_merge_keys_are_refused(text, word):
    assert f"found the YAML {word}: anchors and aliases are not allowed" in _error(text).cause


def test_too_many_values():
    err = _error("messages: [" + ",".join(["1"] * (MAX_RECIPE_NODES + 10)) + "]\n")
    assert err.cause.startswith(f"the recipe holds more than {MAX_RECIPE_NODES:,} YAML values")
    assert (err.line, err.column) == (1, 12 + 2 * (MAX_RECIPE_NODES - 3))  # the mapping, its key and the list count


@pytest.mark.parametrize("text", [
    "[" * 200_000 + "]" * 200_000,
    "messages:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(MAX_RECIPE_DEPTH + 5)),
])
def test_too_deep_is_refused_without_recursion_error(text):
    err = _error(text)
    assert err.cause.startswith(f"the recipe nests lists and mappings more than {MAX_RECIPE_DEPTH} deep")


def test_depth_and_values_of_a_real_recipe_pass():
    root = lerobot_dataset("language")
    for path in sorted((root / "expected" / "recipes").glob("*.yaml")):
        load_recipe(path)


def test_too_large_text_is_refused_unparsed():
    text = "# " + "x" * MAX_RECIPE_BYTES + "\n" + GOOD
    assert _error(text).cause == (f"the recipe is {len(text):,} bytes, more than the limit of "
                                  f"{MAX_RECIPE_BYTES:,} (LeRobot's recipes are under 4 KB)")


# ---------------------------------------------------------------------------------------------
# Reading a recipe file


def test_read_recipe_file_refuses_what_is_not_a_small_regular_file(tmp_path):
    missing = str(tmp_path / "missing.yaml")
    with pytest.raises(RecipeError, match="the recipe file does not exist") as info:
        read_recipe_file(missing)
    assert info.value.recipe == missing
    with pytest.raises(RecipeError, match=r"not a regular file \(it is a folder\)"):
        read_recipe_file(str(tmp_path))
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(RecipeError, match=r"not a regular file \(it is a FIFO, device or socket\)"):
        read_recipe_file(str(fifo))  # a FIFO would block a reader forever
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_RECIPE_BYTES + 1))
    with pytest.raises(RecipeError, match="the recipe file is 1,048,577 bytes, more than the limit"):
        read_recipe_file(str(big))


def test_errors_pickle_and_transform_refuses_bad_recipe_at_construction():
    err = _error(billion_laughs())
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.line, back.column) == (RecipeError, str(err), 5, 36)
    with pytest.raises(RecipeError, match="recipe laughs.yaml: line 5, column 36: found the YAML anchor &l0"):
        RenderTrainingSamples(billion_laughs(), {}, recipe_name="laughs.yaml")


# ---------------------------------------------------------------------------------------------
# The command


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("lang") / "out"
    assert run_import(lerobot_dataset("language"), out) == 0
    return out


@pytest.mark.parametrize("case", ["path", "laughs", "yaml", "fifo"])
def test_render_command_refuses_hostile_recipes(imported, tmp_path, capsys, case):
    from pipelines.render_recipes import run
    recipe = tmp_path / "recipe.yaml"
    other = tmp_path / "other.yaml"
    other.write_text(GOOD)
    if case == "fifo":
        os.mkfifo(recipe)
    else:
        recipe.write_text({"path": str(other), "laughs": billion_laughs(), "yaml": "messages: [\n"}[case])
    samples = tmp_path / "samples"
    assert run(["--recipe", str(recipe), "--input", str(imported), "--output", str(samples),
                "--runner", "FnApiRunner"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: [recipe] recipe {recipe}: ")
    assert {"path": "never read as a file path", "laughs": "line 5, column 36: found the YAML anchor &l0",
            "yaml": "line 2, column 1: expected the node content", "fifo": "not a regular file"}[case] in err
    assert not samples.exists()
