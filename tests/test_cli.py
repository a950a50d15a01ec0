"""The command line a new user meets: `--help` that teaches, options that are checked, roots whose URL
names no filesystem, and a summary whose numbers are the manifest's."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, SAMPLE, lerobot_dataset, read_errors, read_manifest, run_import
from pipelines import import_lerobot
from pipelines.cli import import_parser

IMPORT_OPTIONS = ("--dataset", "--datasets", "--output", "--force", "--read-in-parts", "--data-span-limit",
                  "--inline-index", "--skip-videos")


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
    assert "--data_span_limit BYTES, --data-span-limit BYTES Bytes of data files one part may span. Default: " \
           "67108864 (64 MiB, the reference's limit)." in flat
    assert "(same files, same options). Default: skip them." in flat
    assert "Default: once per MP4 under media_index/." in flat
    assert "Default: cameras are imported and a missing MP4 fails its episodes file." in flat
    assert "Default: such a file fails with rule data_span." in flat
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


def test_misspelt_option_is_refused_with_the_right_one(tmp_path):
    with pytest.raises(SystemExit) as raised:
        import_lerobot.main(["--dataset", str(SAMPLE), "--output", str(tmp_path / "out"), "--skip_video"])
    message = str(raised.value)
    assert "unknown option --skip_video (did you mean --skip_videos?)" in message
    assert "lerobot-import --help" in message
    assert not (tmp_path / "out").exists()


def test_positional_arguments_are_refused(tmp_path):
    with pytest.raises(SystemExit) as raised:
        import_lerobot.main([str(SAMPLE), str(tmp_path / "out")])
    assert f"unexpected argument {str(SAMPLE)!r} (options take the form --name VALUE)" in str(raised.value)


def test_beam_options_pass_the_check(tmp_path):
    from pipelines import cli
    cli.check_arguments(["--dataset", "x", "--output", "y", "--runner", "FnApiRunner", "--direct_num_workers=2",
                         "--project", "p", "--region", "us-central1", "--temp_location", "gs://b/tmp"])


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
