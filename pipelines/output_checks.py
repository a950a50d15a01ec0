"""What an output folder already holds, checked before a run writes anything to it (Beam-free).

A manifest.json that no import wrote (not JSON, no `episodes_files`) is the user's file, or a damaged
one: an import would replace it, so it is refused unless `--force` says to replace it.
"""

from __future__ import annotations

from typing import Optional

from pipelines.cli import UsageError
from pipelines.targets import RunTargets
from transforms import storage
from transforms.episode import output_state, paths


def check_outputs(planned: RunTargets, output: str, *, force: bool) -> None:
    """Refuse (UsageError, exit status 2) a run that would overwrite a manifest.json no import wrote (unless
    `force`). Nothing is written before."""
    problem = None
    if not force:
        problem = next(filter(None, (foreign_manifest(target) for _, target in planned.targets)), None)
    if problem is not None:
        raise UsageError(f"error: {problem}")


def foreign_manifest(target: str) -> Optional[str]:
    """Why the manifest.json in `target` is one the import must not replace without --force, else None."""
    found = output_state.read_manifest(target)
    if found.problem is None or found.problem.rule != "manifest":
        return None
    return (f"{storage.join(target, paths.MANIFEST)} {_why(found.problem)}: no import wrote it as it is, and this "
            "run would replace it. Move it away, or give --force to replace it (the dataset is then imported whole)")


def _why(problem) -> str:
    message = problem.message
    start = message.find(f"{paths.MANIFEST} of ")
    if start >= 0:  # "manifest.json of OUT is not JSON (...): it was truncated ..." -> "is not JSON (...)"
        message = message[start:].split(" ", 3)[-1].split(": it was truncated")[0]
    return message
