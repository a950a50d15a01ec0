"""The `lerobot-import` command: its arguments parsed just enough to dispatch, to the import or to one of its
subcommands (`render`, `verify`, `plan`, `check`). The console script and `python -m pipelines.cli` start here.

What the command line means is `pipelines.command_line` (help, version, checked options); each subcommand
is a module of its own, loaded only when asked for, so `--help` and `--version` never import Beam.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from pipelines import command_line, console
from pipelines.console import EXIT_OK, EXIT_USAGE, UsageError

SUBCOMMANDS = ("render", "verify", "plan", "check")


def dispatch(argv: Optional[Sequence[str]] = None) -> None:
    """The `lerobot-import` command: an import, or its `render`, `verify`, `plan` and `check` subcommands.

    Unlike `import_lerobot.run` (which the Flex Template launcher also calls, with whatever flags Dataflow
    adds), the command refuses options that neither the import nor Beam knows instead of ignoring them.
    Exits with the command's status (`EXIT_STATUS`); a wrong command line prints one line and exits 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with console.kept_streams():  # a terminal that cannot be written loses the text, never the import
        _dispatch(argv)


def _dispatch(argv: list[str]) -> None:
    try:
        verbosity, argv = command_line.split_verbosity(argv)
        sub = argv[0] if argv[:1] and argv[0] in SUBCOMMANDS else None
        if sub is None:
            text = command_line.help_requested(argv)
            if text is not None:
                print(text)
                sys.exit(EXIT_OK)
        console.configure_logging(verbosity, dataflow=_names_dataflow(argv))
        from pipelines import interrupts
        with interrupts.handling():  # from here on, Ctrl-C is one line and exit 130, never a traceback
            try:
                interrupts.checkpoint()  # a signal met while the command loaded
                if sub is not None:
                    status = _subcommand(sub, argv[1:])
                else:
                    command_line.check_arguments(argv)
                    from pipelines import import_lerobot
                    status = import_lerobot.run(argv, verbosity=verbosity)
            except interrupts.Interrupted as ex:
                interrupts.handled()
                print(_interrupted(sub, ex.signum))
                status = interrupts.status(ex.signum)
        if status in (interrupts.status(s) for s in interrupts.SIGNALS):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)  # the pipeline's threads are stopped, not waited for
        sys.exit(status)
    except UsageError as ex:
        print(str(ex), file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _subcommand(sub: str, argv: list[str]) -> int:
    """Run subcommand `sub` with its own command line; its exit status."""
    if sub == "render":
        from pipelines import render_recipes
        return render_recipes.run(argv)
    if sub == "verify":
        from pipelines import verify
        return verify.run(argv)
    if sub == "plan":
        from pipelines import plan
        return plan.run(argv)
    from pipelines import check
    return check.run(argv)


def _interrupted(sub: Optional[str], signum: int) -> str:
    """The one line a signal ends the command with, when the import itself has not said more."""
    from pipelines import interrupts
    if sub is None:
        return (f"interrupted by {interrupts.name(signum)} before the import started: nothing was written "
                "and no lease taken")
    if sub == "render":  # its files move into place as one step, which a signal waits for (see render_recipes)
        return (f"interrupted by {interrupts.name(signum)}: the render stopped; its output keeps the files of "
                "the last render that finished, and its lease is released")
    return f"interrupted by {interrupts.name(signum)}: `lerobot-import {sub}` stopped (it writes nothing)"


def _names_dataflow(argv: Sequence[str]) -> bool:
    """The command line runs on Dataflow (whose own job messages stay as Beam prints them)."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--runner=") else (
            argv[i + 1] if arg == "--runner" and i + 1 < len(argv) else None)
        if value is not None and "dataflow" in value.lower():
            return True
    return False


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The `lerobot-import` command (an import, or its render, verify, plan and check subcommands).

    Without `argv` it is the process's own command (the console script, `python -m`): the process ends
    as soon as the command has (`console.end_process`)."""
    if argv is not None:
        dispatch(argv)
        return
    from pipelines import interrupts
    interrupts.early()  # Ctrl-C while the rest loads is met, not a KeyboardInterrupt traceback
    from pipelines import local_runner
    local_runner.keep_beam_local(sys.argv[1:])
    try:
        dispatch()
    except SystemExit as ex:
        console.end_process(ex.code)


if __name__ == "__main__":
    main()
