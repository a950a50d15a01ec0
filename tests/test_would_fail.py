"""`plan` and `verify --sources` say what an import would refuse, and exit 1: a dataset that fails as a whole
(an info.json template it rejects), an episodes file whose MP4 is missing (with the `--skip-videos` hint), a
Hub dataset that cannot be reached (one line, no traceback); and `--skip-videos` reads no `video_path` at all.
Through the commands, on copies of the sample (one episodes file, two cameras)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines import plan, verify
from tests.helpers import REPO, SAMPLE, copy_dataset, read_manifest, run_import

EPISODES = "meta/episodes/chunk-000/file-000.parquet"
FRONT = "videos/observation.images.front/chunk-000/file-000.mp4"
BAD_TEMPLATE = "videos/{video_key}/chunk-{chunk_index:03d}/file-{bogus}.mp4"


@pytest.fixture
def dataset(tmp_path):
    return copy_dataset(SAMPLE, tmp_path / "so101")


def _set_video_path(root, value) -> None:
    info = json.loads((root / "meta" / "info.json").read_text())
    if value is None:
        del info["video_path"]
    else:
        info["video_path"] = value
    (root / "meta" / "info.json").write_text(json.dumps(info))


def test_a_missing_mp4_would_fail_with_the_skip_videos_hint(dataset, tmp_path, capsys):
    (dataset / FRONT).unlink()
    out = tmp_path / "out"
    assert plan.run(["--dataset", str(dataset), "--output", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    failure = (f"[file_missing] file {FRONT}: video file {FRONT} does not exist (expected at "
               f"file://{dataset}/{FRONT}), so the episodes using it cannot be imported with their clips; "
               "--skip-videos imports the dataset without its video features")
    assert lines[1] == "  would fail: 1 of the 1 episodes files to import (each named below with why)"
    assert lines[-2:] == [f"  import    {EPISODES} (new): 4 episodes, 1 parts, 6.0 KB of data",
                          f"            would fail: {failure}"]
    assert not out.exists()
    assert plan.run(["--dataset", str(dataset), "--output", str(out), "--skip-videos"]) == 0
    assert "would fail" not in capsys.readouterr().out

    assert run_import(dataset, out) == 1  # as the plan said
    capsys.readouterr()
    assert verify.run([str(out), "--sources"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"file://{out}: 2 problems",
                     f"  {EPISODES}: [stale] its last import failed (errors.jsonl says why); the next run imports it "
                     "again",
                     f"  {EPISODES}: [would_fail] its next import would fail: {failure}"]  # no repair: a cause to fix


def test_a_dataset_refused_as_a_whole_fails_plan_and_verify_sources(dataset, tmp_path, capsys):
    _set_video_path(dataset, BAD_TEMPLATE)
    out = tmp_path / "out"
    refused = (f"[path_template] file meta/info.json: info.json `video_path` '{BAD_TEMPLATE}' names unknown "
               "placeholder `bogus`; allowed: video_key, chunk_index, file_index")
    assert plan.run(["--dataset", str(dataset), "--output", str(out)]) == 1
    assert f"  cannot import: {refused}" in capsys.readouterr().out.splitlines()
    assert run_import(dataset, out) == 1
    capsys.readouterr()
    assert verify.run([str(out), "--sources"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"  manifest.json: [sources] the dataset file://{dataset} cannot be imported: {refused}"
    # The output's files are as its manifest says, but it does not hold the dataset: no `ok`.
    assert verify.run([str(out)]) == 1
    assert capsys.readouterr().out.splitlines()[1] == (
        f"  {EPISODES}: [failed] its last import failed: 4 of 4 episodes not in the output; errors.jsonl: "
        "file_failed (4), path_template (1); fix the cause, then run the import again")


@pytest.mark.parametrize("template", [BAD_TEMPLATE, None])
def test_skip_videos_reads_no_video_path(dataset, tmp_path, capsys, template):
    _set_video_path(dataset, template)
    out = tmp_path / "out"
    assert plan.run(["--dataset", str(dataset), "--output", str(out), "--skip-videos"]) == 0
    assert run_import(dataset, out, "--skip-videos") == 0
    doc = read_manifest(out)
    assert doc["status"] == "imported" and doc["totals"]["episodes_written"] == 4
    capsys.readouterr()
    assert verify.run([str(out), "--sources"]) == 0


def test_plan_of_an_unreachable_hub_dataset_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pipelines.plan", "--dataset",
                           "hf://datasets/lerobot/svla_so101_pickplace", "--output", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "error: [hub_unreachable] cannot reach the Hub for the dataset lerobot/svla_so101_pickplace: huggingface_hub "
        "is in offline mode (HF_HUB_OFFLINE is set), so hf:// datasets cannot be read: unset HF_HUB_OFFLINE, or "
        "import a local copy of the dataset"]
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
