"""Language annotations and LeRobot training recipes. Pure: never imports Beam.

    columns     the `language_persistent` / `language_events` columns: canonical Arrow types, the
                normalisation of what LeRobot's annotation writer puts on disk, validation
    recipe      the recipe model (`TrainingRecipe`, `MessageTurn`), its rules, and bounded safe
                reading of recipe YAML (`parse_recipe`, `load_recipe`)
    resolvers   what a binding answers for a frame (`active_at`, `emitted_at`, `nth_prev`, `nth_next`)
    render      frames -> chat samples, as LeRobot's `RenderMessagesStep` renders them
    errors      `RecipeError` (rule `recipe`) and `RenderError` (rule `render`)
"""

from transforms.language.columns import (
    LANGUAGE_EVENTS,
    LANGUAGE_PERSISTENT,
    column_for_style,
    column_from_python,
    events_type,
    normalize_language_column,
    persistent_type,
    rows_to_python,
    validate_language,
)
from transforms.language.errors import RecipeError, RenderError
from transforms.language.recipe import (
    MAX_RECIPE_BYTES,
    MAX_RECIPE_DEPTH,
    MAX_RECIPE_NODES,
    MessageTurn,
    TrainingRecipe,
    load_recipe,
    load_yaml,
    parse_recipe,
    read_recipe_file,
)
from transforms.language.render import (
    fallback_render,
    render_component,
    render_episode,
    render_processor,
    render_sample,
    resolve_task,
    select_component,
)
from transforms.language.resolvers import (
    DEFAULT_BINDINGS,
    RESOLVERS,
    PersistentTables,
    ResolverSpec,
    active_at,
    emitted_at,
    nth_next,
    nth_prev,
    parse_resolver,
)

__all__ = [
    "DEFAULT_BINDINGS", "LANGUAGE_EVENTS", "LANGUAGE_PERSISTENT", "MAX_RECIPE_BYTES", "MAX_RECIPE_DEPTH",
    "MAX_RECIPE_NODES", "RESOLVERS", "MessageTurn", "PersistentTables", "RecipeError", "RenderError",
    "ResolverSpec", "TrainingRecipe", "active_at", "column_for_style", "column_from_python", "emitted_at",
    "events_type", "fallback_render", "load_recipe", "load_yaml", "normalize_language_column", "nth_next",
    "nth_prev", "parse_recipe", "parse_resolver", "persistent_type", "read_recipe_file", "render_component",
    "render_episode", "render_processor", "render_sample", "resolve_task", "rows_to_python",
    "select_component", "validate_language",
]
