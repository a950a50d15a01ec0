"""What an operator sees of a run, end to end through the command (`cli.main`, or the CLI in
a subprocess where the exit status and stderr are the point): the cause of a failure on the terminal,
errors.jsonl rows that stay true, nothing written for a root that is not a dataset, one-line errors for
ordinary mistakes, and stray folders under a bulk glob skipped with a note."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, SAMPLE, lerobot_dataset, read_errors
from pipelines import cli

MISSING = "videos/observation.images.top/chunk-000/file-001.mp4"  # episode 3's top camera (and episode 4's)


def _cli(*argv: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.import_lerobot", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, PYTHONPATH=str(REPO)))


def _main(*argv: str) -> int:
    with pytest.raises(SystemExit) as raised:
        cli.main([*argv, "--runner", "FnApiRunner"])
    return raised.value.code


def _copy(tmp_path: Path, name: str = "h264_multi_file") -> Path:
    return Path(shutil.copytree(lerobot_dataset(name), tmp_path / "ds", ignore=shutil.ignore_patterns("expected*")))


def test_missing_root_is_one_line_and_creates_nothing(tmp_path):
    out = tmp_path / "out"
    proc = _cli("--dataset", str(tmp_path / "nope"), "--output", str(out), "--runner", "FnApiRunner")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: [dataset_root] the dataset root file://{tmp_path}/nope does not exist; the nearest folder "
        f"that exists is file://{tmp_path}")
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not out.exists()


def test_output_naming_a_file_is_one_line(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("not a folder")
    proc = _cli("--dataset", str(SAMPLE), "--output", str(out), "--runner", "FnApiRunner")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stdout.strip().splitlines() == [
        f"file://{SAMPLE}: error: [output_not_writable] file file://{out}: the output file://{out} is a file, not a "
        f"folder: give --output a folder (it is created if missing) -> file://{out}"]
    assert out.read_text() == "not a folder"


def test_failure_cause_is_on_the_terminal_and_rows_stay_true(tmp_path, capsys):
    root = _copy(tmp_path)
    (root / MISSING).unlink()
    out = tmp_path / "out"
    assert _main("--dataset", str(root), "--output", str(out)) == 1
    lines = capsys.readouterr().out.splitlines()
    errors = read_errors(out)
    head = next(i for i, x in enumerate(lines) if x.startswith(f"file://{root}: failed - 6/10 episodes"))
    first = next(e for e in errors if e["rule"] == "file_missing")
    assert lines[head + 1:head + 6] == [
        "  file_missing: 2 errors in 2 episodes files",
        f"    {first['message']}",
        "  file_failed: 2 more episodes not imported only because another episode of their episodes file failed",
        f"  every row: file://{out}/errors.jsonl (4 rows)",
        "  note: --skip-videos imports the dataset without its video features (MP4s of `observation.images.top` "
        "missing or unusable, named above)"]
    assert first["message"] == (
        f"[file_missing] dataset file://{root}, episodes file meta/episodes/chunk-000/file-001.parquet, episode 3, "
        f"file {MISSING}: video file {MISSING} does not exist (expected at file://{root}/{MISSING})")
    # no folder hint: the other camera's file-001.mp4 is another file
    assert all("a file of that name" not in e["message"] for e in errors)
    assert all(e["message"].startswith(f"[{e['rule']}] ") for e in errors)
    consequence = next(e for e in errors if e["episode_index"] == 2)
    assert consequence == {
        "dataset": f"file://{root}", "episodes_file": "meta/episodes/chunk-000/file-001.parquet", "episode_index": 2,
        "file": "meta/episodes/chunk-000/file-001.parquet", "rule": "file_failed",
        "message": f"[file_failed] dataset file://{root}, episodes file meta/episodes/chunk-000/file-001.parquet, "
                   f"episode 2: not imported because episode 3 of the same episodes file failed ([file_missing] in "
                   f"{MISSING}; its row says why): an episodes file imports all its episodes or none, so fixing "
                   "episode 3 imports this one too"}
    assert {(e["episode_index"], e["rule"], e["file"]) for e in errors if e["episode_index"] in (4, 5)} == {
        (4, "file_missing", MISSING), (5, "file_failed", "meta/episodes/chunk-001/file-000.parquet")}


def test_an_errors_file_past_the_summary_s_bound_is_counted_whole(tmp_path, capsys, monkeypatch):
    """errors.jsonl larger than the summary reads: its first rows are summarized and the line says how many rows
    the file has, never a count of only what was read (or 0)."""
    from pipelines import report
    root = _copy(tmp_path)
    (root / MISSING).unlink()
    out = tmp_path / "out"
    first_row = None

    def bound():  # the bound, set once errors.jsonl exists: its first row fits, the others do not
        nonlocal first_row
        first_row = len((out / "errors.jsonl").read_bytes().split(b"\n", 1)[0]) + 1
        return first_row

    real = report._read_errors
    monkeypatch.setattr(report, "_read_errors", lambda uri: (monkeypatch.setattr(report, "MAX_ERRORS_READ", bound()),
                                                            real(uri))[1])
    assert _main("--dataset", str(root), "--output", str(out)) == 1
    lines = capsys.readouterr().out.splitlines()
    errors = read_errors(out)
    assert len(errors) == 4 and errors[0]["rule"] == "file_failed"
    assert f"  every row: file://{out}/errors.jsonl (4 rows; the lines above count its first 1)" in lines, lines
    assert "  file_failed: 1 more episode not imported only because another episode of their episodes file failed" \
        in lines, lines



def test_folder_hint_only_for_the_same_camera_renamed(tmp_path):
    root = _copy(tmp_path)
    (root / "videos" / "observation.images.top").rename(root / "videos" / "top")
    out = tmp_path / "out"
    assert _main("--dataset", str(root), "--output", str(out)) == 1
    missing = [e for e in read_errors(out) if e["rule"] == "file_missing"]
    assert missing and all(e["file"].startswith("videos/observation.images.top/") for e in missing)
    wanted = missing[0]["file"]
    assert missing[0]["message"].endswith(
        f"; a file of that name is at {wanted.replace('observation.images.top', 'top')}: the dataset's folder is "
        "`top/` where the path template says `observation.images.top/` (rename the folder, or fix the template "
        "in meta/info.json)")


def test_bulk_glob_skips_a_folder_that_is_no_dataset(tmp_path, capsys):
    bucket = tmp_path / "bucket"
    shutil.copytree(SAMPLE, bucket / "so101")
    (bucket / "stray" / "logs").mkdir(parents=True)
    out = tmp_path / "out"
    assert _main("--datasets", f"{bucket}/*", "--output", str(out)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"file://{bucket}/stray: skipped - not a dataset (no meta/info.json)" in lines
    assert any(x.startswith(f"file://{bucket}/so101: imported - 4/4 episodes") for x in lines), lines
    assert sorted(p.name for p in out.iterdir()) == ["bulk_report.json", "so101"]
    report = json.loads((out / "bulk_report.json").read_text())
    assert report["not_datasets"] == [f"file://{bucket}/stray"]
    assert [(d["dataset"], d["outcome"]) for d in report["datasets"]] == [(f"file://{bucket}/so101", "imported")]


def test_bulk_run_with_a_named_missing_root_fails_it_alone(tmp_path, capsys):
    out = tmp_path / "out"
    assert _main("--datasets", f"{SAMPLE},{tmp_path / 'gone'}", "--output", str(out)) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(x.startswith(f"file://{tmp_path}/gone: FAILED - [dataset_root] the dataset root file://{tmp_path}/gone "
                            f"does not exist") and x.endswith(f"(nothing written to file://{out}/gone)") for x in lines)
    assert not (out / "gone").exists() and (out / "so101_av1" / "manifest.json").exists()


def test_dataflow_without_beams_cloud_libraries_names_the_extra_before_any_lease(tmp_path, monkeypatch):
    """The default install leaves Beam's Google Cloud libraries out; asking for Dataflow then says how to get
    them, in one line, before anything is written (Beam itself would wait, then fail deep inside)."""
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "apitools" else real(name, *a))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as raised:
        cli.main(["--dataset", str(SAMPLE), "--output", str(out), "--runner", "DataflowRunner",
                             "--project", "p", "--region", "us-central1", "--temp_location", "gs://b/tmp"])
    assert str(raised.value) == ("error: --runner DataflowRunner needs Beam's Google Cloud libraries, which this "
                                 "install leaves out: pip install 'lerobot-beam-import[dataflow]' "
                                 "(or apache-beam[gcp])")
    assert not out.exists()


def test_dataflow_without_its_options_is_one_line_before_any_lease(tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as raised:
        cli.main(["--dataset", str(SAMPLE), "--output", str(out), "--runner", "Dataflow"])
    assert raised.value.code == 2  # a wrong command line
    assert capsys.readouterr().err == ("error: --runner Dataflow needs --project, --region, --temp_location (e.g. "
                                       "--project PROJECT --region us-central1 --temp_location gs://BUCKET/tmp)\n")
    assert not out.exists()  # no lease was taken, nothing written
