"""Dataflow Flex Template entry point: submit the import and return at once.

The template launcher runs `python launcher.py --name=value ...` inside the image (one flag per
template parameter, plus the Beam options Dataflow adds) and treats the job as launched when this
process exits, so it calls `run(argv, wait=False)`: submit, never `wait_until_finish`.

Template parameters are strings, so the import's on/off flags arrive as `--inline_index=true`;
they are argparse store_true flags (no value), so they are rewritten here to `--inline_index`
(true) or dropped (false) before the pipeline parses its options.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from pipelines.console import EXIT_USAGE, UsageError
from pipelines.console import configure_logging
from pipelines.import_lerobot import run
from pipelines.options import ImportOptions

TRUE = frozenset({"true", "1", "yes"})
FALSE = frozenset({"false", "0", "no", ""})


def boolean_flags() -> dict[str, str]:
    """Every option string of the import's on/off flags, mapped to its option name."""
    parser = argparse.ArgumentParser(add_help=False)
    ImportOptions._add_argparse_args(parser)
    return {s: a.dest for a in parser._actions if a.nargs == 0 and a.const is True for s in a.option_strings}


def template_argv(argv: Sequence[str]) -> list[str]:
    """`argv` with `--flag=true|false` of the import's on/off flags turned into argparse's form."""
    flags = boolean_flags()
    out = []
    for arg in argv:
        name, sep, value = arg.partition("=")
        if not sep or name not in flags:
            out.append(arg)
        elif value.strip().lower() in TRUE:
            out.append(name)
        elif value.strip().lower() not in FALSE:
            raise UsageError(f"error: {name} takes true or false, not {value!r}")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    # The launcher's log is what the template's launch shows: the job's own messages, not Beam's type-hint
    # notes (one per DoFn) or per-request HTTP lines.
    configure_logging(0, dataflow=True)
    try:
        return run(template_argv(sys.argv[1:] if argv is None else argv), wait=False)
    except UsageError as ex:  # a template parameter the import refuses: one line in the launch log, status 2
        print(str(ex), file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
