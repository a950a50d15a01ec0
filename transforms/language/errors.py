"""The language package's two errors: a recipe that cannot be read or breaks a recipe rule (`RecipeError`,
rule `recipe`), and a frame that cannot be rendered (`RenderError`, rule `render`).

Both belong to the importer's error family (`LeRobotImportError`) and are also `ValueError`s, as LeRobot
raises `ValueError` for the same problems.
"""

from __future__ import annotations

from typing import Optional

from transforms.base.errors import LeRobotImportError


class RecipeError(LeRobotImportError, ValueError):
    """A recipe cannot be read (too large, not YAML, anchors, too deep) or breaks LeRobot's recipe rules.

    Args:
        cause: what is wrong, in words a recipe author can act on.
        recipe: the recipe's name (its file, or `<recipe text>`); added later by `with_recipe` when the
            raiser does not know it.
        line, column: 1-based position of a YAML problem in the recipe text.
    """

    def __init__(self, cause: str, *, recipe: Optional[str] = None, line: Optional[int] = None,
                 column: Optional[int] = None) -> None:
        self.cause = cause
        self.recipe = recipe
        self.line = line
        self.column = column
        where = f"recipe {recipe}: " if recipe else ""
        if line is not None:
            where += f"line {line}, column {column}: "
        super().__init__("recipe", where + cause)

    def with_recipe(self, recipe: str) -> "RecipeError":
        """The same error naming `recipe` (unchanged when it already names one)."""
        if self.recipe:
            return self
        return RecipeError(self.cause, recipe=recipe, line=self.line, column=self.column)

    def __reduce__(self):
        return (_rebuild_recipe_error, (self.cause, self.recipe, self.line, self.column))


def _rebuild_recipe_error(cause: str, recipe: Optional[str], line: Optional[int],
                          column: Optional[int]) -> RecipeError:
    return RecipeError(cause, recipe=recipe, line=line, column=column)


class RenderError(LeRobotImportError, ValueError):
    """Rendering one frame raised, as LeRobot's renderer raises for it (e.g. an ambiguous resolver).

    Args:
        cause: the resolver's message, word for word as LeRobot gives it.
        index: the frame's global index (LeRobot's `sample_idx`).
        timestamp: the frame's time (LeRobot's `t`).
        component: the blend component being rendered (None for a recipe that is not a blend).
        binding: the binding whose resolver raised (None when the failure is not a binding's).
        episode_index: the frame's episode, when the caller knows it.
    """

    def __init__(self, cause: str, *, index: int, timestamp: float, component: Optional[str] = None,
                 binding: Optional[str] = None, episode_index: Optional[int] = None) -> None:
        self.cause = cause
        self.index = index
        self.timestamp = timestamp
        self.component = component
        self.binding = binding
        where = f"frame with index {index} (t={timestamp!r})"
        if component is not None:
            where += f", blend component {component!r}"
        if binding is not None:
            where += f", binding {binding!r}"
        super().__init__("render", f"{where}: {cause}", episode_index=episode_index)

    def __reduce__(self):
        return (_rebuild_render_error, (self.cause, self.index, self.timestamp, self.component, self.binding,
                                        self.episode_index))


def _rebuild_render_error(cause: str, index: int, timestamp: float, component: Optional[str],
                          binding: Optional[str], episode_index: Optional[int]) -> RenderError:
    return RenderError(cause, index=index, timestamp=timestamp, component=component, binding=binding,
                       episode_index=episode_index)
