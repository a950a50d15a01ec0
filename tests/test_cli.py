"""The command line a new user meets: `--help` that teaches, options that are checked, roots whose URL
names no filesystem, and a summary whose numbers are the manifest's."""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, SAMPLE, lerobot_dataset, read_errors, read_manifest, run_import, run_python
from pipelines import cli, import_lerobot
from pipelines.command_line import import_parser

IMPORT_OPTIONS = ("--dataset", "--datasets", "--output", "--force", "--one-part", "--read-in-parts",
                  "--data-span-limit", "--inline-index", "--skip-videos")


@pytest.fixture(autouse=True)
def _logging_as_it_was():
    """`main` sets up the process's logging (levels by verbosity, a handler): undo it after each test, so the
    tests after these see logging as pytest set it up."""
    from pipelines import console
    names = [""] + [n for n in console.levels(2)] + [console.TYPE_HINTS, console.DATAFLOW, "py.warnings"]
    levels = {n: logging.getLogger(n or None).level for n in names}
    handlers = list(logging.getLogger().handlers)
    yield
    for n, level in levels.items():
        logging.getLogger(n or None).setLevel(level)
    root = logging.getLogger()
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    logging.captureWarnings(False)


def _help_text(capsys, *argv: str) -> str:
    assert import_lerobot.run(list(argv)) == 0
    return capsys.readouterr().out


def test_help_lists_every_import_option_with_meaning_and_default(capsys):
    text = _help_text(capsys, "--help")
    declared = {s for a in import_parser()._actions for s in a.option_strings if s.startswith("--")}
    assert set(IMPORT_OPTIONS) <= declared
    for option in IMPORT_OPTIONS:
        assert option in text, option
    flat = " ".join(text.split())  # argparse wraps the help texts
    # each option: one meaning, and its default where it has one
    assert "--data_span_limit BYTES, --data-span-limit BYTES Bytes of its episodes' data one part may hold (with " \
           "--one-part: bytes of data files an episodes file may span). Default: 67108864 (64 MiB, the reference's " \
           "limit)." in flat
    assert "(same files, same options). Default: skip them." in flat
    assert "Default: once per MP4 under media_index/." in flat
    assert "Default: cameras are imported and a missing MP4 fails its episodes file." in flat
    assert ("Default: episodes files are written in ordered parts of whole episodes, each holding at most "
            "--data-span-limit bytes of its episodes' own data.") in flat
    assert "--read_in_parts, --read-in-parts Deprecated, does nothing: reading in parts is the default" in flat
    assert "Output root, a local path or a URL (required)" in flat


def test_help_has_two_examples_and_points_at_beam_and_render(capsys):
    text = _help_text(capsys, "-h")
    assert "lerobot-import --dataset ~/datasets/so101 --output out/so101" in text
    assert re.search(r"--datasets 'gs://BUCKET/lerobot/\*' --output gs://BUCKET/imports \\\n\s+--runner DataflowRunner",
                     text)
    assert "--runner" in text and "lerobot-import --help-beam" in text and "PipelineOptions" in text
    assert "lerobot-import render --recipe" in text and "lerobot-import render --help" in text
    assert "--temp_location" in text and "--max_num_workers" in text  # named, not described
    assert "--dataflow_service_options" not in text  # Beam's options are referred to, not dumped


def test_help_beam_prints_beams_options(capsys):
    text = _help_text(capsys, "--help-beam")
    assert "--runner" in text and "--temp_location" in text and "--direct_num_workers" in text
    assert "--skip-videos" not in text


@pytest.mark.parametrize("command", [[sys.executable, "-m", "pipelines.import_lerobot", "--help"],
                                     ["lerobot-import", "--help"]])
def test_help_from_the_shell(command):
    if command[0] == "lerobot-import":
        exe = Path(sys.executable).with_name("lerobot-import")
        if not exe.exists():
            pytest.skip("the lerobot-import entry point is not installed (pip install -e .)")
        command = [str(exe), *command[1:]]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage: import_lerobot.py [-h]" not in proc.stdout
    for option in IMPORT_OPTIONS:
        assert option in proc.stdout
    assert "examples:" in proc.stdout


def _usage_error(capsys, argv) -> str:
    """`lerobot-import ARGV` exits 2 with one line on stderr (returned) and nothing on stdout."""
    with pytest.raises(SystemExit) as raised:
        cli.main(argv)
    assert raised.value.code == 2, raised.value.code
    out, err = capsys.readouterr()
    assert out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 or lines[0].startswith("usage:"), err
    return lines[-1]


def test_misspelt_option_is_refused_with_the_right_one(tmp_path, capsys):
    message = _usage_error(capsys, ["--dataset", str(SAMPLE), "--output", str(tmp_path / "out"), "--skip_video"])
    assert "unknown option --skip_video (did you mean --skip_videos?)" in message
    assert "lerobot-import --help" in message
    assert not (tmp_path / "out").exists()


def test_positional_arguments_are_refused(tmp_path, capsys):
    message = _usage_error(capsys, [str(SAMPLE), str(tmp_path / "out")])
    assert f"unexpected argument {str(SAMPLE)!r} (options take the form --name VALUE)" in message


@pytest.mark.parametrize("argv, words", [
    (["--dataset", "d", "--output", "o", "--data-span-limit", "many"],
     "argument --data_span_limit/--data-span-limit: invalid int value: 'many'"),
    (["--dataset", str(SAMPLE)], "--output is required"),
    (["--output", "o"], "give --dataset ROOT (repeatable) or --datasets"),
    (["--dataset", str(SAMPLE), "--output", str(SAMPLE / "out")], "inside"),
    (["--dataset", "hdfz://cluster/x", "--output", "o"], "[url]"),
    (["-q", "-v", "--dataset", "d", "--output", "o"], "-q/--quiet and -v/--verbose contradict each other"),
    (["plan", "--dataset", "d"], "the following arguments are required: --output"),
    (["plan", "--output", "o", "--data-span-limit", "many"], "invalid int value: 'many'"),
    (["verify"], "the following arguments are required: output"),
    (["verify", "o", "--bogus"], "unrecognized arguments: --bogus"),
    (["render", "--input", "i", "--output", "o"], "the following arguments are required: --recipe"),
])
def test_usage_errors_exit_2_everywhere(capsys, argv, words):
    assert words in _usage_error(capsys, argv)


def test_a_hub_repo_id_given_as_a_path_gets_the_hf_url(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    message = _usage_error(capsys, ["--dataset", "lerobot/svla_so101_pickplace", "--output", "out"])
    assert message == ("error: there is no folder 'lerobot/svla_so101_pickplace' here; did you mean "
                       "hf://datasets/lerobot/svla_so101_pickplace (the Hugging Face Hub dataset "
                       "lerobot/svla_so101_pickplace)? Give Hub datasets as hf://datasets/OWNER/NAME[@REVISION].")
    assert "hf://datasets/lerobot/svla_so101_pickplace" in _usage_error(
        capsys, ["plan", "--datasets", "lerobot/svla_so101_pickplace", "--output", "out"])
    assert not (tmp_path / "out").exists()
    # a local folder of that name is what it names: no hint
    from pipelines.targets import hub_id_hint
    (tmp_path / "lerobot" / "svla_so101_pickplace").mkdir(parents=True)
    assert hub_id_hint("lerobot/svla_so101_pickplace") is None
    assert hub_id_hint("gs://lerobot/svla") is None and hub_id_hint("a/b/c") is None


def test_version_and_help_answer_without_beam_or_pyarrow():
    """`--help` and `--version` import neither Beam nor pyarrow (together seconds): the console script's
    module, then the command, in a fresh interpreter."""
    lines = run_python(
        "import sys, io, contextlib\n"
        "from pipelines.cli import main\n"
        "for argv in (['--version'], ['--help'], None, ['plan', '--help'], ['verify', '--help'],\n"
        "             ['render', '--help']):\n"
        "    if argv is None:\n"
        "        print('beam', 'apache_beam' in sys.modules, 'pyarrow', 'pyarrow' in sys.modules)\n"
        "        continue\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        try:\n"
        "            main(argv)\n"
        "        except SystemExit as ex:\n"
        "            code = ex.code\n"
        "    print(argv, code, buf.getvalue().splitlines()[0])\n"
        "print('beam', 'apache_beam' in sys.modules)\n")
    from importlib import metadata
    assert lines[0] == (f"['--version'] 0 lerobot-import {metadata.version('lerobot-beam-import')} (apache-beam "
                        f"{metadata.version('apache-beam')}, pyarrow {metadata.version('pyarrow')}, Python "
                        f"{'.'.join(map(str, sys.version_info[:3]))})")
    assert lines[1].startswith("['--help'] 0 Import LeRobot v3.0 datasets, and v2.0 / v2.1 datasets")
    assert lines[2] == "beam False pyarrow False"
    assert lines[3].startswith("['plan', '--help'] 0 usage: lerobot-import plan")
    assert lines[4].startswith("['verify', '--help'] 0 usage: lerobot-import verify")
    assert lines[5].startswith("['render', '--help'] 0 usage: lerobot-import render")
    assert lines[6] == "beam False"  # plan, verify and render need no Beam for their help either


def _described(parser) -> list[str]:
    return [a.dest for a in parser._actions if not (a.help or "").strip() or a.help == argparse.SUPPRESS]


def test_every_option_of_every_subcommand_is_described():
    from pipelines import plan, verify
    from pipelines.render_recipes import render_parser
    assert _described(import_parser()) == []
    assert _described(plan._parser()) == []
    assert _described(render_parser()) == []
    # verify builds its parser inside run: its help text has a sentence for each option and the positional
    import io
    import contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        verify.run(["--help"])
    text = " ".join(buf.getvalue().split())
    for words in ("An import's output root", "Also report episodes files stale", "Print the reports as JSON",
                  "Print only errors and the summary"):
        assert words in text


def _statuses(block: str) -> dict[str, str]:
    """An `exit status:` block of a --help as {status: its meaning on one line}."""
    out: dict[str, str] = {}
    code = None
    for line in block.splitlines()[1:]:
        head, _, rest = line.strip().partition("  ")
        if head.isdigit():
            code, out[head] = head, rest.strip()
        elif code is not None:
            out[code] += " " + line.strip()
    return out


def test_exit_statuses_are_documented_in_help_and_readme(capsys):
    """Each command's --help ends with its exit statuses, and the README's table holds the same words, row by
    row (the import, plan and verify columns)."""
    from pipelines import command_line, plan, verify
    assert command_line.EXIT_STATUS in _help_text(capsys, "--help")
    readme = (REPO / "README.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in readme.splitlines() if re.match(r"^\| [0-9]+ \|", line)}
    for block in (command_line.EXIT_STATUS, plan.EXIT_STATUS, verify.EXIT_STATUS):
        for code, meaning in _statuses(block).items():
            assert f"| {meaning} |" in rows.get(code, ""), (code, meaning)
    assert set(_statuses(command_line.EXIT_STATUS)) == {"0", "1", "2"}


def test_beam_options_pass_the_check(tmp_path):
    from pipelines import command_line
    command_line.check_arguments(["--dataset", "x", "--output", "y", "--runner", "FnApiRunner",
                                  "--direct_num_workers=2", "--project", "p", "--region", "us-central1",
                                  "--temp_location", "gs://b/tmp"])


@pytest.mark.parametrize("flag", ["--dataset", "--output"])
def test_unknown_url_scheme_is_named(tmp_path, flag):
    argv = {"--dataset": str(SAMPLE), "--output": str(tmp_path / "out")}
    argv[flag] = "hdfz://cluster/x"
    with pytest.raises(SystemExit) as raised:
        run_import(argv["--dataset"], argv["--output"])
    message = str(raised.value)
    assert message.startswith("error: [url]") and "`hdfz://`, a URL scheme no filesystem is known for" in message


def test_chained_url_root_is_refused(tmp_path):
    with pytest.raises(SystemExit) as raised:
        run_import(f"simplecache::file://{SAMPLE}", tmp_path / "out")
    assert "chains filesystems with `::`" in str(raised.value)


def test_summary_numbers_are_the_manifests(tmp_path, capsys):
    """The summary line, the manifest and errors.jsonl give the same numbers, and so does the metrics
    line's `errors` counter."""
    root = Path(shutil.copytree(lerobot_dataset("h264_multi_file"), tmp_path / "ds",
                                ignore=shutil.ignore_patterns("expected*")))
    (root / "data" / "chunk-001" / "file-001.parquet").unlink()  # fails episodes file chunk-002/file-000
    out = tmp_path / "out"
    assert run_import(root, out) == 1
    printed = capsys.readouterr().out.splitlines()
    line = next(x for x in printed if x.startswith(f"file://{root}:"))
    totals = read_manifest(out)["totals"]
    errors = read_errors(out)
    assert totals["errors"] == len(errors)
    expected = (f"failed - {totals['episodes_written']}/{totals['episodes']} episodes, {totals['frames']} frames, "
                f"{totals['episodes_files_imported']}/{totals['episodes_files']} episodes files, "
                f"{totals['errors']} errors")
    assert expected in line, (expected, line)
    assert (totals["episodes_files_imported"], totals["episodes_files"]) == (4, 5)
    metrics = dict(item.split("=") for item in next(x for x in printed if x.startswith("metrics: "))[9:].split(", "))
    assert int(metrics["errors"]) == totals["errors"], metrics

def _main(capfd, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        cli.main(list(argv))
    out, err = capfd.readouterr()
    return done.value.code, out, err


def test_a_run_prints_nothing_a_user_cannot_act_on(tmp_path, capfd):
    """By default: the summary on stdout and nothing on stderr: no per-file line (-v adds those), not Beam's
    warning about a DoFn or its type-hint notes. -q: the summary alone."""
    code, out, err = _main(capfd, "--dataset", str(SAMPLE), "--output", str(tmp_path / "a"), "--runner", "FnApiRunner")
    assert code == 0, err
    # (a run longer than 30 s, on a loaded machine, also logs its progress line)
    lines = [line for line in err.splitlines() if not line.startswith("INFO pipelines.progress: progress: [")]
    assert lines == [], err
    assert out.startswith(f"file://{SAMPLE}: imported - 4/4 episodes")
    code, out, err = _main(capfd, "-q", "--dataset", str(SAMPLE), "--output", str(tmp_path / "b"),
                           "--runner", "FnApiRunner")
    assert code == 0 and err == "", err
    assert out.splitlines()[0] == f"file://{SAMPLE}: imported - 4/4 episodes, 46 frames, 1/1 episodes " \
                                  f"files, 0 errors -> file://{tmp_path / 'b'}"


def test_verbosity_levels():
    from pipelines import console
    default, verbose, quiet = console.levels(0), console.levels(1), console.levels(-1)
    assert default["transforms"] == logging.INFO and default["apache_beam"] == logging.ERROR
    assert default["httpx"] == logging.ERROR and default["huggingface_hub"] == logging.ERROR
    assert default[console.TYPE_HINTS] == logging.ERROR and console.DATAFLOW not in default
    assert console.levels(0, dataflow=True)[console.DATAFLOW] == logging.INFO  # the job's URL and state
    assert verbose["apache_beam"] == logging.WARNING and verbose["transforms"] == logging.DEBUG
    assert {v for k, v in quiet.items() if k != console.HUB_RETRIES} == {logging.ERROR}
    # huggingface_hub's own retry lines stay enabled at every verbosity: the Hub reader counts them
    assert {levels[console.HUB_RETRIES] for levels in (default, verbose, quiet)} == {logging.WARNING}
    assert console.levels(2)["apache_beam"] == logging.DEBUG


def test_library_retries_are_counted_but_not_printed_after_the_command_set_up_logging(capfd):
    """huggingface_hub says it retries (a listing page) only in a WARNING line: with the command's logging
    (libraries at ERROR), the Hub reader still counts it (the hub_retries counter) and the terminal shows
    nothing; -v shows it."""
    from pipelines import console
    from transforms.base import hub
    hub._count_library_retries()
    retry = logging.getLogger("huggingface_hub.utils._http")
    try:
        console.configure_logging(0)
        capfd.readouterr()
        before = hub.retry_count()
        retry.warning("Retrying in 1s [Retry 1/5].")
        assert hub.retry_count() == before + 1
        assert "Retrying" not in capfd.readouterr().err
        console.configure_logging(1)
        retry.warning("Retrying in 2s [Retry 2/5].")
        assert hub.retry_count() == before + 2
        assert "Retrying in 2s" in capfd.readouterr().err
    finally:
        console.configure_logging(0)


def test_beams_notices_on_the_root_logger_show_only_where_beams_own_lines_do(capfd):
    """Beam logs a notice on the root logger when imported without its Google Cloud libraries (the default
    install): hidden by default like Beam's other warnings, shown with -v; the project's own root-logger
    warnings still show."""
    from pipelines import console

    def from_beam(message: str) -> None:  # a record as Beam's module makes it
        record = logging.LogRecord("root", logging.WARNING, "/site-packages/apache_beam/io/gcp/x.py", 1, message,
                                   None, None)
        logging.getLogger().handle(record)
    try:
        console.configure_logging(0)
        capfd.readouterr()
        from_beam("apitools not found, and bigquery client libraries are not available")
        logging.warning("a root warning of the project's")
        assert capfd.readouterr().err == "WARNING root: a root warning of the project's\n"
        console.configure_logging(1)
        from_beam("apitools not found")
        assert capfd.readouterr().err == "WARNING root: apitools not found\n"
    finally:
        console.configure_logging(0)


def test_hub_offline_mode_says_so_at_once():
    """HF_HUB_OFFLINE=1: one line naming it, rule hub_unreachable, no retry (it used to retry 5 times, ~17 s)."""
    code = ("from transforms.base import hub\n"
            "from transforms.base.errors import LeRobotImportError\n"
            "try:\n"
            "    hub.pin('hf://datasets/lerobot/svla_so101_pickplace')\n"
            "except LeRobotImportError as ex:\n"
            "    print(ex.rule, hub.retry_count())\n"
            "    print(ex)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"))
    lines = proc.stdout.splitlines()
    assert lines[0] == "hub_unreachable 0"  # no retry
    assert lines[1] == ("[hub_unreachable] cannot reach the Hub for the dataset lerobot/svla_so101_pickplace: "
                        "huggingface_hub is in offline mode (HF_HUB_OFFLINE is set), so hf:// datasets cannot be "
                        "read: unset HF_HUB_OFFLINE, or import a local copy of the dataset")


def test_a_host_name_that_does_not_resolve_is_not_retried():
    import socket
    httpx = pytest.importorskip("httpx")
    from transforms.base import hub
    try:
        try:
            raise socket.gaierror(-2, "Name or service not known")
        except socket.gaierror as cause:
            raise httpx.ConnectError("[Errno -2] Name or service not known") from cause
    except httpx.ConnectError as ex:
        error = ex
    assert not hub.is_transient(error)
    assert hub.is_transient(httpx.ConnectError("[Errno 111] Connection refused"))  # still retried
    calls = []

    def request():
        calls.append(1)
        raise error
    with pytest.raises(httpx.ConnectError):
        hub.retrying(request, what="the revision lookup", repo="lerobot/x")
    assert len(calls) == 1
    message = str(hub.hub_error(error, hub.parse("hf://datasets/lerobot/x")))
    assert message.startswith("[hub_unreachable] cannot reach the Hub for the dataset lerobot/x: the Hub's host "
                              "name does not resolve (")
    assert "this machine has no network or no DNS; check the connection (or HF_ENDPOINT) and import again" in message


def test_default_logging_hides_type_hints_and_http_lines_and_keeps_dataflow_job_messages():
    """As the Flex Template launcher sets it up: Beam's type-hint notes (one per DoFn) and per-request HTTP
    lines are off, the Dataflow runner's job messages and the project's own lines on."""
    from pipelines import console
    console.configure_logging(0, dataflow=True)
    assert not logging.getLogger("apache_beam.typehints.native_type_compatibility").isEnabledFor(logging.INFO)
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert not logging.getLogger("huggingface_hub").isEnabledFor(logging.WARNING)
    assert logging.getLogger("apache_beam.runners.dataflow.dataflow_runner").isEnabledFor(logging.INFO)
    assert logging.getLogger("transforms.commit_episodes_files").isEnabledFor(logging.INFO)
    console.configure_logging(-1)
    assert not logging.getLogger("transforms.commit_episodes_files").isEnabledFor(logging.WARNING)
    assert logging.getLogger("transforms.commit_episodes_files").isEnabledFor(logging.ERROR)


def test_the_process_ends_as_python_would_without_its_teardown():
    """`console.end_process`, how the command's own process ends: it waits for the other threads, runs the exit
    handlers and flushes what was printed, then exits with the status (a message: on stderr, status 1)."""
    script = ("import atexit, sys, threading, time\n"
              "from pipelines import console\n"
              "atexit.register(lambda: print('exit handler ran'))\n"
              "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\n"
              "print('printed, not flushed', end='')\n"
              "console.end_process(sys.argv[1] if sys.argv[1].startswith('error') else int(sys.argv[1]))\n")
    for code, status in (("3", 3), ("0", 0), ("error: a message", 1)):
        proc = subprocess.run([sys.executable, "-c", script, code], cwd=REPO, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.returncode == status
        assert proc.stdout.splitlines() == ["printed, not flushedthread done", "exit handler ran"]
        assert proc.stderr == ("error: a message\n" if status == 1 else "")


@pytest.mark.parametrize("sub", ["verify", "plan", "check"])
def test_ctrl_c_in_a_subcommand_is_one_line_and_exit_130(sub, tmp_path, monkeypatch, capsys):
    """Ctrl-C while a subcommand works ends it the way it ends an import: one line, status 130, no traceback."""
    import importlib
    import signal
    import time

    module = importlib.import_module(f"pipelines.{sub}")

    def working(argv):
        signal.raise_signal(signal.SIGINT)  # the user's Ctrl-C, while the subcommand reads
        time.sleep(5)
        return 0

    monkeypatch.setattr(module, "run", working)
    monkeypatch.setattr(os, "_exit", lambda status: (_ for _ in ()).throw(SystemExit(status)))
    with pytest.raises(SystemExit) as ended:
        cli.dispatch([sub, str(tmp_path)])
    assert ended.value.code == 130
    captured = capsys.readouterr()
    assert captured.out == f"interrupted by SIGINT: `lerobot-import {sub}` stopped (it writes nothing)\n"
    assert "Traceback" not in captured.err and "KeyboardInterrupt" not in captured.err
