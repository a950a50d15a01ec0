"""What the command line means: `--help` that teaches, options that are checked, and the conventions a
shell user expects (`--version`, `-q`/`-v`, exit status 2 for a wrong command line).

Beam's PipelineOptions takes the whole command line but prints no help for it and drops options it
does not know with a log line; a misspelt `--skip_video` would import the videos anyway. This front
prints the import's own options (declared Beam-free in `pipelines.arguments`), points at Beam's options
without dumping them (`--help-beam` prints those), and refuses an option neither the import nor Beam
knows, with the closest known one. `--help` and `--version` never import Beam (it takes seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import re
import sys
from importlib import metadata
from typing import Optional, Sequence

from pipelines import arguments
from pipelines.console import UsageError, add_verbosity_arguments

PROG = "lerobot-import"

DESCRIPTION = """\
Import LeRobot v3 datasets as typed episode records: one row per episode, every frame feature typed
as meta/info.json declares it, one clip per camera pointing into the dataset's own MP4.

usage:
  lerobot-import --dataset ROOT --output OUT [import options] [Beam pipeline options]
  lerobot-import render --recipe R.yaml --input OUT --output SAMPLES [...]   (lerobot-import render --help)
  lerobot-import verify OUT [--sources]                                       (check an import; --help)
  lerobot-import plan --dataset ROOT --output OUT                             (what a run would do; --help)
  lerobot-import check DATASET [--strict CHECK,...] [--json]                  (quality checks alone; --help)
  python -m pipelines.import_lerobot ...                                      (the same command)
"""

EXIT_STATUS = """\
exit status:
  0  every episodes file of every dataset imported (or was up to date)
  1  an episodes file or a dataset failed (errors.jsonl and the summary say why), an input could not
     be read, or every output is being imported by another run
  2  the command line is wrong (an unknown option, a bad value, a missing --output, a Hub repo id
     given as a path, an output inside its dataset); nothing was read or written
"""

EPILOG = """\
output:
  A local run shows its progress: on a terminal a live line (episodes files committed, episodes and
  frames read, data and MP4 bytes read, rate, time left), else a log line every 30 s. Beam's own
  chatter and per-request HTTP logs are hidden; -v shows them, -q shows only errors and the summary.

Beam pipeline options:
  Every other option is Apache Beam's and goes on the same command line: --runner (default
  DirectRunner, this machine; DataflowRunner on Google Cloud), --direct_num_workers,
  --project, --region, --temp_location, --setup_file, --max_num_workers, ... List them with
  `lerobot-import --help-beam`, or see the help of apache_beam's PipelineOptions.

examples:
  # a local dataset, on this machine
  lerobot-import --dataset ~/datasets/so101 --output out/so101

  # every dataset under a Cloud Storage folder, on Dataflow (each into OUT/<dataset name>/)
  lerobot-import --datasets 'gs://BUCKET/lerobot/*' --output gs://BUCKET/imports \\
      --runner DataflowRunner --project PROJECT --region us-central1 \\
      --temp_location gs://BUCKET/tmp --setup_file ./setup.py

  # then render the language annotations of an import with a LeRobot recipe
  lerobot-import render --recipe subtask.yaml --input out/so101 --output samples

what it writes:
  OUT/episodes/...       one Parquet file per episodes file of the dataset (or ordered parts)
  OUT/media_index/...    each MP4's frame index, read once from its moov box
  OUT/errors.jsonl       one row per failure: dataset, episodes file, episode, file, rule, message
  OUT/manifest.json      what was imported, with totals
  OUT/.lease.json        while a run imports: which run holds the output (a second run skips it, or
                         waits with --wait-for-lease; a lease left by a dead run expires and is taken over)

A failed episodes file leaves no output; the others still import.

""" + EXIT_STATUS


def import_parser() -> argparse.ArgumentParser:
    """The import's options (exactly `ImportOptions` and `RunOptions`), for `--help`."""
    parser = argparse.ArgumentParser(prog=PROG, usage=argparse.SUPPRESS, description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False)
    group = parser.add_argument_group("import options")
    arguments.add_import_arguments(group)
    arguments.add_run_arguments(group)
    add_verbosity_arguments(parser.add_argument_group("output"))
    other = parser.add_argument_group("help")
    other.add_argument("-h", "--help", action="store_true", help="Print this help and exit.")
    other.add_argument("--help-beam", action="store_true", help="Print Apache Beam's pipeline options and exit.")
    other.add_argument("--version", action="store_true", help="Print the version (and Beam's, pyarrow's) and exit.")
    return parser


def import_help() -> str:
    return import_parser().format_help()


def version_text() -> str:
    """`lerobot-import 0.1.0 (apache-beam 2.77.0, pyarrow 21.0.0, Python 3.11.7)`, read from the installed
    packages' metadata (no import of Beam)."""
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"
    python = ".".join(str(n) for n in sys.version_info[:3])
    return (f"{PROG} {version('lerobot-beam-import')} (apache-beam {version('apache-beam')}, "
            f"pyarrow {version('pyarrow')}, Python {python})")


def beam_help() -> str:
    """Apache Beam's own pipeline options (every PipelineOptions class but the import's)."""
    from pipelines.options import ImportOptions, RunOptions
    parser = _parser_class()(prog=f"{PROG} ... [Beam pipeline options]", add_help=False, usage=argparse.SUPPRESS,
                             description="Apache Beam pipeline options (they follow the import options on the "
                                         "command line):")
    for cls in _options_classes(dask=True):
        if cls not in (ImportOptions, RunOptions):
            try:
                cls._add_argparse_args(parser)
            except argparse.ArgumentError:
                continue  # a class registered twice (a re-imported module)
    return parser.format_help()


def help_requested(argv: Sequence[str]) -> Optional[str]:
    """The text to print when `argv` asks for one (`-h`, `--help`, `--help-beam`, `--version`), else None."""
    args = [a for a in argv if a != "--"]
    if "--help-beam" in args:
        return beam_help()
    if "-h" in args or "--help" in args:
        return import_help()
    if "--version" in args:
        return version_text()
    return None


def split_verbosity(argv: Sequence[str]) -> tuple[int, list[str]]:
    """(-1 quiet | 0 | 1 -v | 2 -vv, the other arguments): -q/-v are the command's, not Beam's.

    Raises:
        UsageError: both -q and -v.
    """
    quiet, verbose, rest = False, 0, []
    for arg in argv:
        if arg in ("-q", "--quiet"):
            quiet = True
        elif arg in ("-v", "--verbose"):
            verbose += 1
        elif re.fullmatch(r"-v{2,}", arg):
            verbose += len(arg) - 1
        else:
            rest.append(arg)
    if quiet and verbose:
        raise UsageError(f"{PROG}: error: -q/--quiet and -v/--verbose contradict each other; give one")
    return (-1 if quiet else min(verbose, 2)), rest


def check_arguments(argv: Sequence[str]) -> None:
    """Refuse (UsageError, with the closest known option) an argument that neither the import nor any of
    Beam's options classes knows: Beam would drop it with a log line and the run would do something else
    than asked. A bad value of a known option is refused the same way, without Beam's whole usage."""
    parser = _all_options_parser(dask=any(a.startswith("--dask_") for a in argv))
    _, unknown = parser.parse_known_args(list(argv))
    problems = []
    known = sorted({s for a in parser._actions for s in a.option_strings})  # noqa: SLF001 - argparse API
    value_of_unknown = False
    for arg in unknown:
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            problems.append(f"unknown option {name}" + (f" (did you mean {close[0]}?)" if close else ""))
            value_of_unknown = "=" not in arg
            continue
        if value_of_unknown and not arg.startswith("-"):
            value_of_unknown = False  # the unknown option's value
            continue
        if not arg.startswith("-"):
            problems.append(f"unexpected argument {arg!r} (options take the form --name VALUE)")
        else:
            problems.append(f"unknown option {arg}")
    if problems:
        text = "; ".join(problems[:5])
        raise UsageError(f"{PROG}: error: {text}. See `{PROG} --help`.")


def _parser_class() -> type:
    """Beam's parser (some options classes declare template (value provider) arguments through it), refusing
    a bad value with one line instead of the usage of every Beam option."""
    try:
        from apache_beam.options.pipeline_options import _BeamArgumentParser as base
    except ImportError:  # pragma: no cover - an older or newer Beam without it
        base = argparse.ArgumentParser

    class Parser(base):
        def error(self, message: str):
            raise UsageError(f"{PROG}: error: {message}. See `{PROG} --help`.")

    return Parser


def _options_classes(dask: bool = False) -> list[type]:
    """Every PipelineOptions class once (the import's included), as Beam itself collects them; with `dask`,
    also the Dask runner's (`--dask_client_address`, ...), whose module loads Dask: only a command line that
    gives one of them pays for it."""
    from apache_beam.options.pipeline_options import PipelineOptions

    import pipelines.options  # noqa: F401 - registers ImportOptions and RunOptions
    if dask:
        with contextlib.suppress(ImportError):  # without apache-beam[dask] they stay unknown options
            import apache_beam.runners.dask.dask_runner  # noqa: F401 - registers DaskOptions
    seen: dict[str, type] = {}
    for cls in PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    return list(seen.values())


def _all_options_parser(dask: bool = False) -> argparse.ArgumentParser:
    parser = _parser_class()(add_help=False, allow_abbrev=False)
    for cls in _options_classes(dask):
        try:
            cls._add_argparse_args(parser)
        except argparse.ArgumentError:
            continue  # a class registered twice (a re-imported module): its options are known already
    parser.add_argument("-h", "--help", "--help-beam", "--version", action="store_true")
    return parser
