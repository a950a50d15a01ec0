"""Rendering frames into chat samples with a training recipe, exactly as LeRobot's training loader does.

Two entry points render:

* `render_sample` — one frame, straight from Python rows; a line-by-line model of LeRobot's
  function, kept simple so it can serve as the oracle for the fast path (`render_processor` adds what
  LeRobot's `RenderMessagesStep` does around it).
* `render_episode` — every frame of one episode, from canonical Arrow columns (or Python rows).
  It converts only what it needs to Python (one persistent list per episode, the event lists of
  frames that have events) and answers persistent resolvers by bisection over per-episode tables.
  Its output equals `render_sample`'s frame by frame.

Rows are dicts with LeRobot's keys; `tool_calls` holds parsed JSON objects (the canonical column
stores JSON text; `columns.rows_to_python` parses it), as LeRobot's loader yields them. Where LeRobot's
behaviour was settled from its recorded outputs rather than read from its code, the docstring says
"(recorded)".
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.language import columns
from transforms.language.errors import RenderError
from transforms.language.recipe import TrainingRecipe
from transforms.language.resolvers import PersistentTables, Row

Rendered = dict[str, list[Any]]
RenderMode = Literal["sample", "sample_task", "processor"]
#: What `render_episode` does with a frame that raises: raise `RenderError`, put LeRobot's recorded form
#: `{"error": "ValueError: <message>"}` in its place, or put the `RenderError` itself in its place.
ErrorPolicy = Literal["raise", "record", "return"]


# --------------------------------------------------------------------------------------------
# One frame (the reference path)


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
    `route: vqa` ones included (recorded)); the recipe itself when it is not a blend.

    Args:
        recipe: the recipe.
        sample_idx: the frame's global index.

    Returns:
        The component to render when no VQA route renders.
    """
    if recipe.blend is None:
        return recipe
    return _weighted_pick(str(sample_idx), [(c.weight, c) for c in recipe.blend.values()])


def resolve_task(task: Optional[str], dataset_task: Optional[str], persistent: Sequence[Row],
                 sample_idx: int) -> Optional[str]:
    """`${task}`: an explicit task wins; else a task_aug user row picked by
    `blake2b("task_aug:<idx>")`; else the dataset's task.

    Args:
        task: the task passed explicitly (RenderMessagesStep passes the frame's task).
        dataset_task: the dataset's task for the frame.
        persistent: the frame's persistent rows.
        sample_idx: the frame's global index.

    Returns:
        The text `${task}` becomes.
    """
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
    """Expand a message recipe's turns with resolved bindings.

    Args:
        component: a message recipe (not a blend).
        bindings: binding name -> resolved row (or None), plus `task`.

    Returns:
        `{"messages", "message_streams", "target_message_indices"}`, or None when the kept turns have no
        supervision (no target and no low-level turn).
    """
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
    """RenderMessagesStep's action-only sample: the task as a low-level user turn (None without a task)."""
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
    """LeRobot's `render_sample` for one frame.

    A blend first tries its `route: vqa` components; if any render, one of them is returned
    (picked by weight from `blake2b("vqa:<idx>")` when several do). Otherwise one component is
    picked by weight and rendered.

    Args:
        recipe: the recipe.
        persistent, events: the frame's language rows (None for none).
        t: the frame's time in seconds.
        sample_idx: the frame's global index.
        task: a task passed explicitly (wins over task_aug rows).
        dataset_task: the dataset's task for the frame (LeRobot's `dataset_ctx["task"]`).

    Returns:
        The rendering, or None when it yields no supervision. A resolver error raises `ValueError` with
        LeRobot's message.
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
    """What `RenderMessagesStep(recipe)` adds to one sample.

    Args:
        recipe, persistent, events, t, sample_idx: as for `render_sample`.
        task: the frame's task, passed explicitly.

    Returns:
        The rendering, or the task fallback when both lists are empty or nothing renders. None when the
        step drops the sample, and also when it would pass an unannotated sample through unchanged
        (no task).
    """
    if not persistent and not events:
        return fallback_render(task)
    rendered = render_sample(recipe, persistent=persistent, events=events, t=t, sample_idx=sample_idx, task=task)
    return rendered if rendered is not None else fallback_render(task)


# --------------------------------------------------------------------------------------------
# Every frame of an episode (the fast path)


def _column_runs(column: Any, n: int, trusted: bool = False) -> tuple[list[int], list[PersistentTables]]:
    """Per-frame run id and one table per run of frames with identical persistent lists
    (`trusted`: the caller validated that all frames hold the same list)."""
    if column is None:
        tables = PersistentTables([])
        return [0] * n, [tables]
    if isinstance(column, (pa.Array, pa.ChunkedArray)):
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
        if n and (trusted or columns.persistent_mismatch(column) is None):
            tables = PersistentTables(columns.frame_rows_to_python(column, 0))
            tables.raw_len = int(lengths[0])
            return [0] * n, [tables]
        frames = columns.rows_to_python(column)
    else:
        frames = list(column)
        lengths = [len(f or ()) for f in frames]
    run_ids: list[int] = []
    runs: list[PersistentTables] = []
    previous: Any = object()
    for i, frame in enumerate(frames):
        if not runs or not (frame is previous or (frame or []) == (previous or [])):
            runs.append(PersistentTables(_clean_rows(frame)))
            runs[-1].raw_len = int(lengths[i])
        run_ids.append(len(runs) - 1)
        previous = frame
    return run_ids, runs


def _event_rows(column: Any) -> tuple[dict[int, list[Row]], set[int]]:
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
        frames = columns.rows_to_python(column.take(pa.array(positions)))
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


@dataclass(frozen=True)
class _EpisodeFrames:
    """The per-frame inputs of `render_episode` as Python lists of equal length."""

    timestamps: list[float]
    indices: list[int]
    tasks: list[Optional[str]]


def _episode_frames(timestamps: Any, indices: Any, task: Any, persistent: Any, events: Any) -> _EpisodeFrames:
    ts = np.asarray(timestamps.to_numpy(zero_copy_only=False) if isinstance(timestamps, (pa.Array, pa.ChunkedArray))
                    else timestamps, dtype=np.float64).tolist()
    n = len(ts)
    idx = [int(i) for i in _as_list(indices)]
    tasks = [task] * n if task is None or isinstance(task, str) else _as_list(task)
    lengths = {len(c) for c in (persistent, events) if c is not None}
    if len(idx) != n or len(tasks) != n or lengths - {n}:
        raise ValueError(f"render_episode: {n} timestamps but {len(idx)} indices, {len(tasks)} tasks and "
                         f"language columns of {sorted(lengths)} frames")
    return _EpisodeFrames(ts, idx, tasks)


class _BindingFailure(Exception):
    """A resolver raised while binding `binding` of `component` (None: a recipe that is not a blend)."""

    def __init__(self, component: Optional[str], binding: str, cause: ValueError) -> None:
        super().__init__(str(cause))
        self.component = component
        self.binding = binding
        self.cause = cause


class _EpisodeRenderer:
    """Renders the frames of one episode with one recipe.

    A routed (`route: vqa`) component whose bindings all come from the frame's events renders the same
    on every frame without events, given the task: the renderer remembers which (component, task)
    yield None and skips them on such frames.
    """

    def __init__(self, recipe: TrainingRecipe, mode: RenderMode) -> None:
        self.recipe = recipe
        self.mode = mode
        self.routed = [c for c in recipe.blend.values() if c.route == "vqa"] if recipe.blend is not None else []
        self.events_only = {id(c) for c in self.routed if all(spec.on_events for _, spec in c.specs)}
        self.quiet_none: set[tuple[int, Any]] = set()

    def chosen(self, indices: Sequence[int]) -> list[TrainingRecipe]:
        """The component each frame renders when no VQA route does (`select_component`, batched)."""
        if self.recipe.blend is None:
            return [self.recipe] * len(indices)
        weighted = [(c.weight, c) for c in self.recipe.blend.values()]
        total_weight = sum(w for w, _ in weighted)
        return [_weighted_pick(str(i), weighted, total_weight) for i in indices]

    def _bindings(self, component: TrainingRecipe, task_value: Any, tables: PersistentTables,
                  e_rows: list[Row], t: float) -> dict[str, Any]:
        bound: dict[str, Any] = {"task": task_value}
        for name, spec in component.specs:
            try:
                bound[name] = spec.resolve_events(e_rows) if spec.on_events else tables.resolve(spec, t)
            except ValueError as exc:
                raise _BindingFailure(component.name, name, exc) from exc
        return bound

    def _render_routed(self, task_value: Any, tables: PersistentTables, e_rows: list[Row], t: float,
                       sample_idx: int) -> Optional[Rendered]:
        hits = []
        for component in self.routed:
            quiet = not e_rows and id(component) in self.events_only
            if quiet and (id(component), task_value) in self.quiet_none:
                continue
            rendered = render_component(component, self._bindings(component, task_value, tables, e_rows, t))
            if rendered is not None:
                hits.append((component.weight, rendered))
            elif quiet:
                self.quiet_none.add((id(component), task_value))
        if not hits:
            return None
        return hits[0][1] if len(hits) == 1 else _weighted_pick(f"vqa:{sample_idx}", hits)

    def frame(self, chosen: TrainingRecipe, tables: PersistentTables, e_rows: list[Row], has_events: bool,
              t: float, sample_idx: int, frame_task: Optional[str]) -> Optional[Rendered]:
        """One frame's rendering (see `render_episode`); a resolver error raises `_BindingFailure`."""
        if self.mode == "processor" and not tables.raw_len and not has_events:
            return fallback_render(frame_task)
        task_value = frame_task if self.mode != "sample" else _pick_task_aug(tables.task_aug, frame_task,
                                                                             sample_idx)
        rendered = self._render_routed(task_value, tables, e_rows, t, sample_idx) if self.routed else None
        if rendered is None:
            rendered = render_component(chosen, self._bindings(chosen, task_value, tables, e_rows, t))
        if rendered is None and self.mode == "processor":
            rendered = fallback_render(frame_task)
        return rendered


def render_episode(recipe: TrainingRecipe, *, persistent: Any, events: Any, timestamps: Any, indices: Any,
                   task: Union[str, Sequence[Optional[str]], None], mode: RenderMode = "processor",
                   errors: ErrorPolicy = "raise",
                   persistent_validated: bool = False) -> list[Union[Rendered, dict[str, str], RenderError, None]]:
    """Render every frame of one episode; one entry per frame, in frame order.

    Args:
        recipe: the recipe.
        persistent, events: the episode's canonical language columns (Arrow, as returned by
            `columns.normalize_language_column`), or per-frame Python lists of row dicts, or None when the
            dataset lacks the column.
        timestamps: the frames' float32 timestamps (any float array; they are widened to doubles,
            LeRobot's `t`).
        indices: the global frame indices (the `sample_idx` that drives blend, VQA and task_aug hashing).
        task: the frame task string, one for the episode or one per frame.
        mode: "processor" (default) gives what `RenderMessagesStep` produces — the task is passed
            explicitly; the task fallback replaces a frame with no language or no rendering; None means
            the step drops the frame (or, with no task and no language, passes it through).
            "sample_task" gives `render_sample(..., task=<frame task>)`, None when nothing renders.
            "sample" gives `render_sample(..., task=None, dataset_ctx={"task": <frame task>})`, so
            `${task}` rotates through the episode's task_aug rows.
        errors: what a frame whose resolver raises (e.g. an ambiguous binding) becomes: "raise" raises
            `RenderError` at that frame; "record" puts `{"error": "ValueError: <message>"}` in its place
            (LeRobot's recorded form); "return" puts the `RenderError` (index, component, binding, cause)
            in its place. The other frames render either way.
        persistent_validated: skip the check that every frame holds the same persistent list (pass it
            after `validate_language` accepted the episode); otherwise frames whose lists differ are
            still rendered correctly, each against its own list.

    Returns:
        One entry per frame: the rendering, None, or the error entry `errors` asks for.
    """
    frames = _episode_frames(timestamps, indices, task, persistent, events)
    n = len(frames.timestamps)
    run_ids, runs = _column_runs(persistent, n, persistent_validated)
    events_by_frame, raw_events = _event_rows(events)
    renderer = _EpisodeRenderer(recipe, mode)
    chosen = renderer.chosen(frames.indices)
    no_events: list[Row] = []
    out: list[Union[Rendered, dict[str, str], RenderError, None]] = []
    for i in range(n):
        t, sample_idx = frames.timestamps[i], frames.indices[i]
        try:
            out.append(renderer.frame(chosen[i], runs[run_ids[i]], events_by_frame.get(i, no_events),
                                      i in raw_events, t, sample_idx, frames.tasks[i]))
        except _BindingFailure as failure:
            error = RenderError(str(failure.cause), index=sample_idx, timestamp=t, component=failure.component,
                                binding=failure.binding)
            if errors == "raise":
                raise error from failure.cause
            out.append({"error": f"ValueError: {failure.cause}"} if errors == "record" else error)
    return out
