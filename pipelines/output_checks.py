"""What an output folder already holds, checked before a run writes anything to it (Beam-free).

One layout per output folder: a run of one dataset writes OUT/manifest.json, episodes/, ... at the root;
a run of several (or `--datasets`) writes each dataset into OUT/<dataset name>/. Mixing the two in one
folder would nest imports beside a root import, where `verify OUT` and a reader of OUT see only the
root one: the run that would mix them is refused, naming the folder to use instead.

A manifest.json that no import wrote (not JSON, no `episodes_files`) is the user's file, or a damaged
one: an import would replace it, so it is refused unless `--force` says to replace it.
"""

from __future__ import annotations

from typing import Optional

from pipelines.console import UsageError
from pipelines.targets import RunTargets, dataset_name
from transforms.base import storage
from transforms.output import safety, paths

#: bulk_report.json: written at the root of a run over several datasets.
BULK_REPORT = "bulk_report.json"


def check_outputs(planned: RunTargets, output: str, *, force: bool) -> None:
    """Refuse (UsageError, exit status 2) a run that would mix the two layouts in `output`, or overwrite a
    manifest.json no import wrote (unless `force`). Nothing is written before."""
    out = storage.normalize_root(output)
    problem = layout_problem(planned, out, output)
    if problem is None and not force:
        problem = next(filter(None, (foreign_manifest(target) for _, target in planned.targets)), None)
    if problem is not None:
        raise UsageError(f"error: {problem}")


def layout_problem(planned: RunTargets, out: str, shown: str) -> Optional[str]:
    """Why this run's layout is not the one `out` already holds, else None."""
    if planned.bulk:
        found = safety.read_manifest(out).doc
        if found is None:
            return None
        return (f"{shown} holds the import of one dataset ({found.get('dataset')}: its manifest.json is at the "
                f"root); a run over several datasets writes each into {shown}/<dataset name>/, which would nest "
                "them beside it where verify and the reader of the folder do not look. Give this run another "
                "--output, or import each dataset into a folder of its own")
    (root, target), = planned.targets
    if target != out or storage.exists(storage.join(out, paths.MANIFEST)):
        return None
    nested = [name for name in storage.list_dir(out, dirs=True)
              if not name.startswith(".") and storage.exists(storage.join(out, f"{name}/{paths.MANIFEST}"))]
    if not nested and not storage.exists(storage.join(out, BULK_REPORT)):
        return None
    held = ", ".join(f"{n}/" for n in nested[:3]) + (", ..." if len(nested) > 3 else "")
    return (f"{shown} holds the imports of several datasets, each in a folder of its own ({held or BULK_REPORT}); "
            f"importing one dataset into its root would mix the two layouts. Give --output "
            f"{shown.rstrip('/')}/{dataset_name(root)} (where a run over several datasets puts it), or another "
            "folder")


def foreign_manifest(target: str) -> Optional[str]:
    """Why the manifest.json in `target` is one the import must not replace without --force, else None."""
    found = safety.read_manifest(target)
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
