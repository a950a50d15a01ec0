"""LeRobot training recipes: YAML model, language resolvers and chat-message rendering.

This reproduces LeRobot HEAD's `configs/recipe.py`, `datasets/language_render.py` and
`processor/render_messages_processor.py` (`RenderMessagesStep`) without importing LeRobot, so
that an importer can render every frame of a dataset the way a LeRobot training loader would.
The recorded outputs in `corpus/lerobot/language/expected/` are the ground truth; the points
where behaviour was decided from them rather than from the notes are marked "(recorded)".

Two entry points render:

* `render_sample` — one frame, straight from Python rows; a line-by-line model of LeRobot's
  function, kept simple so it can serve as the oracle for the fast path.
* `render_episode` — every frame of one episode, from canonical Arrow columns (or Python rows).
  It converts only what it needs to Python (one persistent list per episode, the event lists of
  frames that have events) and answers persistent resolvers by bisection over per-episode tables.
  Its output equals `render_sample`'s frame by frame.

Rows are dicts with LeRobot's keys; `tool_calls` holds parsed JSON objects (the canonical column
stores JSON text; `language_columns.rows_to_python` parses it), as LeRobot's HF loader yields.
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.language import columns as lc

Row = dict[str, Any]
Rendered = dict[str, list[Any]]
RenderMode = Literal["sample", "sample_task", "processor"]

MESSAGE_ROLES = ("user", "assistant", "system", "tool")
MESSAGE_STREAMS = ("high_level", "low_level")
ROUTES = ("vqa",)

#: LeRobot's `DEFAULT_BINDINGS`, in its order (the order bindings are resolved in).
DEFAULT_BINDINGS: dict[str, str] = {
    "subtask": "active_at(t, style=subtask)",
    "memory": "active_at(t, style=memory)",
    "plan": "active_at(t, style=plan)",
    "speech": "emitted_at(t, role=assistant, tool_name=say)",
    "interjection": "emitted_at(t, style=interjection)",
    "vqa": "emitted_at(t, style=vqa, role=assistant)",
    "vqa_query": "emitted_at(t, style=vqa, role=user)",
}

PLACEHOLDER_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
EMITTED_AT_TOLERANCE_S = 0.1
_RESOLVER_RE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\((?P<args>.*)\)$")
_RESOLVER_KWARGS = {
    "active_at": ("style", "role", "tool_name", "camera"),
    "emitted_at": ("style", "role", "tool_name", "camera"),
    "nth_prev": ("style", "offset", "role", "tool_name", "camera"),
    "nth_next": ("style", "offset", "role", "tool_name", "camera"),
}


class RecipeError(ValueError):
    """A recipe breaks LeRobot's recipe rules (raised when it is loaded)."""


class RenderError(ValueError):
    """Rendering a frame raised (as LeRobot would); `index` is the frame's global index."""

    def __init__(self, message: str, *, index: int, timestamp: float, cause: str) -> None:
        super().__init__(message)
        self.index = index
        self.timestamp = timestamp
        self.cause = cause


# --------------------------------------------------------------------------------------------
# Resolvers (LeRobot semantics and error messages)


def _validate_persistent_resolver(name: str, style: Optional[str]) -> None:
    if style is None:
        raise ValueError(f"{name} requires a persistent style.")
    if lc.column_for_style(style) != lc.LANGUAGE_PERSISTENT:
        raise ValueError(f"{name} cannot be used with event-only style {style!r}.")


def _row_has_tool_name(row: Row, tool_name: str) -> bool:
    for call in row.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and function.get("name") == tool_name:
            return True
    return False


def _matches(row: Row, style: Optional[str], role: Optional[str], tool_name: Optional[str],
             camera: Optional[str]) -> bool:
    return ((style is None or row.get("style") == style)
            and (role is None or row.get("role") == role)
            and (tool_name is None or _row_has_tool_name(row, tool_name))
            and (camera is None or row.get("camera") == camera))


def _ambiguous(count: int, style: Optional[str], role: Optional[str], tool_name: Optional[str],
               camera: Optional[str]) -> ValueError:
    return ValueError(f"Ambiguous resolver for style={style!r} role={role!r} tool_name={tool_name!r} "
                      f"camera={camera!r}: {count} matching rows. Add a selector that distinguishes them.")


def _select_one(rows: Sequence[Row], style, role, tool_name, camera) -> Optional[Row]:
    if not rows:
        return None
    if len(rows) > 1:
        raise _ambiguous(len(rows), style, role, tool_name, camera)
    return rows[0]


def _ts(row: Row) -> float:
    return float(row["timestamp"])


def _sort_key(row: Row) -> tuple[float, str, str]:
    ts = row.get("timestamp")
    return (float(ts) if ts is not None else 0.0, row.get("style") or "", row.get("role") or "")


def active_at(t: float, *, persistent: Sequence[Row], style: Optional[str] = None, role: Optional[str] = None,
              tool_name: Optional[str] = None, camera: Optional[str] = None) -> Optional[Row]:
    """The persistent row of `style` whose timestamp is the latest one <= t."""
    _validate_persistent_resolver("active_at", style)
    matches = [r for r in persistent if _matches(r, style, role, tool_name, camera) and _ts(r) <= t]
    if not matches:
        return None
    latest = max(_ts(r) for r in matches)
    return _select_one([r for r in matches if _ts(r) == latest], style, role, tool_name, camera)


def emitted_at(t: float, *, persistent: Sequence[Row], events: Sequence[Row], style: Optional[str] = None,
               role: Optional[str] = None, tool_name: Optional[str] = None,
               camera: Optional[str] = None) -> Optional[Row]:
    """A persistent row within 0.1 s of t, or the frame's own event row; one or None."""
    if lc.column_for_style(style) == lc.LANGUAGE_PERSISTENT:
        matches = [r for r in persistent if _matches(r, style, role, tool_name, camera)
                   and abs(_ts(r) - t) <= EMITTED_AT_TOLERANCE_S]
    else:
        matches = [r for r in events if _matches(r, style, role, tool_name, camera)]
    return _select_one(matches, style, role, tool_name, camera)


def nth_prev(t: float, *, persistent: Sequence[Row], style: Optional[str] = None, offset: int = 1,
             role: Optional[str] = None, tool_name: Optional[str] = None,
             camera: Optional[str] = None) -> Optional[Row]:
    """The persistent row `offset` places before the one active at t."""
    return _nth_relative("nth_prev", t, persistent, style, -offset, role, tool_name, camera)


def nth_next(t: float, *, persistent: Sequence[Row], style: Optional[str] = None, offset: int = 1,
             role: Optional[str] = None, tool_name: Optional[str] = None,
             camera: Optional[str] = None) -> Optional[Row]:
    """The persistent row `offset` places after the one active at t."""
    return _nth_relative("nth_next", t, persistent, style, offset, role, tool_name, camera)


def _nth_target(anchor: Optional[int], offset: int, count: int) -> Optional[int]:
    target = (offset - 1 if offset > 0 else None) if anchor is None else anchor + offset
    if target is None or target < 0 or target >= count:
        return None
    return target


def _nth_relative(name: str, t: float, persistent: Sequence[Row], style, offset: int, role, tool_name,
                  camera) -> Optional[Row]:
    _validate_persistent_resolver(name, style)
    if abs(offset) < 1:
        raise ValueError(f"{name} offset must be non-zero.")
    rows = sorted((r for r in persistent if _matches(r, style, role, tool_name, camera)), key=_sort_key)
    if not rows:
        return None
    anchor = None
    for i, row in enumerate(rows):
        if _ts(row) <= t:
            anchor = i
        else:
            break
    target = _nth_target(anchor, offset, len(rows))
    return None if target is None else rows[target]


RESOLVERS = {"active_at": active_at, "emitted_at": emitted_at, "nth_prev": nth_prev, "nth_next": nth_next}


@dataclass(frozen=True)
class ResolverSpec:
    """A parsed binding expression such as `nth_prev(style=memory, offset=1)`."""

    fn: str
    style: Optional[str] = None
    role: Optional[str] = None
    tool_name: Optional[str] = None
    camera: Optional[str] = None
    offset: int = 1
    #: True when the answer comes from the frame's own event rows (no time lookup).
    on_events: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_events",
                           self.fn == "emitted_at" and lc.column_for_style(self.style) == lc.LANGUAGE_EVENTS)

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"style": self.style, "role": self.role, "tool_name": self.tool_name,
                               "camera": self.camera}
        if self.fn in ("nth_prev", "nth_next"):
            out["offset"] = self.offset
        return out

    def resolve(self, t: float, persistent: Sequence[Row], events: Sequence[Row]) -> Optional[Row]:
        if self.fn == "emitted_at":
            return emitted_at(t, persistent=persistent, events=events, **self.kwargs())
        return RESOLVERS[self.fn](t, persistent=persistent, **self.kwargs())


def parse_resolver(expression: str) -> ResolverSpec:
    """Parse LeRobot's `name(t, key=value, ...)` syntax and check it as far as data allows.

    Like LeRobot: a bare `t` is ignored, quotes around values are stripped, `offset` is an int,
    arguments split on commas. Checked here rather than on the first frame (LeRobot would raise
    on every frame anyway): the resolver name, the keyword names, the style, a persistent style
    for `active_at`/`nth_*`, a non-zero offset.
    """
    if not isinstance(expression, str):
        raise RecipeError(f"A binding must be a resolver expression string, got {expression!r}")
    match = _RESOLVER_RE.match(expression.strip())
    if match is None:
        raise RecipeError(f"Invalid resolver expression: {expression!r}")
    name = match.group("name")
    if name not in RESOLVERS:
        raise RecipeError(f"Unknown language resolver: {name!r}")
    kwargs: dict[str, Any] = {}
    args = match.group("args")
    for part in (p.strip() for p in args.split(",")) if args.strip() else ():
        if not part or part == "t":
            continue
        if "=" not in part:
            raise RecipeError(f"Invalid resolver argument: {part!r}")
        key, value = (item.strip() for item in part.split("=", 1))
        if key not in _RESOLVER_KWARGS[name]:
            raise RecipeError(f"{name}() got an unexpected keyword argument {key!r} in {expression!r}")
        if key == "offset":
            try:
                kwargs[key] = int(value)
            except ValueError:
                raise RecipeError(f"Invalid offset {value!r} in {expression!r}") from None
        else:
            kwargs[key] = value.strip("\"'")
    try:
        spec = ResolverSpec(fn=name, **kwargs)
        if name != "emitted_at":
            _validate_persistent_resolver(name, spec.style)
            if name != "active_at" and abs(spec.offset) < 1:
                raise ValueError(f"{name} offset must be non-zero.")
    except ValueError as exc:
        raise RecipeError(f"{exc} (in {expression!r})") from None
    return spec


# --------------------------------------------------------------------------------------------
# Recipe model


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
        if not isinstance(data, Mapping):
            raise RecipeError(f"A message turn must be a mapping, got {data!r}")
        allowed = {"role", "content", "stream", "target", "if_present", "tool_calls_from"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise RecipeError(f"MessageTurn got unexpected key(s) {unknown}")
        role = data.get("role")
        if role not in MESSAGE_ROLES:
            raise RecipeError(f"Unsupported message role: {role!r}")
        stream = data.get("stream")
        if stream is None:
            raise RecipeError(f"MessageTurn(role={role!r}) is missing a stream — every turn must declare one "
                              f"of {sorted(MESSAGE_STREAMS)}.")
        if stream not in MESSAGE_STREAMS:
            raise RecipeError(f"Unsupported message stream: {stream!r}")
        content = data.get("content")
        tool_calls_from = data.get("tool_calls_from")
        if content is None and tool_calls_from is None:
            raise RecipeError("MessageTurn.content is required unless tool_calls_from is set.")
        if content is not None and not isinstance(content, (str, list)):
            raise RecipeError("MessageTurn.content must be a string, a list of HF-style blocks, or None.")
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict) or "type" not in block:
                    raise RecipeError("Multimodal content blocks must be HF-style dictionaries with a type key.")
            content = tuple(copy.deepcopy(block) for block in content)
        target = data.get("target", False)
        if not isinstance(target, bool):
            raise RecipeError(f"MessageTurn.target must be true or false, got {target!r}")
        for key in ("if_present", "tool_calls_from"):
            if data.get(key) is not None and not isinstance(data.get(key), str):
                raise RecipeError(f"MessageTurn.{key} must name a binding, got {data.get(key)!r}")
        return cls(role=role, stream=stream, content=content, target=target,
                   if_present=data.get("if_present"), tool_calls_from=tool_calls_from)

    def referenced_bindings(self) -> list[str]:
        names = [n for n in (self.if_present, self.tool_calls_from) if n is not None]
        return names + _placeholders(self.content)


@dataclass(frozen=True)
class _CompiledTurn:
    role: str
    stream: str
    target: bool
    if_present: Optional[str]
    tool_calls_from: Optional[str]
    text: Optional[tuple[Any, ...]]            # template of a string content
    blocks: Optional[tuple[tuple[tuple[str, Any], ...], ...]]  # (key, template-or-value) per block


@dataclass
class TrainingRecipe:
    """A message recipe (`messages` + `bindings`) or a blend of weighted message recipes.

    `name` is the blend component's key (None at top level); `weight` and `route` only mean
    something inside a blend.
    """

    messages: Optional[tuple[MessageTurn, ...]] = None
    bindings: dict[str, str] = field(default_factory=dict)
    blend: Optional[dict[str, "TrainingRecipe"]] = None
    weight: Optional[float] = None
    route: Optional[str] = None
    name: Optional[str] = None
    # Derived at load time for rendering.
    specs: tuple[tuple[str, ResolverSpec], ...] = field(default=(), repr=False, compare=False)
    turns: tuple[_CompiledTurn, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Any, *, name: Optional[str] = None, in_blend: bool = False) -> "TrainingRecipe":
        """Build and validate a recipe from parsed YAML, with LeRobot's rules."""
        where = f"Blend component {name!r}: " if name is not None else ""
        if not isinstance(data, Mapping):
            raise RecipeError(f"{where}a recipe must be a mapping, got {type(data).__name__}")
        allowed = {"messages", "bindings", "blend", "weight", "route"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise RecipeError(f"{where}TrainingRecipe got unexpected key(s) {unknown}")
        has_messages = data.get("messages") is not None
        has_blend = data.get("blend") is not None
        if has_messages and has_blend:
            raise RecipeError(f"{where}TrainingRecipe must set only one of messages or blend.")
        if not has_messages and not has_blend:
            raise RecipeError(f"{where}TrainingRecipe must set one of messages or blend.")
        weight = data.get("weight")
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                                   or not math.isfinite(weight)):
            raise RecipeError(f"{where}weight must be a finite number, got {weight!r}")
        route = data.get("route")
        if route is not None:
            if route not in ROUTES:
                raise RecipeError(f"{where}unsupported route {route!r} (the only route is 'vqa')")
            if not in_blend:
                raise RecipeError("route is only allowed on a blend component")
        bindings = data.get("bindings") or {}
        if not isinstance(bindings, Mapping) or not all(isinstance(k, str) for k in bindings):
            raise RecipeError(f"{where}bindings must map names to resolver expressions")

        if has_blend:
            if bindings:
                raise RecipeError("A blend recipe cannot declare bindings; set them on its components.")
            blend_data = data["blend"]
            if not isinstance(blend_data, Mapping) or not blend_data:
                raise RecipeError("Blend recipes must contain at least one component.")
            blend: dict[str, TrainingRecipe] = {}
            for comp_name, comp in blend_data.items():
                if in_blend or (isinstance(comp, Mapping) and comp.get("blend") is not None):
                    raise RecipeError(f"Blend component {comp_name!r} cannot itself define a blend.")
                if isinstance(comp, Mapping) and comp.get("messages") is None:
                    raise RecipeError(f"Blend component {comp_name!r} must define messages.")
                component = cls.from_dict(comp, name=str(comp_name), in_blend=True)
                if component.weight is None:
                    raise RecipeError(f"Blend component {comp_name!r} must define weight.")
                if component.weight <= 0:
                    raise RecipeError(f"Blend component {comp_name!r} must have a positive weight.")
                blend[str(comp_name)] = component
            return cls(blend=blend, weight=weight, route=route, name=name)

        raw_messages = data["messages"]
        if not isinstance(raw_messages, list):
            raise RecipeError(f"{where}messages must be a list of turns")
        try:
            messages = tuple(MessageTurn.from_dict(turn) for turn in raw_messages)
        except RecipeError as exc:
            raise RecipeError(f"{where}{exc}") from None
        declared = {str(k): v for k, v in bindings.items()}
        known = set(DEFAULT_BINDINGS) | set(declared) | {"task"}
        for turn in messages:
            missing = sorted(set(turn.referenced_bindings()) - known)
            if missing:
                raise RecipeError(f"{where}MessageTurn references unknown binding(s): {missing}")
        if not (any(t.target for t in messages) or any(t.stream == "low_level" for t in messages)):
            raise RecipeError(f"{where}Message recipes must contain at least one supervised turn — either "
                              "``target: true`` (text CE) or ``stream: low_level`` (flow/action loss).")
        # Only the bindings the recipe uses are resolved (HEAD): the declared ones plus the
        # defaults it references, in LeRobot's order ({**DEFAULT_BINDINGS, **declared}).
        needed = {n for turn in messages for n in turn.referenced_bindings()} | set(declared)
        specs = []
        for bname, expression in {**DEFAULT_BINDINGS, **declared}.items():
            if bname in needed:
                try:
                    specs.append((bname, parse_resolver(expression)))
                except RecipeError as exc:
                    raise RecipeError(f"{where}binding {bname!r}: {exc}") from None
        return cls(messages=messages, bindings=declared, weight=weight, route=route, name=name,
                   specs=tuple(specs), turns=tuple(_compile_turn(t) for t in messages))

    @classmethod
    def from_yaml(cls, source: Union[str, Path]) -> "TrainingRecipe":
        """Load from a YAML file path, or from YAML text when `source` contains a newline."""
        import yaml

        text = source if isinstance(source, str) and "\n" in source else Path(source).read_text()
        data = yaml.safe_load(text)
        if not isinstance(data, dict):
            raise RecipeError(f"Recipe YAML must contain a mapping at the top level: {source}")
        return cls.from_dict(data)

    @property
    def components(self) -> list["TrainingRecipe"]:
        return list(self.blend.values()) if self.blend is not None else [self]


def load_recipe(source: Union[str, Path]) -> TrainingRecipe:
    """A recipe from a YAML file (or YAML text)."""
    return TrainingRecipe.from_yaml(source)


def _compile_turn(turn: MessageTurn) -> _CompiledTurn:
    text = blocks = None
    if isinstance(turn.content, str):
        text = _template(turn.content)
    elif turn.content is not None:
        blocks = tuple(tuple((k, _template(v) if isinstance(v, str) else v) for k, v in block.items())
                       for block in turn.content)
    return _CompiledTurn(turn.role, turn.stream, turn.target, turn.if_present, turn.tool_calls_from, text, blocks)


# --------------------------------------------------------------------------------------------
# Rendering


def _draw(key: str, total: float) -> float:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * total


def _weighted_pick(key: str, items: Sequence[tuple[float, Any]], total: Optional[float] = None) -> Any:
    draw = _draw(key, sum(w for w, _ in items) if total is None else total)
    cumulative = 0.0
    for w, item in items:
        cumulative += w
        if draw < cumulative:
            return item
    return items[-1][1]


def select_component(recipe: TrainingRecipe, sample_idx: int) -> TrainingRecipe:
    """The blend component chosen by weight from `blake2b(str(sample_idx))` (all components,
    `route: vqa` ones included (recorded)); the recipe itself when it is not a blend."""
    if recipe.blend is None:
        return recipe
    return _weighted_pick(str(sample_idx), [(c.weight, c) for c in recipe.blend.values()])


def resolve_task(task: Optional[str], dataset_task: Optional[str], persistent: Sequence[Row],
                 sample_idx: int) -> Optional[str]:
    """`${task}`: an explicit task wins; else a task_aug user row picked by
    `blake2b("task_aug:<idx>")`; else the dataset's task."""
    if task is not None:
        return task
    aug = [r for r in persistent if r.get("style") == "task_aug" and r.get("role") == "user"]
    return _pick_task_aug([r.get("content") for r in aug], dataset_task, sample_idx)


def _pick_task_aug(contents: Sequence[Any], dataset_task: Optional[str], sample_idx: int) -> Optional[str]:
    if contents:
        digest = hashlib.blake2b(f"task_aug:{sample_idx}".encode(), digest_size=8).digest()
        chosen = contents[int.from_bytes(digest, "big") % len(contents)]
        if chosen:
            return str(chosen)
    return dataset_task


def _value_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        content = value.get("content")
        return "" if content is None else str(content)
    return str(value)


def _fill(template: tuple[Any, ...], bindings: Mapping[str, Any]) -> str:
    if len(template) == 1 and isinstance(template[0], str):
        return template[0]
    return "".join([p if p.__class__ is str else _value_text(bindings[p[0]]) for p in template])


def render_component(component: TrainingRecipe, bindings: Mapping[str, Any]) -> Optional[Rendered]:
    """Expand a message recipe's turns with resolved bindings; None without any supervision."""
    messages: list[dict[str, Any]] = []
    streams: list[str] = []
    targets: list[int] = []
    for turn in component.turns:
        if turn.if_present is not None and bindings.get(turn.if_present) is None:
            continue
        message: dict[str, Any] = {"role": turn.role}
        if turn.text is not None:
            message["content"] = _fill(turn.text, bindings)
        elif turn.blocks is not None:
            message["content"] = [
                {k: (_fill(v, bindings) if isinstance(v, tuple) else copy.deepcopy(v)) for k, v in block}
                for block in turn.blocks]
        if turn.tool_calls_from is not None:
            row = bindings.get(turn.tool_calls_from)
            calls = row.get("tool_calls") if isinstance(row, dict) else None
            if calls:
                message["tool_calls"] = copy.deepcopy(calls)
        if turn.target:
            targets.append(len(messages))
        messages.append(message)
        streams.append(turn.stream)
    if not targets and "low_level" not in streams:
        return None
    return {"messages": messages, "message_streams": streams, "target_message_indices": targets}


def fallback_render(task: Any) -> Optional[Rendered]:
    """RenderMessagesStep's action-only sample: the task as a low-level user turn."""
    if not isinstance(task, str) or not task:
        return None
    return {"messages": [{"role": "user", "content": task}], "message_streams": ["low_level"],
            "target_message_indices": []}


def _clean_rows(rows: Optional[Sequence[Any]]) -> list[Row]:
    out = []
    for row in rows or ():
        if row is None:
            continue
        if hasattr(row, "as_py"):
            row = row.as_py()
        if not isinstance(row, dict):
            raise TypeError(f"Language rows must be dictionaries, got {type(row).__name__}.")
        out.append(dict(row))
    return out


def render_sample(recipe: TrainingRecipe, *, persistent: Optional[Sequence[Row]], events: Optional[Sequence[Row]],
                  t: float, sample_idx: int, task: Optional[str] = None,
                  dataset_task: Optional[str] = None) -> Optional[Rendered]:
    """LeRobot's `render_sample` for one frame (`dataset_task` plays `dataset_ctx["task"]`).

    A blend first tries its `route: vqa` components; if any render, one of them is returned
    (picked by weight from `blake2b("vqa:<idx>")` when several do). Otherwise one component is
    picked by weight and rendered — None when it yields no supervision. Resolver errors raise
    ValueError with LeRobot's message.
    """
    p_rows = _clean_rows(persistent)
    e_rows = _clean_rows(events)

    def bindings_for(component: TrainingRecipe) -> dict[str, Any]:
        bound: dict[str, Any] = {"task": resolve_task(task, dataset_task, p_rows, sample_idx)}
        for name, spec in component.specs:
            bound[name] = spec.resolve(t, p_rows, e_rows)
        return bound

    if recipe.blend is not None:
        routed = []
        for component in recipe.blend.values():
            if component.route == "vqa":
                rendered = render_component(component, bindings_for(component))
                if rendered is not None:
                    routed.append((component.weight, rendered))
        if len(routed) == 1:
            return routed[0][1]
        if routed:
            return _weighted_pick(f"vqa:{sample_idx}", routed)
    component = select_component(recipe, sample_idx)
    return render_component(component, bindings_for(component))


def render_processor(recipe: TrainingRecipe, *, persistent: Optional[Sequence[Row]], events: Optional[Sequence[Row]],
                     t: float, sample_idx: int, task: Optional[str]) -> Optional[Rendered]:
    """What `RenderMessagesStep(recipe)` adds to one sample: the rendering with the frame's task
    passed explicitly, or the task fallback when both lists are empty or nothing renders.
    None when the step drops the sample, and also when it would pass an unannotated sample
    through unchanged (no task)."""
    if not persistent and not events:
        return fallback_render(task)
    rendered = render_sample(recipe, persistent=persistent, events=events, t=t, sample_idx=sample_idx, task=task)
    return rendered if rendered is not None else fallback_render(task)


# --------------------------------------------------------------------------------------------
# Episode rendering (the fast path)


class _PersistentTables:
    """Per-episode answers to persistent resolvers: sorted timestamps, bisected per frame."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.raw_len = 0
        self.task_aug = [r.get("content") for r in rows if r.get("style") == "task_aug" and r.get("role") == "user"]
        self._tables: dict[ResolverSpec, Any] = {}

    def _table(self, spec: ResolverSpec) -> Any:
        table = self._tables.get(spec)
        if table is None:
            matches = [r for r in self.rows if _matches(r, spec.style, spec.role, spec.tool_name, spec.camera)
                       and not math.isnan(_ts(r))]
            if spec.fn == "active_at":
                groups: dict[float, list[Row]] = {}
                for r in matches:
                    groups.setdefault(_ts(r), []).append(r)
                keys = sorted(groups)
                table = (keys, [groups[k] for k in keys])
            elif spec.fn == "emitted_at":
                ordered = sorted(matches, key=_ts)
                table = ([_ts(r) for r in ordered], ordered)
            else:
                ordered = sorted(matches, key=_sort_key)
                table = ([_ts(r) for r in ordered], ordered)
            self._tables[spec] = table
        return table

    def resolve(self, spec: ResolverSpec, t: float) -> Optional[Row]:
        keys, values = self._table(spec)
        if spec.fn == "active_at":
            k = bisect.bisect_right(keys, t) - 1
            if k < 0:
                return None
            return _select_one(values[k], spec.style, spec.role, spec.tool_name, spec.camera)
        if spec.fn == "emitted_at":
            lo = bisect.bisect_left(keys, t - EMITTED_AT_TOLERANCE_S - 1e-6)
            hi = bisect.bisect_right(keys, t + EMITTED_AT_TOLERANCE_S + 1e-6)
            found = [values[i] for i in range(lo, hi) if abs(keys[i] - t) <= EMITTED_AT_TOLERANCE_S]
            return _select_one(found, spec.style, spec.role, spec.tool_name, spec.camera)
        if not values:
            return None
        anchor = bisect.bisect_right(keys, t) - 1
        offset = spec.offset if spec.fn == "nth_next" else -spec.offset
        target = _nth_target(anchor if anchor >= 0 else None, offset, len(values))
        return None if target is None else values[target]


def _column_runs(column: Any, n: int, trusted: bool = False) -> tuple[list[int], list[_PersistentTables]]:
    """Per-frame run id and one table per run of frames with identical persistent lists
    (`trusted`: the caller validated that all frames hold the same list)."""
    if column is None:
        tables = _PersistentTables([])
        return [0] * n, [tables]
    if isinstance(column, (pa.Array, pa.ChunkedArray)):
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
        if n and (trusted or lc.persistent_mismatch(column) is None):
            tables = _PersistentTables(lc.frame_rows_to_python(column, 0))
            tables.raw_len = int(lengths[0])
            return [0] * n, [tables]
        frames = lc.rows_to_python(column)
    else:
        frames = list(column)
        lengths = [len(f or ()) for f in frames]
    run_ids: list[int] = []
    runs: list[_PersistentTables] = []
    previous: Any = object()
    for i, frame in enumerate(frames):
        if not runs or not (frame is previous or (frame or []) == (previous or [])):
            runs.append(_PersistentTables(_clean_rows(frame)))
            runs[-1].raw_len = int(lengths[i])
        run_ids.append(len(runs) - 1)
        previous = frame
    return run_ids, runs


def _event_rows(column: Any, n: int) -> tuple[dict[int, list[Row]], set[int]]:
    """Rows of the frames that have events (frame position -> rows), and positions with a
    non-empty raw list."""
    if column is None:
        return {}, set()
    if isinstance(column, (pa.Array, pa.ChunkedArray)):
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
        positions = np.flatnonzero(lengths > 0)
        if not len(positions):
            return {}, set()
        frames = lc.rows_to_python(column.take(pa.array(positions)))
        return ({int(p): _clean_rows(f) for p, f in zip(positions, frames)}, {int(p) for p in positions})
    out = {}
    for i, frame in enumerate(column):
        if frame:
            out[i] = _clean_rows(frame)
    return out, set(out)


def _as_list(values: Any) -> list[Any]:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.to_pylist()
    if isinstance(values, np.ndarray):
        return values.tolist()
    return list(values)


def render_episode(recipe: TrainingRecipe, *, persistent: Any, events: Any, timestamps: Any, indices: Any,
                   task: Union[str, Sequence[Optional[str]], None], mode: RenderMode = "processor",
                   errors: Literal["raise", "record"] = "raise",
                   persistent_validated: bool = False) -> list[Optional[dict[str, Any]]]:
    """Render every frame of one episode; one entry per frame, in frame order.

    `persistent` / `events`: the episode's canonical language columns (Arrow, as returned by
    `language_columns.normalize_language_column`), or per-frame Python lists of row dicts, or
    None when the dataset lacks the column. `timestamps`: the frames' float32 timestamps (any
    float array; they are widened to doubles, LeRobot's `t`). `indices`: the global frame
    indices (the `sample_idx` that drives blend, VQA and task_aug hashing). `task`: the frame
    task string, one for the episode or one per frame.

    `mode`:
      * "processor" (default): what `RenderMessagesStep` produces — the task is passed
        explicitly; the task fallback replaces a frame with no language or no rendering; None
        means the step drops the frame (or, with no task and no language, passes it through).
      * "sample_task": `render_sample(..., task=<frame task>)`; None when nothing renders.
      * "sample": `render_sample(..., task=None, dataset_ctx={"task": <frame task>})`, so
        `${task}` rotates through the episode's task_aug rows.

    A resolver error (e.g. an ambiguous binding) raises `RenderError`, or with
    `errors="record"` becomes that frame's `{"error": "ValueError: <message>"}`.

    `persistent_validated=True` skips the check that every frame holds the same persistent
    list (pass it after `validate_language` accepted the episode); otherwise frames whose lists
    differ are still rendered correctly, each against its own list.
    """
    ts = np.asarray(timestamps.to_numpy(zero_copy_only=False) if isinstance(timestamps, (pa.Array, pa.ChunkedArray))
                    else timestamps, dtype=np.float64).tolist()
    n = len(ts)
    idx = [int(i) for i in _as_list(indices)]
    tasks = [task] * n if task is None or isinstance(task, str) else _as_list(task)
    lengths = {len(c) for c in (persistent, events) if c is not None}
    if len(idx) != n or len(tasks) != n or lengths - {n}:
        raise ValueError(f"render_episode: {n} timestamps but {len(idx)} indices, {len(tasks)} tasks and "
                         f"language columns of {sorted(lengths)} frames")
    run_ids, runs = _column_runs(persistent, n, persistent_validated)
    events_by_frame, raw_events = _event_rows(events, n)
    routed = [c for c in recipe.blend.values() if c.route == "vqa"] if recipe.blend is not None else []
    # A routed component whose bindings all come from the frame's events renders the same on
    # every frame without events, given the task: remember which (component, task) yield None.
    events_only = {id(c) for c in routed if all(spec.on_events for _, spec in c.specs)}
    quiet_none: set[tuple[int, Any]] = set()
    if recipe.blend is not None:
        weighted = [(c.weight, c) for c in recipe.blend.values()]
        total_weight = sum(w for w, _ in weighted)
        chosen = [_weighted_pick(str(i), weighted, total_weight) for i in idx]
    else:
        chosen = [recipe] * n
    explicit = mode != "sample"
    no_events: list[Row] = []
    out: list[Optional[dict[str, Any]]] = []

    def bindings_for(component: TrainingRecipe, task_value: Any, tables: _PersistentTables, e_rows: list[Row],
                     t: float) -> dict[str, Any]:
        bound: dict[str, Any] = {"task": task_value}
        for name, spec in component.specs:
            if spec.on_events:
                bound[name] = (_select_one([r for r in e_rows if _matches(r, spec.style, spec.role,
                                                                           spec.tool_name, spec.camera)],
                                           spec.style, spec.role, spec.tool_name, spec.camera)
                               if e_rows else None)
            else:
                bound[name] = tables.resolve(spec, t)
        return bound

    for i in range(n):
        tables = runs[run_ids[i]]
        e_rows = events_by_frame.get(i, no_events)
        t, sample_idx, frame_task = ts[i], idx[i], tasks[i]
        if mode == "processor" and not tables.raw_len and i not in raw_events:
            out.append(fallback_render(frame_task))
            continue
        task_value = frame_task if explicit else _pick_task_aug(tables.task_aug, frame_task, sample_idx)
        try:
            rendered = None
            hits = []
            for component in routed:
                quiet = not e_rows and id(component) in events_only
                if quiet and (id(component), task_value) in quiet_none:
                    continue
                r = render_component(component, bindings_for(component, task_value, tables, e_rows, t))
                if r is not None:
                    hits.append((component.weight, r))
                elif quiet:
                    quiet_none.add((id(component), task_value))
            if hits:
                rendered = hits[0][1] if len(hits) == 1 else _weighted_pick(f"vqa:{sample_idx}", hits)
            else:
                rendered = render_component(chosen[i], bindings_for(chosen[i], task_value, tables, e_rows, t))
        except ValueError as exc:
            if errors == "record":
                out.append({"error": f"ValueError: {exc}"})
                continue
            raise RenderError(f"frame with index {sample_idx} (t={t!r}): {exc}", index=sample_idx, timestamp=t,
                              cause=str(exc)) from exc
        if rendered is None and mode == "processor":
            rendered = fallback_render(frame_task)
        out.append(rendered)
    return out
