"""Language columns and recipe rendering against LeRobot's recorded behaviour.

Ground truth: tests/data/lerobot/language (written by LeRobot's annotation writer) and its
expected/ outputs (LeRobot's own resolvers, render_sample and RenderMessagesStep on every frame).
"""

from __future__ import annotations

import copy
import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transforms.language import columns as lc
from transforms.language import recipe as rc
from transforms.language import render, resolvers
from transforms.language.errors import RecipeError, RenderError
from transforms.base.errors import LeRobotImportError

ROOT = os.path.join(os.path.dirname(__file__), "data", "lerobot", "language")
EXPECTED = os.path.join(ROOT, "expected")
CAMERAS = {"observation.images.front", "observation.images.wrist"}
RECIPE_NAMES = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(EXPECTED, "recipes", "*.yaml")))


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return pq.read_table(os.path.join(ROOT, "data", "chunk-000", "file-000.parquet"))


@pytest.fixture(scope="module")
def columns(table):
    persistent = lc.normalize_language_column(table["language_persistent"], "persistent",
                                              feature="language_persistent")
    events = lc.normalize_language_column(table["language_events"], "events", feature="language_events")
    return persistent, events


def _jsonl(name: str) -> list[dict]:
    with open(os.path.join(EXPECTED, name)) as f:
        return [json.loads(line) for line in f]


def _episodes(table):
    ep = table["episode_index"].to_numpy()
    for e in np.unique(ep):
        yield int(e), np.flatnonzero(ep == e)


# ---------------------------------------------------------------------------------------------
# (a) normalisation


def _expected_row(row: dict, kind: str) -> dict:
    fields = lc.PERSISTENT_ROW_FIELDS if kind == "persistent" else lc.EVENT_ROW_FIELDS
    out = {f: row.get(f) for f in fields}
    if kind == "persistent":
        out["timestamp"] = float(np.float32(row["timestamp"]))
    return out


def test_corpus_columns_normalise_to_canonical_types(table, columns):
    persistent, events = columns
    assert persistent.type == lc.persistent_type()
    assert events.type == lc.events_type()
    assert str(persistent.type) == (
        "list<item: struct<role: string not null, content: string, style: string, timestamp: float not null, "
        "camera: string, tool_calls: list<item: extension<arrow.json>>>>")
    assert lc.events_type().value_type.names == list(lc.EVENT_ROW_FIELDS)
    # On disk the quirks are really there.
    disk = table.schema
    assert disk.field("language_persistent").type.value_type.field("timestamp").type == pa.float64()
    assert pa.types.is_null(disk.field("language_persistent").type.value_type.field("camera").type)
    assert pa.types.is_struct(disk.field("language_events").type.value_type.field("tool_calls").type.value_type)


@pytest.mark.parametrize("kind", ["persistent", "events"])
def test_corpus_rows_round_trip(table, columns, kind):
    normalised = columns[0] if kind == "persistent" else columns[1]
    disk = table[f"language_{kind}"].to_pylist()
    ours = lc.rows_to_python(normalised)
    assert len(disk) == len(ours) == table.num_rows
    for frame_disk, frame_ours in zip(disk, ours):
        assert frame_ours == [_expected_row(r, kind) for r in frame_disk]
        if kind == "persistent":
            # The writer's doubles are float32-widened: the float32 keeps them exactly.
            assert [r["timestamp"] for r in frame_ours] == [r["timestamp"] for r in frame_disk]
    # Tool calls are stored as compact JSON with sorted keys.
    texts = [c for f in normalised.to_pylist() for r in f if r["tool_calls"] for c in r["tool_calls"]]
    assert texts == ([] if kind == "persistent" else [
        '{"function":{"arguments":{"text":"Okay, switching to the blue cup."},"name":"say"},"type":"function"}'])


def test_canonical_column_survives_parquet(tmp_path, columns):
    persistent, events = columns
    path = tmp_path / "lang.parquet"
    pq.write_table(pa.table({"p": persistent, "e": events}), path)
    back = pq.read_table(path)
    assert back["p"].combine_chunks().equals(persistent)
    assert back["e"].combine_chunks().equals(events)


def _say(text: str) -> dict:
    return {"type": "function", "function": {"name": "say", "arguments": {"text": text}}}


def test_normalise_variants_agree():
    """Reordered/missing/null-typed fields, large types, JSON-text tool calls, slices, chunks."""
    rows = [[{"role": "assistant", "content": None, "style": None, "camera": None, "tool_calls": [_say("hi")]},
             {"role": "user", "content": "q", "style": "vqa", "camera": "observation.images.front",
              "tool_calls": None}],
            [], None]
    reference = lc.column_from_python(rows, "events")
    as_struct = pa.array([[{"tool_calls": [_say("hi")], "camera": None, "style": None, "content": None,
                            "role": "assistant"},
                           {"tool_calls": None, "camera": "observation.images.front", "style": "vqa",
                            "content": "q", "role": "user"}], [], None])
    as_text = pa.array([[{"role": "assistant", "tool_calls": [json.dumps(_say("hi"))]},
                         {"role": "user", "content": "q", "style": "vqa", "camera": "observation.images.front"}],
                        [], None], pa.large_list(pa.struct([
                            ("role", pa.large_string()), ("content", pa.string()), ("style", pa.string()),
                            ("camera", pa.string()), ("tool_calls", pa.list_(pa.large_string()))])))
    whole_text = pa.array([[{"role": "assistant", "tool_calls": json.dumps([_say("hi")])},
                            {"role": "user", "content": "q", "style": "vqa",
                             "camera": "observation.images.front", "tool_calls": None}], [], None])
    for variant in (as_struct, as_text, whole_text, pa.chunked_array([as_struct[:1], as_struct[1:]])):
        out = lc.normalize_language_column(variant, "events", feature="language_events")
        assert out.type == lc.events_type()
        assert out.equals(reference), variant.type
    sliced = lc.normalize_language_column(as_struct.slice(1), "events", feature="language_events")
    assert sliced.equals(reference.slice(1))
    assert lc.normalize_language_column(pa.nulls(3), "persistent", feature="p").to_pylist() == [None] * 3
    # Integer timestamps (pandas with whole seconds), float32 on disk, float64 rounding.
    ints = pa.array([[{"role": "assistant", "content": "a", "style": "subtask", "timestamp": 2}]])
    assert lc.rows_to_python(lc.normalize_language_column(ints, "persistent", feature="p"))[0][0]["timestamp"] == 2.0
    dbl = pa.array([[{"role": "assistant", "content": "a", "style": "subtask", "timestamp": 0.4}]])
    got = lc.rows_to_python(lc.normalize_language_column(dbl, "persistent", feature="p"))[0][0]["timestamp"]
    assert got == float(np.float32(0.4))


@pytest.mark.parametrize("value,message", [
    (pa.array([[{"content": "a", "style": "subtask", "timestamp": 0.0}]]), "role is missing"),
    (pa.array([[{"role": "user", "content": "a", "style": "subtask", "timestamp": 0.0},
                {"role": None, "content": "a", "style": "subtask", "timestamp": 0.0}]]), "row 1: role is null"),
    (pa.array([[{"role": "user", "content": "a", "style": "subtask", "timestamp": None}]]), "timestamp is null"),
    (pa.array([[{"role": "user", "content": "a", "style": "subtask", "timestamp": 1e300}]]), "float32's range"),
    (pa.array([[{"role": "user", "content": "a", "style": "subtask", "timestamp": 0.0, "extra": 1}]]),
     "unexpected row field"),
    (pa.array([[{"role": "user", "content": 3, "style": "subtask", "timestamp": 0.0}]]), "content must be a string"),
    (pa.array([[{"role": "user", "content": "a", "style": "subtask", "timestamp": 0.0, "tool_calls": ["{nope"]}]]),
     "invalid JSON"),
    (pa.array([1, 2]), "expected a list of structs"),
])
def test_normalise_rejects(value, message):
    with pytest.raises(LeRobotImportError) as info:
        lc.normalize_language_column(value, "persistent", feature="language_persistent", frame_index=[7, 8],
                                     episode_index=4)
    assert info.value.rule == "column_type"
    assert message in info.value.message
    assert info.value.episode_index == 4
    if message not in ("unexpected row field", "content must be a string", "expected a list of structs"):
        assert "frame 7 row" in info.value.message


# ---------------------------------------------------------------------------------------------
# (b) recipe rendering equals LeRobot's recorded results


@pytest.mark.parametrize("name", RECIPE_NAMES)
def test_render_matches_lerobot(name, table, columns):
    recipe = rc.load_recipe(os.path.join(EXPECTED, "recipes", f"{name}.yaml"))
    expected = _jsonl(f"{name}.jsonl")
    assert [x["index"] for x in expected] == table["index"].to_pylist()
    persistent, events = columns
    modes = {"sample": "result", "sample_task": "result_task", "processor": "processor"}
    for mode, key in modes.items():
        got = []
        for _, sel in _episodes(table):
            got += render.render_episode(
                recipe, persistent=persistent.take(sel), events=events.take(sel),
                timestamps=table["timestamp"].take(sel), indices=table["index"].take(sel),
                task=[expected[i]["task"] for i in sel], mode=mode, errors="record")
        for x, g in zip(expected, got):
            assert g == x[key], (mode, x["index"])
    # The one-frame reference path agrees, from Python rows.
    p_rows = lc.rows_to_python(persistent)
    e_rows = lc.rows_to_python(events)
    for i, x in enumerate(expected):
        kw = dict(persistent=p_rows[i], events=e_rows[i], t=x["timestamp"], sample_idx=x["index"])
        assert render.render_sample(recipe, **kw, dataset_task=x["task"]) == x["result"]
        assert render.render_sample(recipe, **kw, task=x["task"]) == x["result_task"]
        assert render.render_processor(recipe, **kw, task=x["task"]) == x["processor"]
        if "weighted_component" in x:
            assert render.select_component(recipe, x["index"]).name == x["weighted_component"]


def test_summary_counts(table, columns):
    """LeRobot's per-recipe counts (rendered / None / errors, processor fallbacks / drops) equal ours."""
    with open(os.path.join(EXPECTED, "summary.json")) as f:
        summary = json.load(f)
    assert summary["frames"] == table.num_rows == 35
    assert sorted(summary["recipes"]) == RECIPE_NAMES == ["subtask", "subtask_joint", "subtask_mem",
                                                          "subtask_mem_vqa_speech"]
    persistent, events = columns
    for name in RECIPE_NAMES:
        recipe = rc.load_recipe(os.path.join(EXPECTED, "recipes", f"{name}.yaml"))
        tasks = [x["task"] for x in _jsonl(f"{name}.jsonl")]
        samples, processed = [], []
        for _, sel in _episodes(table):
            kw = dict(persistent=persistent.take(sel), events=events.take(sel), timestamps=table["timestamp"].take(sel),
                      indices=table["index"].take(sel), task=[tasks[i] for i in sel], errors="record")
            samples += render.render_episode(recipe, mode="sample", **kw)
            processed += render.render_episode(recipe, mode="processor", **kw)
        fallbacks = [{"messages": [{"role": "user", "content": t}], "message_streams": ["low_level"],
                      "target_message_indices": []} for t in tasks]
        failed = [isinstance(x, dict) and "error" in x for x in samples]
        assert {"rendered": len(samples) - samples.count(None) - sum(failed), "none": samples.count(None),
                "error": sum(failed), "processor_dropped": processed.count(None),
                "processor_fallback": sum(x == f for x, f in zip(processed, fallbacks)),
                "processor_error": sum(isinstance(x, dict) and "error" in x for x in processed)
                } == summary["recipes"][name], name


def test_render_episode_from_python_rows_and_errors(table, columns):
    persistent, events = columns
    recipe = rc.load_recipe(os.path.join(EXPECTED, "recipes", "subtask_mem_vqa_speech.yaml"))
    expected = _jsonl("subtask_mem_vqa_speech.jsonl")
    sel = np.flatnonzero(table["episode_index"].to_numpy() == 0)
    got = render.render_episode(recipe, persistent=[r for r in np.array(lc.rows_to_python(persistent),
                                                                       dtype=object)[sel]],
                                 events=[lc.rows_to_python(events)[i] for i in sel],
                                 timestamps=table["timestamp"].to_numpy()[sel], indices=sel,
                                 task="put the cup on the shelf")
    assert got == [expected[i]["processor"] for i in sel]
    trusted = render.render_episode(recipe, persistent=persistent.take(sel), events=events.take(sel),
                                     timestamps=table["timestamp"].take(sel), indices=sel,
                                     task="put the cup on the shelf", persistent_validated=True)
    assert trusted == got
    with pytest.raises(ValueError, match="language columns of"):
        render.render_episode(recipe, persistent=persistent.take(sel[:-1]), events=events.take(sel),
                               timestamps=table["timestamp"].take(sel), indices=sel, task="t")
    # A binding that is ambiguous on the VQA frames (two cameras) raises like LeRobot.
    ambiguous = rc.TrainingRecipe.from_yaml(
        "messages:\n  - {role: assistant, content: '${vqa}', stream: high_level, target: true, if_present: vqa}\n")
    with pytest.raises(RenderError) as info:
        render.render_episode(ambiguous, persistent=persistent.take(sel), events=events.take(sel),
                               timestamps=table["timestamp"].take(sel), indices=sel, task="x")
    assert info.value.index == 1
    assert "Ambiguous resolver for style='vqa' role='assistant'" in str(info.value)
    recorded = render.render_episode(ambiguous, persistent=persistent.take(sel), events=events.take(sel),
                                      timestamps=table["timestamp"].take(sel), indices=sel, task="x",
                                      errors="record")
    assert recorded[1] == {"error": "ValueError: Ambiguous resolver for style='vqa' role='assistant' "
                                    "tool_name=None camera=None: 2 matching rows. Add a selector that "
                                    "distinguishes them."}


def test_tool_calls_from_copies_parsed_calls(columns):
    recipe = rc.TrainingRecipe.from_yaml(
        "messages:\n"
        "  - {role: user, content: '${interjection}', stream: high_level, if_present: interjection}\n"
        "  - {role: assistant, stream: high_level, target: true, if_present: speech, tool_calls_from: speech}\n")
    persistent, events = columns
    got = render.render_episode(recipe, persistent=persistent.slice(0, 12), events=events.slice(0, 12),
                                 timestamps=np.arange(12, dtype=np.float32) / 10, indices=range(12), task="t",
                                 mode="sample_task")
    assert got[7] == {"messages": [{"role": "user", "content": "use the blue cup instead"},
                                   {"role": "assistant", "tool_calls": [
                                       {"function": {"arguments": {"text": "Okay, switching to the blue cup."},
                                                     "name": "say"}, "type": "function"}]}],
                      "message_streams": ["high_level", "high_level"], "target_message_indices": [1]}
    assert got[6] is None


# ---------------------------------------------------------------------------------------------
# (c) resolvers


def _call(fn, t, p_rows, e_rows, kwargs):
    func = resolvers.RESOLVERS[fn]
    if fn == "emitted_at":
        return func(t, persistent=p_rows, events=e_rows, **kwargs)
    return func(t, persistent=p_rows, **kwargs)


def test_resolvers_match_lerobot(columns):
    persistent, events = columns
    p_rows = lc.rows_to_python(persistent)
    e_rows = lc.rows_to_python(events)
    calls = _jsonl("resolvers.jsonl")
    assert len(calls) == json.load(open(os.path.join(EXPECTED, "summary.json")))["resolver_calls"]
    errors = 0
    tables = {}
    for call in calls:
        i = call["index"]
        expected = call["result"]
        try:
            got = _call(call["fn"], call["t"], p_rows[i], e_rows[i], call["kwargs"])
        except ValueError as exc:
            got = {"error": f"ValueError: {exc}"}
            errors += 1
        assert got == expected, call
        # The episode tables of the fast path give the same answers.
        try:
            spec = resolvers.ResolverSpec(fn=call["fn"], **call["kwargs"])
            on_events = spec.on_events
            if not on_events and spec.fn != "emitted_at":
                resolvers.validate_persistent_resolver(spec.fn, spec.style)
                if spec.fn != "active_at" and abs(spec.offset) < 1:
                    raise ValueError(f"{spec.fn} offset must be non-zero.")
        except ValueError as exc:
            assert expected == {"error": f"ValueError: {exc}"}
            continue
        if on_events:
            continue
        fast = tables.setdefault(call["episode_index"], resolvers.PersistentTables(p_rows[i]))
        try:
            got_fast = fast.resolve(spec, call["t"])
        except ValueError as exc:
            got_fast = {"error": f"ValueError: {exc}"}
        assert got_fast == expected, call
    assert errors == json.load(open(os.path.join(EXPECTED, "summary.json")))["resolver_errors"]


def test_parse_resolver():
    assert resolvers.parse_resolver("nth_prev(style=memory, offset=1)") == resolvers.ResolverSpec(
        "nth_prev", style="memory", offset=1)
    assert resolvers.parse_resolver(' emitted_at(t, style="vqa", role=user, camera=observation.images.top) ') == \
        resolvers.ResolverSpec("emitted_at", style="vqa", role="user", camera="observation.images.top")
    for bad, message in [("active_at(t)", "active_at requires a persistent style."),
                         ("active_at(t, style=vqa)", "cannot be used with event-only style 'vqa'"),
                         ("emitted_at(t, style=bogus)", "Unknown language style: 'bogus'"),
                         ("nth_next(style=plan, offset=0)", "nth_next offset must be non-zero."),
                         ("at(t)", "Unknown language resolver"), ("active_at", "Invalid resolver expression"),
                         ("active_at(t, subtask)", "Invalid resolver argument"),
                         ("active_at(t, style=plan, offset=1)", "unexpected keyword argument 'offset'")]:
        with pytest.raises(RecipeError, match=message.replace("(", r"\(").replace(")", r"\)")):
            resolvers.parse_resolver(bad)


@pytest.mark.parametrize("yaml_text,message", [
    ("messages:\n  - {role: robot, content: x, stream: low_level}\n", "Unsupported message role"),
    ("messages:\n  - {role: user, content: x}\n", "is missing a stream"),
    ("messages:\n  - {role: user, content: x, stream: mid}\n", "Unsupported message stream"),
    ("messages:\n  - {role: user, stream: low_level}\n", "content is required unless tool_calls_from"),
    ("messages:\n  - {role: user, content: [{text: x}], stream: low_level}\n", "with a type key"),
    ("messages:\n  - {role: user, content: '${nope}', stream: low_level}\n", "unknown binding(s): ['nope']"),
    ("messages:\n  - {role: user, content: x, stream: high_level}\n", "at least one supervised turn"),
    ("messages:\n  - {role: user, content: x, stream: low_level, colour: red}\n", "unexpected key"),
    ("messages: []\nblend: {}\n", "only one of messages or blend"),
    ("bindings: {}\n", "must set one of messages or blend"),
    ("blend:\n  a:\n    messages:\n      - {role: user, content: x, stream: low_level}\n", "must define weight"),
    ("blend:\n  a:\n    weight: 0\n    messages:\n      - {role: user, content: x, stream: low_level}\n",
     "positive weight"),
    ("blend:\n  a:\n    weight: 1\n    blend: {}\n", "cannot itself define a blend"),
    ("blend:\n  a:\n    weight: 1\n", "must define messages"),
    ("blend: {}\n", "at least one component"),
    ("route: vqa\nmessages:\n  - {role: user, content: x, stream: low_level}\n", "only allowed on a blend"),
    ("blend:\n  a:\n    weight: 1\n    route: speech\n    messages:\n      - {role: user, content: x, "
     "stream: low_level}\n", "unsupported route"),
    ("messages:\n  - {role: user, content: '${b}', stream: low_level}\nbindings: {b: 'active_at(t, style=x)'}\n",
     "Unknown language style: 'x'"),
])
def test_recipe_validation(yaml_text, message):
    with pytest.raises(RecipeError) as info:
        rc.TrainingRecipe.from_yaml(yaml_text)
    assert message in str(info.value)


# ---------------------------------------------------------------------------------------------
# (d) validation rules


def _episode0(table, columns):
    sel = np.flatnonzero(table["episode_index"].to_numpy() == 0)
    persistent, events = columns
    p = lc.rows_to_python(persistent.take(sel))
    e = lc.rows_to_python(events.take(sel))
    return sel, p, e


def _validate(table, sel, p_frames, e_frames, **kw):
    lc.validate_language(lc.column_from_python(p_frames, "persistent"), lc.column_from_python(e_frames, "events"),
                         episode_index=0, frame_index=table["frame_index"].take(sel),
                         timestamps=table["timestamp"].take(sel), camera_keys=kw.pop("camera_keys", CAMERAS), **kw)


def test_corpus_episodes_validate(table, columns):
    persistent, events = columns
    for ep, sel in _episodes(table):
        lc.validate_language(persistent.take(sel), events.take(sel), episode_index=ep,
                             frame_index=table["frame_index"].take(sel), timestamps=table["timestamp"].take(sel),
                             camera_keys=CAMERAS)


def _expect_language_error(fn, *needles):
    with pytest.raises(LeRobotImportError) as info:
        fn()
    assert info.value.rule == "language"
    assert info.value.episode_index == 0
    for needle in needles:
        assert needle in info.value.message, info.value.message
    return info.value.message


def _edit_events(e, frame, row, **changes):
    e = copy.deepcopy(e)
    e[frame][row].update(changes)
    return e


def test_view_dependent_row_without_camera(table, columns):
    sel, p, e = _episode0(table, columns)
    bad = _edit_events(e, 1, 2, camera=None)
    _expect_language_error(lambda: _validate(table, sel, p, bad), "language_events: episode 0 frame 1 row 2",
                           "view-dependent style 'vqa'")
    bad = _edit_events(e, 1, 0, camera="observation.images.side")
    _expect_language_error(lambda: _validate(table, sel, p, bad), "episode 0 frame 1 row 0", "observation.images.side")
    bad = _edit_events(e, 1, 0, camera="")
    _expect_language_error(lambda: _validate(table, sel, p, bad), "frame 1 row 0")


def test_other_style_with_camera(table, columns):
    sel, p, e = _episode0(table, columns)
    bad = _edit_events(e, 7, 1, camera="observation.images.front")
    _expect_language_error(lambda: _validate(table, sel, p, bad), "episode 0 frame 7 row 1",
                           "style 'interjection' must have no camera")
    bad = _edit_events(e, 7, 0, camera="")  # speech atom (style None): even "" is a camera
    _expect_language_error(lambda: _validate(table, sel, p, bad), "frame 7 row 0", "style None must have no camera")
    p2 = copy.deepcopy(p)
    for frame in p2:
        frame[3]["camera"] = "observation.images.front"
    _expect_language_error(lambda: _validate(table, sel, p2, e), "language_persistent: episode 0 frame 0 row 3",
                           "style 'task_aug'")


def test_unknown_style(table, columns):
    sel, p, e = _episode0(table, columns)
    bad = _edit_events(e, 10, 3, style="gossip")
    _expect_language_error(lambda: _validate(table, sel, p, bad), "episode 0 frame 10 row 3", "unknown style 'gossip'")


def test_style_in_wrong_column(table, columns):
    sel, p, e = _episode0(table, columns)
    bad = _edit_events(e, 7, 1, style="subtask")
    _expect_language_error(lambda: _validate(table, sel, p, bad), "frame 7 row 1", "belongs in language_persistent")


def test_persistent_rows_differ_between_frames(table, columns):
    sel, p, e = _episode0(table, columns)
    changed = copy.deepcopy(p)
    changed[5][2]["content"] = "put the mug on the shelf"
    _expect_language_error(lambda: _validate(table, sel, changed, e), "episode 0 frame 5 row 2",
                           "differ from those of frame 0")
    shorter = copy.deepcopy(p)
    del shorter[9][11]
    _expect_language_error(lambda: _validate(table, sel, shorter, e), "episode 0 frame 9 row 11")
    calls = copy.deepcopy(p)
    for frame in calls:
        frame[0]["tool_calls"] = [_say("a")]
    calls[4][0]["tool_calls"] = [_say("b")]
    _expect_language_error(lambda: _validate(table, sel, calls, e), "episode 0 frame 4 row 0")


def test_persistent_timestamp_outside_episode(table, columns):
    sel, p, e = _episode0(table, columns)
    last = float(table["timestamp"].take(sel).to_numpy().max())
    late = copy.deepcopy(p)
    for frame in late:
        frame[11]["timestamp"] = last + 0.1
    _expect_language_error(lambda: _validate(table, sel, late, e), "episode 0 frame 0 row 11", "outside the episode")
    # The bounds are inclusive, and can be given explicitly.
    ok = copy.deepcopy(p)
    for frame in ok:
        frame[11]["timestamp"] = last
    _validate(table, sel, ok, e)
    _validate(table, sel, late, e, episode_end=last + 0.1)
    early = copy.deepcopy(p)
    for frame in early:
        frame[0]["timestamp"] = -0.5
    _expect_language_error(lambda: _validate(table, sel, early, e), "frame 0 row 0", "-0.5")
    nan = copy.deepcopy(p)
    for frame in nan:
        frame[5]["timestamp"] = float("nan")
    _expect_language_error(lambda: _validate(table, sel, nan, e), "frame 0 row 5", "nan")


def test_null_row(table, columns):
    sel, p, e = _episode0(table, columns)
    bad = copy.deepcopy(e)
    bad[3] = [None]
    _expect_language_error(lambda: _validate(table, sel, p, bad), "episode 0 frame 3 row 0", "null")


# ---------------------------------------------------------------------------------------------
# The fast episode path equals the one-frame reference on random episodes.

_STYLES = st.sampled_from(["subtask", "plan", "memory", "task_aug", "motion"])
_persistent_row = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant"]), "content": st.one_of(st.none(), st.sampled_from(["a", "b", "c"])),
    "style": _STYLES, "timestamp": st.integers(0, 12).map(lambda k: float(np.float32(k / 10))),
    "camera": st.none(), "tool_calls": st.none()})
_event_row = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": st.sampled_from(["q", "r"]),
                           "style": st.just("vqa"), "camera": st.sampled_from(sorted(CAMERAS)),
                           "tool_calls": st.none()}),
    st.fixed_dictionaries({"role": st.just("user"), "content": st.just("stop"), "style": st.just("interjection"),
                           "camera": st.none(), "tool_calls": st.none()}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(), "style": st.none(),
                           "camera": st.none(), "tool_calls": st.just([_say("ok")])}))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(persistent_rows=st.lists(_persistent_row, max_size=8),
       events=st.lists(st.lists(_event_row, max_size=3), min_size=1, max_size=14),
       start=st.integers(0, 10_000), recipe_name=st.sampled_from(RECIPE_NAMES),
       mode=st.sampled_from(["sample", "sample_task", "processor"]), vary=st.booleans())
def test_episode_path_equals_reference(persistent_rows, events, start, recipe_name, mode, vary):
    """`vary` gives frames different persistent lists (invalid data, but it must still render
    like LeRobot does)."""
    recipe = rc.load_recipe(os.path.join(EXPECTED, "recipes", f"{recipe_name}.yaml"))
    n = len(events)
    ts = (np.arange(n, dtype=np.float32) / np.float32(10)).astype(np.float32)
    p_frames = [persistent_rows[: i % (len(persistent_rows) + 1)] if vary else persistent_rows for i in range(n)]
    p_col = lc.column_from_python(p_frames, "persistent")
    e_col = lc.column_from_python(events, "events")
    got = render.render_episode(recipe, persistent=p_col, events=e_col, timestamps=ts,
                                 indices=range(start, start + n), task="the task", mode=mode, errors="record")
    p_py = lc.rows_to_python(p_col)
    e_py = lc.rows_to_python(e_col)
    for i in range(n):
        kw = dict(persistent=p_py[i], events=e_py[i], t=float(ts[i]), sample_idx=start + i)
        try:
            if mode == "processor":
                want = render.render_processor(recipe, **kw, task="the task")
            elif mode == "sample":
                want = render.render_sample(recipe, **kw, dataset_task="the task")
            else:
                want = render.render_sample(recipe, **kw, task="the task")
        except ValueError as exc:
            want = {"error": f"ValueError: {exc}"}
        assert got[i] == want, i
