"""LeRobot training recipes: the model (`TrainingRecipe`, `MessageTurn`), its rules, and reading it safely.

A recipe is either a message recipe (chat `messages` whose `${name}` placeholders are filled from
`bindings`, resolver expressions over the frame's language rows) or a `blend` of weighted message
recipes. `TrainingRecipe.from_dict` checks LeRobot's recipe rules and compiles each turn's text into a
template once, so rendering a frame only looks values up.

Recipe text is YAML, and YAML can be made hostile: a few hundred bytes of anchors and aliases expand
into gigabytes, and deep nesting exhausts the stack. `parse_recipe` therefore reads at most
`MAX_RECIPE_BYTES`, refuses anchors and aliases, and bounds the number of values and the nesting depth
while the YAML is composed (before anything is built from it). Recipe text is only ever text:
`load_recipe` is the one function that reads a file, and only the file it is given.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

import yaml

from transforms.base import storage
from transforms.base.errors import quote
from transforms.language.errors import RecipeError
from transforms.language.resolvers import DEFAULT_BINDINGS, ResolverSpec, parse_resolver

MESSAGE_ROLES = ("user", "assistant", "system", "tool")
MESSAGE_STREAMS = ("high_level", "low_level")
ROUTES = ("vqa",)
PLACEHOLDER_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: A recipe is at most this many bytes. LeRobot's own recipes are under 4 KB; the bound keeps a hostile
#: recipe from costing more than a few seconds and megabytes to refuse.
MAX_RECIPE_BYTES = 1 << 20
#: At most this many YAML values (scalars, lists, mappings) in a recipe; LeRobot's largest has ~150.
MAX_RECIPE_NODES = 20_000
#: At most this many levels of nested lists and mappings; a LeRobot recipe nests 7 deep.
MAX_RECIPE_DEPTH = 32

_TURN_KEYS = frozenset({"role", "content", "stream", "target", "if_present", "tool_calls_from"})
_RECIPE_KEYS = frozenset({"messages", "bindings", "blend", "weight", "route"})


# --------------------------------------------------------------------------------------------
# Templates


def _placeholders(content: Any) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return PLACEHOLDER_RE.findall(content)
    names: list[str] = []
    for block in content:
        for value in block.values():
            if isinstance(value, str):
                names.extend(PLACEHOLDER_RE.findall(value))
    return names


def _template(text: str) -> tuple[Any, ...]:
    """`"a ${x} b"` -> ("a ", ("x",), " b"): literals and one-tuples naming bindings."""
    parts: list[Any] = []
    pos = 0
    for m in PLACEHOLDER_RE.finditer(text):
        if m.start() > pos:
            parts.append(text[pos:m.start()])
        parts.append((m.group(1),))
        pos = m.end()
    if pos < len(text):
        parts.append(text[pos:])
    return tuple(parts)


def _unknown_keys(data: Mapping[Any, Any], allowed: frozenset) -> list[str]:
    """The keys of `data` not in `allowed`, as sorted strings (YAML keys may be numbers or null)."""
    return sorted(str(k) for k in data if k not in allowed)


# --------------------------------------------------------------------------------------------
# Message turns


@dataclass(frozen=True)
class MessageTurn:
    """One chat turn of a recipe (LeRobot `MessageTurn`)."""

    role: str
    stream: str
    content: Union[str, tuple[dict[str, Any], ...], None] = None
    target: bool = False
    if_present: Optional[str] = None
    tool_calls_from: Optional[str] = None

    @classmethod
    def from_dict(cls, data: Any) -> "MessageTurn":
        """A turn from its parsed YAML mapping, checked with LeRobot's rules.

        Args:
            data: the mapping (`role`, `stream`, `content`, `target`, `if_present`, `tool_calls_from`).

        Returns:
            The turn; a broken one raises `RecipeError`.
        """
        if not isinstance(data, Mapping):
            raise RecipeError(f"A message turn must be a mapping, got {quote(data)}")
        unknown = _unknown_keys(data, _TURN_KEYS)
        if unknown:
            raise RecipeError(f"MessageTurn got unexpected key(s) {unknown}")
        role, stream = _turn_role_and_stream(data)
        content = _turn_content(data.get("content"), data.get("tool_calls_from"))
        target = data.get("target", False)
        if not isinstance(target, bool):
            raise RecipeError(f"MessageTurn.target must be true or false, got {quote(target)}")
        for key in ("if_present", "tool_calls_from"):
            if data.get(key) is not None and not isinstance(data.get(key), str):
                raise RecipeError(f"MessageTurn.{key} must name a binding, got {quote(data.get(key))}")
        return cls(role=role, stream=stream, content=content, target=target,
                   if_present=data.get("if_present"), tool_calls_from=data.get("tool_calls_from"))

    def referenced_bindings(self) -> list[str]:
        """Every binding the turn names: `if_present`, `tool_calls_from` and its placeholders."""
        names = [n for n in (self.if_present, self.tool_calls_from) if n is not None]
        return names + _placeholders(self.content)


def _turn_role_and_stream(data: Mapping[str, Any]) -> tuple[str, str]:
    role = data.get("role")
    if role not in MESSAGE_ROLES:
        raise RecipeError(f"Unsupported message role: {quote(role)}")
    stream = data.get("stream")
    if stream is None:
        raise RecipeError(f"MessageTurn(role={role!r}) is missing a stream — every turn must declare one "
                          f"of {sorted(MESSAGE_STREAMS)}.")
    if stream not in MESSAGE_STREAMS:
        raise RecipeError(f"Unsupported message stream: {quote(stream)}")
    return role, stream


def _turn_content(content: Any, tool_calls_from: Any) -> Union[str, tuple[dict[str, Any], ...], None]:
    """A turn's content: a string, HF-style blocks (dicts with a `type`), or None with tool_calls_from."""
    if content is None and tool_calls_from is None:
        raise RecipeError("MessageTurn.content is required unless tool_calls_from is set.")
    if content is not None and not isinstance(content, (str, list)):
        raise RecipeError("MessageTurn.content must be a string, a list of HF-style blocks, or None.")
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict) or "type" not in block:
                raise RecipeError("Multimodal content blocks must be HF-style dictionaries with a type key.")
        return tuple(copy.deepcopy(block) for block in content)
    return content


@dataclass(frozen=True)
class _CompiledTurn:
    role: str
    stream: str
    target: bool
    if_present: Optional[str]
    tool_calls_from: Optional[str]
    text: Optional[tuple[Any, ...]]            # template of a string content
    blocks: Optional[tuple[tuple[tuple[str, Any], ...], ...]]  # (key, template-or-value) per block


def _compile_turn(turn: MessageTurn) -> _CompiledTurn:
    text = blocks = None
    if isinstance(turn.content, str):
        text = _template(turn.content)
    elif turn.content is not None:
        blocks = tuple(tuple((k, _template(v) if isinstance(v, str) else v) for k, v in block.items())
                       for block in turn.content)
    return _CompiledTurn(turn.role, turn.stream, turn.target, turn.if_present, turn.tool_calls_from, text, blocks)


# --------------------------------------------------------------------------------------------
# Recipes


@dataclass
class TrainingRecipe:
    """A message recipe (`messages` + `bindings`) or a blend of weighted message recipes.

    `name` is the blend component's key (None at top level); `weight` and `route` only mean
    something inside a blend. `specs` (the bindings to resolve, in LeRobot's order) and `turns` (the
    compiled templates) are derived when the recipe is loaded.
    """

    messages: Optional[tuple[MessageTurn, ...]] = None
    bindings: dict[str, str] = field(default_factory=dict)
    blend: Optional[dict[str, "TrainingRecipe"]] = None
    weight: Optional[float] = None
    route: Optional[str] = None
    name: Optional[str] = None
    specs: tuple[tuple[str, ResolverSpec], ...] = field(default=(), repr=False, compare=False)
    turns: tuple[_CompiledTurn, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Any, *, name: Optional[str] = None, in_blend: bool = False) -> "TrainingRecipe":
        """Build and check a recipe from parsed YAML, with LeRobot's rules.

        Args:
            data: the recipe mapping (or a blend component's).
            name: the blend component's key (None at top level).
            in_blend: whether `data` is a blend component (where `route` is allowed and `blend` is not).

        Returns:
            The recipe, its bindings parsed and its turns compiled; a broken one raises `RecipeError`.
        """
        where = f"Blend component {name!r}: " if name is not None else ""
        has_blend = _check_recipe_shape(data, where)
        weight, route = _weight_and_route(data, where, in_blend)
        bindings = _bindings(data, where)
        if has_blend:
            if bindings:
                raise RecipeError("A blend recipe cannot declare bindings; set them on its components.")
            blend = _blend_components(data["blend"], in_blend)
            return cls(blend=blend, weight=weight, route=route, name=name)
        messages = _messages(data["messages"], bindings, where)
        return cls(messages=messages, bindings=bindings, weight=weight, route=route, name=name,
                   specs=_binding_specs(messages, bindings, where), turns=tuple(_compile_turn(t) for t in messages))

    @classmethod
    def from_yaml(cls, text: Union[str, bytes], *, name: str = "<recipe text>") -> "TrainingRecipe":
        """A recipe from YAML text (never a path: `load_recipe` reads a file). See `parse_recipe`."""
        return parse_recipe(text, name=name)

    @property
    def components(self) -> list["TrainingRecipe"]:
        """The blend's components, or the recipe itself when it is not a blend."""
        return list(self.blend.values()) if self.blend is not None else [self]


def _check_recipe_shape(data: Any, where: str) -> bool:
    """A mapping of known keys with exactly one of `messages` / `blend`; True when it is a blend."""
    if not isinstance(data, Mapping):
        raise RecipeError(f"{where}a recipe must be a mapping, got {type(data).__name__}")
    unknown = _unknown_keys(data, _RECIPE_KEYS)
    if unknown:
        raise RecipeError(f"{where}TrainingRecipe got unexpected key(s) {unknown}")
    has_messages = data.get("messages") is not None
    has_blend = data.get("blend") is not None
    if has_messages and has_blend:
        raise RecipeError(f"{where}TrainingRecipe must set only one of messages or blend.")
    if not has_messages and not has_blend:
        raise RecipeError(f"{where}TrainingRecipe must set one of messages or blend.")
    return has_blend


def _is_finite_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def _weight_and_route(data: Mapping[str, Any], where: str, in_blend: bool) -> tuple[Any, Optional[str]]:
    weight = data.get("weight")
    if weight is not None and not _is_finite_number(weight):
        raise RecipeError(f"{where}weight must be a finite number, got {quote(weight)}")
    route = data.get("route")
    if route is not None:
        if route not in ROUTES:
            raise RecipeError(f"{where}unsupported route {quote(route)} (the only route is 'vqa')")
        if not in_blend:
            raise RecipeError("route is only allowed on a blend component")
    return weight, route


def _bindings(data: Mapping[str, Any], where: str) -> dict[str, str]:
    bindings = data.get("bindings") or {}
    if not isinstance(bindings, Mapping) or not all(isinstance(k, str) for k in bindings):
        raise RecipeError(f"{where}bindings must map names to resolver expressions")
    return dict(bindings)


def _blend_components(blend_data: Any, in_blend: bool) -> dict[str, TrainingRecipe]:
    """A blend's components, each a message recipe with a positive weight."""
    if not isinstance(blend_data, Mapping) or not blend_data:
        raise RecipeError("Blend recipes must contain at least one component.")
    blend: dict[str, TrainingRecipe] = {}
    for comp_name, comp in blend_data.items():
        if in_blend or (isinstance(comp, Mapping) and comp.get("blend") is not None):
            raise RecipeError(f"Blend component {comp_name!r} cannot itself define a blend.")
        if isinstance(comp, Mapping) and comp.get("messages") is None:
            raise RecipeError(f"Blend component {comp_name!r} must define messages.")
        component = TrainingRecipe.from_dict(comp, name=str(comp_name), in_blend=True)
        if component.weight is None:
            raise RecipeError(f"Blend component {comp_name!r} must define weight.")
        if component.weight <= 0:
            raise RecipeError(f"Blend component {comp_name!r} must have a positive weight.")
        blend[str(comp_name)] = component
    return blend


def _messages(raw_messages: Any, bindings: Mapping[str, str], where: str) -> tuple[MessageTurn, ...]:
    """The turns of a message recipe: each one valid, every binding they name known, one supervised."""
    if not isinstance(raw_messages, list):
        raise RecipeError(f"{where}messages must be a list of turns")
    try:
        messages = tuple(MessageTurn.from_dict(turn) for turn in raw_messages)
    except RecipeError as exc:
        raise RecipeError(f"{where}{exc.cause}") from None
    known = set(DEFAULT_BINDINGS) | set(bindings) | {"task"}
    for turn in messages:
        missing = sorted(set(turn.referenced_bindings()) - known)
        if missing:
            raise RecipeError(f"{where}MessageTurn references unknown binding(s): {missing}")
    if not (any(t.target for t in messages) or any(t.stream == "low_level" for t in messages)):
        raise RecipeError(f"{where}Message recipes must contain at least one supervised turn — either "
                          "``target: true`` (text CE) or ``stream: low_level`` (flow/action loss).")
    return messages


def _binding_specs(messages: Sequence[MessageTurn], bindings: Mapping[str, str],
                   where: str) -> tuple[tuple[str, ResolverSpec], ...]:
    """The bindings to resolve for each frame: the declared ones plus the defaults the turns name, in
    LeRobot's order (`{**DEFAULT_BINDINGS, **declared}`)."""
    needed = {n for turn in messages for n in turn.referenced_bindings()} | set(bindings)
    specs = []
    for bname, expression in {**DEFAULT_BINDINGS, **bindings}.items():
        if bname in needed:
            try:
                specs.append((bname, parse_resolver(expression)))
            except RecipeError as exc:
                raise RecipeError(f"{where}binding {bname!r}: {exc.cause}") from None
    return tuple(specs)


# --------------------------------------------------------------------------------------------
# Reading recipe text: a bounded, safe YAML loader


def _yaml_limit(problem: str, mark: Any) -> yaml.MarkedYAMLError:
    return yaml.composer.ComposerError(None, None, problem, mark)


class _RecipeLoader(yaml.SafeLoader):
    """PyYAML's safe loader with three refusals made while the YAML is composed, so nothing is built
    from a hostile recipe: anchors and aliases (`&a` / `*a`, the billion-laughs expansion), more than
    `MAX_RECIPE_NODES` values, and nesting deeper than `MAX_RECIPE_DEPTH`. A value that cannot be
    constructed (a 5,000-digit integer, a bad date) is reported at its position."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            kind = "alias *" if isinstance(event, yaml.AliasEvent) else "anchor &"
            raise _yaml_limit(f"found the YAML {kind}{event.anchor}: anchors and aliases are not allowed in a "
                              "recipe (a few of them can expand into gigabytes); write the value out in full",
                              event.start_mark)
        self._nodes += 1
        if self._nodes > MAX_RECIPE_NODES:
            raise _yaml_limit(f"the recipe holds more than {MAX_RECIPE_NODES:,} YAML values (the limit; "
                              "LeRobot's recipes hold a few hundred)", event.start_mark)
        if self._depth >= MAX_RECIPE_DEPTH:
            raise _yaml_limit(f"the recipe nests lists and mappings more than {MAX_RECIPE_DEPTH} deep (the limit; "
                              "LeRobot's recipes nest 7 deep)", event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(None, None, f"cannot read this value: {exc}",
                                                    node.start_mark) from None


def _decode(text: Union[str, bytes], name: str) -> str:
    """The recipe as a str, refused (naming the recipe) when larger than MAX_RECIPE_BYTES or not UTF-8."""
    if not isinstance(text, (str, bytes)):
        raise RecipeError(f"a recipe is YAML text, got {type(text).__name__} (load_recipe reads a file)",
                          recipe=name)
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_RECIPE_BYTES:
        raise RecipeError(f"the recipe is {size:,} bytes, more than the limit of {MAX_RECIPE_BYTES:,} "
                          "(LeRobot's recipes are under 4 KB)", recipe=name)
    if isinstance(text, str):
        return text
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(f"the recipe is not UTF-8 text (byte {exc.start}: {exc.reason})", recipe=name) from None


def _reader_error(exc: yaml.reader.ReaderError, text: str, name: str) -> RecipeError:
    """A character YAML does not allow (a NUL, a control character), at its line and column."""
    position = exc.position
    line = text.count("\n", 0, position) + 1
    column = position - text.rfind("\n", 0, position)
    character = exc.character if isinstance(exc.character, int) else ord(exc.character)
    return RecipeError(f"the character #x{character:04x} is not allowed in YAML ({exc.reason})", recipe=name,
                       line=line, column=column)


def _yaml_error(exc: yaml.YAMLError, name: str) -> RecipeError:
    """A YAML error as a RecipeError with the 1-based line and column of the problem."""
    mark = getattr(exc, "problem_mark", None)
    if not isinstance(exc, yaml.MarkedYAMLError) or mark is None:
        return RecipeError(f"not valid YAML: {exc}", recipe=name)
    cause = exc.problem or "not valid YAML"
    context_mark = exc.context_mark
    if exc.context:
        cause += f" ({exc.context}"
        if context_mark is not None and (context_mark.line, context_mark.column) != (mark.line, mark.column):
            cause += f" at line {context_mark.line + 1}, column {context_mark.column + 1}"
        cause += ")"
    return RecipeError(cause, recipe=name, line=mark.line + 1, column=mark.column + 1)


def load_yaml(text: Union[str, bytes], *, name: str = "<recipe text>") -> Any:
    """Parse recipe YAML with the bounded safe loader.

    Args:
        text: the YAML text (str, or UTF-8 bytes).
        name: the recipe's name for messages (its file, or `<recipe text>`).

    Returns:
        The parsed value. Every problem (size, encoding, YAML syntax with its line and column,
        anchors/aliases, too many values, too deep) raises `RecipeError` naming the recipe.
    """
    decoded = _decode(text, name)
    try:
        loader = _RecipeLoader(decoded)  # checks every character first
    except yaml.reader.ReaderError as exc:
        raise _reader_error(exc, decoded, name) from None
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, name) from None
    finally:
        loader.dispose()


def parse_recipe(text: Union[str, bytes], *, name: str = "<recipe text>") -> TrainingRecipe:
    """A recipe from its YAML text: bounded safe parsing (`load_yaml`), then LeRobot's recipe rules.

    Args:
        text: the YAML text. It is never taken for a path, whatever it looks like.
        name: the recipe's name for messages (its file, or `<recipe text>`).

    Returns:
        The recipe. Every problem raises `RecipeError` naming the recipe and the cause.
    """
    data = load_yaml(text, name=name)
    if isinstance(data, str):
        raise RecipeError(f"Recipe YAML must contain a mapping at the top level, got the text {quote(data)} "
                          "(recipe text is never read as a file path: name the file with --recipe FILE, or "
                          "call load_recipe(path))", recipe=name)
    if not isinstance(data, dict):
        raise RecipeError(f"Recipe YAML must contain a mapping at the top level, got {type(data).__name__}",
                          recipe=name)
    try:
        return TrainingRecipe.from_dict(data)
    except RecipeError as exc:
        raise exc.with_recipe(name) from None


def read_recipe_file(uri: str) -> str:
    """The text of the recipe file at `uri` (a local path or an fsspec URL), read with bounds.

    Args:
        uri: the file the caller named explicitly (the command's `--recipe FILE`).

    Returns:
        The file's text. A file that is missing, not a regular file (a folder, FIFO or device: reading
        those would block or never end), larger than MAX_RECIPE_BYTES or not UTF-8 raises `RecipeError`.
    """
    try:
        fs, path = storage.filesystem(uri)
        info = storage.with_retries(lambda: fs.info(path))
    except FileNotFoundError:
        raise RecipeError("the recipe file does not exist", recipe=uri) from None
    except (OSError, ValueError, ImportError) as exc:
        raise RecipeError(f"cannot open the recipe file: {exc}", recipe=uri) from None
    if info.get("type") != "file":
        what = {"directory": "a folder"}.get(info.get("type"), "a FIFO, device or socket")
        raise RecipeError(f"the recipe path is not a regular file (it is {what}): name the recipe's YAML file",
                          recipe=uri)
    size = info.get("size")
    if size is not None and size > MAX_RECIPE_BYTES:
        raise RecipeError(f"the recipe file is {size:,} bytes, more than the limit of {MAX_RECIPE_BYTES:,} "
                          "(LeRobot's recipes are under 4 KB)", recipe=uri)

    def read() -> bytes:
        with fs.open(path, "rb") as f:
            return f.read(MAX_RECIPE_BYTES + 1)

    try:
        data = storage.with_retries(read)
    except OSError as exc:
        raise RecipeError(f"cannot read the recipe file: {exc}", recipe=uri) from None
    return _decode(data, uri)


def load_recipe(uri: Union[str, Any]) -> TrainingRecipe:
    """The recipe in the YAML file at `uri` (a local path, `pathlib.Path` or fsspec URL).

    Args:
        uri: the file to read (`read_recipe_file`'s bounds apply).

    Returns:
        The recipe; every problem raises `RecipeError` naming the file.
    """
    uri = str(uri)
    return parse_recipe(read_recipe_file(uri), name=uri)
