"""What a new user meets on first use and on real published data: each answer says what is true and the
next step (verify after a stopped run or a failed import, outputs not written by an import, layouts that
would mix, v2.x episodes with missing files, hints for self-written datasets, terminal output)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.bench.synth_dataset import make_dataset
from tests.helpers import SAMPLE, read_manifest, run_import


@pytest.fixture(scope="module")
def two_files(tmp_path_factory) -> Path:
    """A dataset of two episodes files, no cameras."""
    return make_dataset(tmp_path_factory.mktemp("two") / "ds", episodes=4, frames=10, cameras=0,
                        episodes_per_meta_file=2, state_dim=2, action_dim=2)


def _verify(*argv: str, capsys) -> tuple[int, str]:
    from pipelines.verify import run
    capsys.readouterr()
    code = run(list(argv))
    return code, capsys.readouterr().out


def test_verify_after_an_interrupted_import_says_so_and_gives_the_command_that_finishes_it(two_files, tmp_path,
                                                                                           capsys):
    """The output a stopped run leaves: one episodes file committed and recorded (status `interrupted`), no
    errors.jsonl yet. verify names the interruption, counts what was committed, and gives the command that
    finishes the import, instead of a missing errors.jsonl."""
    out = tmp_path / "out"
    assert run_import(two_files, out) == 0
    manifest = read_manifest(out)
    gone = manifest["episodes_files"].pop("meta/episodes/chunk-000/file-001.parquet")
    for part in gone["parts"]:
        (out / part).unlink()
    manifest["status"] = "interrupted"
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "errors.jsonl").unlink()
    code, text = _verify(str(out), capsys=capsys)
    assert code == 1
    assert "errors.jsonl: [missing]" not in text
    assert ("manifest.json: [interrupted] the last import was interrupted before it finished: 1 episodes file was "
            "committed and recorded, the rest of the dataset is not imported yet") in text
    assert f"repair: run `lerobot-import --dataset {two_files} --output {out}` again: it finishes the interrupted " \
           "import (the committed episodes files are kept, not read again)" in text
    # The command it gives does finish it.
    assert run_import(two_files, out) == 0
    assert _verify(str(out), capsys=capsys)[0] == 0


def _sample_copy(tmp_path: Path, name: str = "ds") -> Path:
    return Path(shutil.copytree(SAMPLE, tmp_path / name, symlinks=False))


def test_plain_verify_does_not_call_a_failed_import_ok(tmp_path, capsys):
    """An import whose episodes file failed (an MP4 absent, as in many published datasets) wrote sound files,
    but its output does not hold the dataset: verify names the failed file, how many episodes are not
    there, the rules errors.jsonl records, and exits 1."""
    ds = _sample_copy(tmp_path)
    (ds / "videos/observation.images.front/chunk-000/file-000.mp4").unlink()
    out = tmp_path / "out"
    assert run_import(ds, out) == 1
    code, text = _verify(str(out), capsys=capsys)
    assert code == 1 and ": ok" not in text
    assert ("meta/episodes/chunk-000/file-000.parquet: [failed] its last import failed: 4 of 4 episodes not in the "
            "output; errors.jsonl: file_failed (3), file_missing (1); fix the cause, then run the import again") in text
    assert "repair:" not in text  # the same import again fails the same way


def test_sources_on_a_local_v2_dataset_with_a_bad_info_json_names_the_file_not_a_move(tmp_path, capsys):
    """A local dataset whose info.json is empty is there: `--sources` says it cannot be imported and why,
    not that it moved or is not reachable with these credentials."""
    from tests.v21_repack import repack_v21
    ds = repack_v21(SAMPLE, tmp_path / "v21")
    out = tmp_path / "out"
    assert run_import(ds, out) == 0
    (Path(ds) / "meta/info.json").write_bytes(b"")
    code, text = _verify(str(out), "--sources", capsys=capsys)
    assert code == 1
    assert "credentials" not in text and "moved" not in text
    assert (f"manifest.json: [sources] the dataset file://{ds} cannot be imported: [info_json] file meta/info.json: "
            "meta/info.json") in text
    assert "the next run fails it and removes none of this output" in text


def _import_cli(*argv: str, capsys) -> tuple[int, str]:
    """The import as the command runs it: a refusal is a SystemExit with its line."""
    capsys.readouterr()
    try:
        from pipelines.import_lerobot import run
        code = run([*argv, "--runner", "FnApiRunner"])
    except SystemExit as ex:
        return ex.code if isinstance(ex.code, int) else 1, str(ex)
    return code, capsys.readouterr().out


def test_a_manifest_no_import_wrote_is_refused_unless_forced(tmp_path, capsys):
    """A manifest.json in --output that is not an import's (the user's own notes) is not overwritten by the
    run that finds it: exit status 2, the file named and left as it was; --force replaces it."""
    out = tmp_path / "out"
    out.mkdir()
    mine = b'{"name": "my notes"}\n'
    (out / "manifest.json").write_bytes(mine)
    code, text = _import_cli("--dataset", str(SAMPLE), "--output", str(out), capsys=capsys)
    assert code == 2
    assert text == (f"error: file://{out}/manifest.json is not an import's manifest (no `episodes_files` object): no "
                    "import wrote it as it is, and this run would replace it. Move it away, or give --force to "
                    "replace it (the dataset is then imported whole)")
    assert (out / "manifest.json").read_bytes() == mine and sorted(p.name for p in out.iterdir()) == ["manifest.json"]
    code, _ = _import_cli("--dataset", str(SAMPLE), "--output", str(out), "--force", capsys=capsys)
    assert code == 0 and read_manifest(out)["status"] == "imported"


def test_one_output_folder_holds_one_layout(two_files, tmp_path, capsys):
    """One dataset imports into OUT's root, several each into OUT/<name>/: a run that would put the other
    layout into a folder holding one is refused (exit status 2) with the folder to use, and writes nothing."""
    out = tmp_path / "out"
    assert _import_cli("--dataset", str(SAMPLE), "--output", str(out), capsys=capsys)[0] == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    code, text = _import_cli("--dataset", str(SAMPLE), "--dataset", str(two_files), "--output", str(out),
                             capsys=capsys)
    assert code == 2
    assert text == (f"error: {out} holds the import of one dataset (file://{SAMPLE}: its manifest.json is at the "
                    f"root); a run over several datasets writes each into {out}/<dataset name>/, which would nest "
                    "them beside it where verify and the reader of the folder do not look. Give this run another "
                    "--output, or import each dataset into a folder of its own")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before

    bulk = tmp_path / "bulk"
    assert _import_cli("--dataset", str(SAMPLE), "--dataset", str(two_files), "--output", str(bulk),
                       capsys=capsys)[0] == 0
    code, text = _import_cli("--dataset", str(two_files), "--output", str(bulk), capsys=capsys)
    assert code == 2
    assert text == (f"error: {bulk} holds the imports of several datasets, each in a folder of its own (ds/, "
                    f"so101_av1/); importing one dataset into its root would mix the two layouts. Give --output "
                    f"{bulk}/ds (where a run over several datasets puts it), or another folder")
    assert not (bulk / "manifest.json").exists()


@pytest.mark.parametrize("extra", [(), ("--data-span-limit", "1")], ids=["one part", "a part per episode"])
def test_a_v2_episode_whose_files_are_missing_fails_alone(tmp_path, capsys, extra):
    """v2.x: every episode has its own data file and MP4s. An absent MP4 and an absent data file fail their
    episodes alone (named in errors.jsonl with their own episode_index), the rest of each group imports
    (in parts too: a part left without episodes is written empty), the summary says how many, verify says
    which groups lack episodes, and once the file is back the next run imports its episode."""
    from tests.helpers import lerobot_dataset, read_errors
    from tests.v21_repack import repack_v21
    ds = Path(repack_v21(lerobot_dataset("h264_multi_file"), tmp_path / "v21"))  # five groups of two episodes
    data6 = ds / "data/chunk-003/episode_000006.parquet"
    kept = data6.read_bytes()
    data6.unlink()
    (ds / "videos/chunk-004/observation.images.top/episode_000009.mp4").unlink()
    out = tmp_path / "out"
    assert run_import(ds, out, *extra) == 1
    text = capsys.readouterr().out
    assert ("  2 episodes not imported, each on its own missing or broken files (named in errors.jsonl); the other "
            "2 episodes of their 2 groups imported") in text
    assert "file_failed" not in text
    assert sorted((e["episodes_file"], e["episode_index"], e["rule"], e["file"]) for e in read_errors(out)) == [
        ("meta/episodes.jsonl:chunk-003", 6, "file_missing", "data/chunk-003/episode_000006.parquet"),
        ("meta/episodes.jsonl:chunk-004", 9, "file_missing",
         "videos/chunk-004/observation.images.top/episode_000009.mp4")]
    manifest = read_manifest(out)
    assert {rel: e["status"] for rel, e in manifest["episodes_files"].items()} == {
        f"meta/episodes.jsonl:chunk-{c:03d}": "imported" for c in range(5)}
    assert (manifest["totals"]["episodes_written"], manifest["totals"]["episodes_failed"]) == (8, 2)
    code, text = _verify(str(out), capsys=capsys)
    assert code == 1 and ("meta/episodes.jsonl:chunk-004: [failed] imported without some episodes: 1 of 2 episodes "
                          "not in the output; errors.jsonl: file_missing (1)") in text
    code, text = _verify(str(out), "--sources", capsys=capsys)
    assert "meta/episodes.jsonl:chunk-004: [would_fail] its next import would leave an episode out: [file_missing]" \
        in text
    data6.write_bytes(kept)
    assert run_import(ds, out, *extra) == 1  # episode 9's MP4 is still missing
    manifest = read_manifest(out)
    assert manifest["episodes_files"]["meta/episodes.jsonl:chunk-003"]["episodes_failed"] == 0
    assert (manifest["totals"]["episodes_written"], manifest["totals"]["episodes_failed"]) == (9, 1)


def _edit_info(root: Path, **values) -> None:
    path = root / "meta/info.json"
    doc = json.loads(path.read_text())
    doc.update(values)
    path.write_text(json.dumps(doc))


V2_TEMPLATES = {"data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
                "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"}


def test_the_codebase_version_advice_leads_to_a_working_import(tmp_path, capsys):
    """A self-written v3.0 dataset whose info.json says v2.1 with v2.x's templates: the advice names every
    key to change, with the values that import (following it imports the dataset); the import fails with
    that advice, not with an internal error; with the version alone fixed, the template error says both
    ways out."""
    from pipelines import check
    ds = _sample_copy(tmp_path)
    _edit_info(ds, codebase_version="v2.1", **V2_TEMPLATES)
    out = tmp_path / "out"
    assert run_import(ds, out) == 1
    text = capsys.readouterr().out
    assert "internal" not in text
    assert ('if the files are v3.0, in meta/info.json set codebase_version to "v3.0", and data_path to '
            '"data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet" (its '
            "'data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet' places files by episode, as v2.x "
            'does), and video_path to "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"') in text
    _edit_info(ds, codebase_version="v3.0")
    assert check.run([str(ds)]) == 1
    assert ("names unknown placeholder `episode_chunk`; allowed: chunk_index, file_index. `episode_chunk` is v2.x's: "
            "if the files are v3.0 (a data file per chunk and file, listed in meta/episodes/), set `data_path` to "
            '"data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"; if they are v2.x (one data file and one '
            'MP4 per episode, listed in meta/episodes.jsonl), set codebase_version to "v2.1"'
            ) in capsys.readouterr().out
    _edit_info(ds, data_path="data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
               video_path="videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4")
    assert run_import(ds, tmp_path / "out2") == 0


def test_empty_info_json_loose_episodes_parquet_and_zero_declared_episodes_are_named(tmp_path, capsys):
    from pipelines import check

    def said(ds: Path) -> str:
        capsys.readouterr()
        assert check.run([str(ds)]) == 1
        return capsys.readouterr().out

    ds = _sample_copy(tmp_path, "loose")
    (ds / "meta/episodes/chunk-000/file-000.parquet").rename(ds / "meta/episodes.parquet")
    shutil.rmtree(ds / "meta/episodes")
    assert ("meta/episodes.parquet lies in meta/, where no episodes file is read: move it to "
            "meta/episodes/chunk-000/file-000.parquet") in said(ds)
    ds = _sample_copy(tmp_path, "none")
    for folder in ("meta/episodes", "data", "videos"):
        shutil.rmtree(ds / folder)
    _edit_info(ds, total_episodes=0, total_frames=0)
    assert "its info.json declares 0 episodes (`total_episodes`): a recording that saved no episode" in said(ds)
    (ds / "meta/info.json").write_bytes(b"")
    text = said(ds)
    assert "[info_json] meta/info.json is empty (0 bytes): a copy or download that did not finish" in text
    assert "not JSON" not in text


def test_plan_of_a_one_file_repair_counts_the_bytes_the_import_reads(tmp_path, capsys):
    """Four episodes files sharing one data file (LeRobot's v3.0 layout): repairing one file's missing part
    reads its episodes' row groups, not the data file whole, and the plan says what the import then reads
    (within the footers and pages around them)."""
    from pipelines import plan
    ds = make_dataset(tmp_path / "ds", episodes=40, frames=200, cameras=0, episodes_per_meta_file=10,
                      state_dim=64, action_dim=64)
    (data_file,) = (ds / "data").rglob("*.parquet")
    out = tmp_path / "out"
    assert run_import(ds, out) == 0
    (out / "episodes/chunk-000/file-002.parquet").unlink()
    planned = plan.plan_dataset(str(ds), f"file://{out}", read_manifest(out)["options"])
    assert planned.counts["import"] == 1
    share = planned.data_bytes
    assert planned.data_bytes_to_read == share < data_file.stat().st_size / 3
    capsys.readouterr()
    assert run_import(ds, out) == 0
    read = int(capsys.readouterr().out.split("data_bytes_read=")[1].split(",")[0])
    assert share <= read < 1.2 * share


def test_plan_and_check_name_a_video_folder_where_the_template_says_videos(tmp_path, capsys):
    """`video/` where video_path says `videos/` (seen in published datasets): plan and check give the hint the
    import gives, and check says each rule once with how many more files it concerns."""
    from pipelines import check, plan
    ds = _sample_copy(tmp_path)
    (ds / "videos").rename(ds / "video")
    hint = ("a file of that name is at video/observation.images.front/chunk-000/file-000.mp4: the dataset's folder "
            "is `video/` where the path template says `videos/` (rename the folder, or fix the template in "
            "meta/info.json)")
    capsys.readouterr()
    assert plan.run(["--dataset", str(ds), "--output", str(tmp_path / "out")]) == 1
    assert hint in capsys.readouterr().out
    assert check.run([str(ds)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("  error [mp4] videos/observation.images.front/chunk-000/file-000.mp4: "
                               "[file_missing] video file") and lines[1].endswith(hint)
    assert lines[2:] == ["    ... and 1 more [mp4] errors: videos/observation.images.wrist/chunk-000/file-000.mp4 "
                         "(--json lists them all)"]


def _command(*argv: str) -> tuple[int, list[str]]:
    """The command in a fresh process, as a user runs it: (status, its stdout and stderr lines)."""
    import subprocess
    import sys

    from tests.helpers import REPO
    proc = subprocess.run([sys.executable, "-m", "pipelines.import_lerobot", *argv, "--runner", "FnApiRunner"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    return proc.returncode, (proc.stdout + proc.stderr).splitlines()


def test_default_output_is_the_summary_with_each_cause_once_and_v_adds_per_file_lines_and_metrics(tmp_path):
    ds = _sample_copy(tmp_path)
    front = "videos/observation.images.front/chunk-000/file-000.mp4"
    (ds / front).unlink()
    out = tmp_path / "out"
    code, lines = _command("--dataset", str(ds), "--output", str(out))
    assert code == 1
    assert len([x for x in lines if front in x]) == 1, lines  # the MP4 is named once
    assert not [x for x in lines if x.startswith(("INFO", "WARNING", "DEBUG", "metrics:"))], lines
    assert lines[0].startswith(f"file://{ds}: failed - 0/4 episodes")
    assert lines[-1] == ("  note: --skip-videos imports the dataset without its video features (MP4s of "
                         "`observation.images.front` missing or unusable, named above)")

    assert _command("--dataset", str(ds), "--output", str(out), "--skip-videos")[0] == 0
    (out / "episodes/chunk-000/file-000.parquet").unlink()
    code, lines = _command("--dataset", str(ds), "--output", str(out), "--skip-videos", "-q")
    assert code == 0 and not [x for x in lines if x.startswith("metrics:")]
    assert len([x for x in lines if "repair:" in x]) == 1, lines  # the repair is said once

    code, lines = _command("--dataset", str(ds), "--output", str(out), "--skip-videos", "-v", "--force")
    assert code == 0
    assert [x for x in lines if x.startswith("metrics: ")]
    assert [x for x in lines if "episodes file meta/episodes/chunk-000/file-000.parquet of" in x
            and x.endswith("imported: 4 episodes, 46 frames, 1 parts")]


def test_a_hub_pattern_without_network_fails_at_once_and_says_each_line_once(tmp_path):
    """`--datasets 'hf://datasets/OWNER/*'` where the Hub's host name does not resolve (no network, no
    DNS): one error line, no retry (huggingface_hub's own backoff took about 25 s), and with -v each of the
    library's lines once (they printed twice: its own handler and the command's)."""
    import os
    import subprocess
    import sys
    import time

    from tests.helpers import REPO
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pipelines.import_lerobot", "--datasets", "hf://datasets/lerobot/*",
                           "--output", str(tmp_path / "out"), "-v"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, HF_ENDPOINT="https://hub.invalid", HF_HUB_OFFLINE="0"))
    took = time.monotonic() - start
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 1
    assert lines[-1].startswith("error: [hub_unreachable] cannot reach the Hub for the dataset lerobot/*: the Hub's "
                                "host name does not resolve (https://hub.invalid)")
    assert not [x for x in lines if "Retrying in" in x], lines
    thrown = [x for x in lines if "thrown while requesting GET https://hub.invalid/api/datasets" in x]
    assert len(thrown) == 1, lines
    assert took < 20, took  # one request, not five retries with backoff


def _apitools() -> None:
    import importlib.util
    if importlib.util.find_spec("apitools") is None:
        pytest.skip("Beam's Google Cloud libraries (apache-beam[gcp]) are not installed: Dataflow options are not "
                    "checked past the line naming them")


@pytest.mark.parametrize("options, words", [
    (("--project", "p", "--region", "us-central1", "--temp_location", "gs://b/tmp"),
     "error: --project p is not a Google Cloud project ID (6 to 30 lowercase letters, digits and hyphens, starting "
     "with a letter)"),
    (("--project", "my-project-1", "--region", "central", "--temp_location", "gs://b/tmp"),
     "error: --region central is not a Google Cloud region (e.g. us-central1, europe-west4)"),
    (("--project", "my-project-1", "--region", "us-central1", "--temp_location", "/tmp/x"),
     "error: --temp_location /tmp/x: Dataflow stages its files in Cloud Storage, so it is a gs:// folder"),
    (("--project", "my-project-1"), "error: --runner DataflowRunner needs --region, --temp_location (e.g. --region "
                                    "us-central1 --temp_location gs://BUCKET/tmp)"),
], ids=["project", "region", "temp_location", "missing"])
def test_dataflow_option_mistakes_are_a_wrong_command_line(tmp_path, capsys, options, words):
    """Exit status 2 (a wrong command line, as the exit-status table says), one line, at once: Beam would
    find a bad value only by submitting the job, after a minute of retries, in a traceback."""
    _apitools()
    from pipelines import cli
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as raised:
        cli.main(["--dataset", str(SAMPLE), "--output", str(out), "--runner", "DataflowRunner", *options])
    assert raised.value.code == 2
    assert capsys.readouterr().err.startswith(words)
    assert not out.exists()


def test_a_job_that_cannot_be_submitted_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch):
    """Options that look right but a submission that fails (no credentials, no network): one line with the
    cause and what to check, exit status 1."""
    _apitools()
    from pipelines import import_lerobot

    class Refused:
        def run(self):
            raise RuntimeError("Timeout of 120.0s exceeded, last exception: HTTPSConnectionPool(host="
                               "'storage.googleapis.com', port=443)\nmore lines of the library")
    monkeypatch.setattr(import_lerobot, "build_pipeline", lambda *a, **k: Refused())
    out = tmp_path / "out"
    code = import_lerobot.run(["--dataset", str(SAMPLE), "--output", str(out), "--runner", "DataflowRunner",
                               "--project", "my-project-1", "--region", "us-central1", "--temp_location",
                               "gs://b/tmp"])
    assert code == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "error: the job could not be run on DataflowRunner: RuntimeError: Timeout of 120.0s exceeded, last exception: "
        "HTTPSConnectionPool(host='storage.googleapis.com', port=443); check the project, region, temp_location and "
        "credentials (gcloud auth application-default login)")


def test_the_reader_pointed_at_a_dataset_or_a_missing_folder_says_what_to_do(tmp_path):
    from transforms.reader import ImportedFrames
    from transforms.reader.import_reader import ReaderError
    with pytest.raises(ReaderError) as raised:
        ImportedFrames(str(SAMPLE))
    assert str(raised.value) == (f"file://{SAMPLE} is a LeRobot dataset (it has meta/info.json), not an import's "
                                 f"output: import it first, `lerobot-import --dataset {SAMPLE} --output OUT`, then "
                                 "read OUT")
    with pytest.raises(ReaderError) as raised:
        ImportedFrames(str(tmp_path / "nope"))
    assert str(raised.value) == f"file://{tmp_path}/nope does not exist: give the --output folder of an import"


def test_the_reader_of_an_import_whose_dataset_moved_names_dataset_root(tmp_path):
    pytest.importorskip("torch")
    from transforms.reader import ImportedFrames
    from transforms.reader.frames import FramesError
    ds = _sample_copy(tmp_path)
    out = tmp_path / "out"
    assert run_import(ds, out) == 0
    moved = ds.rename(tmp_path / "moved")
    with pytest.raises(FramesError) as raised:
        ImportedFrames(str(out))[0]
    assert str(raised.value).endswith(f"; the dataset file://{ds} the import read is not there any more: if it "
                                      "moved, ImportedFrames(..., dataset_root=<where it is now>) reads it from there")
    assert ImportedFrames(str(out), dataset_root=str(moved))[0]["episode_index"] == 0


def test_help_readme_and_output_tell_a_new_user_the_truth(tmp_path, capsys):
    """--help says v2.x datasets import too; an import leaves no lock file of its lease in the output (nor
    does a second run, or a release); the README's training install line names PyTorch's CPU build beside
    it; the benchmark generator's --help shows its defaults."""
    from pipelines import command_line
    from tests.bench import synth_dataset
    from tests.helpers import REPO
    assert "v2.0 / v2.1 datasets as they are" in " ".join(command_line.import_help().split())
    out = tmp_path / "out"
    for _ in range(2):
        assert run_import(SAMPLE, out) == 0
        assert not [p.name for p in out.iterdir() if p.name.startswith(".lease")]
    readme = " ".join((REPO / "README.md").read_text().split())
    assert 'pip install -e ".[torch,video]"' in readme
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in readme
    with pytest.raises(SystemExit):
        synth_dataset.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--episodes EPISODES episodes in the dataset (default: 2000)" in text
    assert "--data-file-mb DATA_FILE_MB data file size that starts a new file (LeRobot's default) (default: 100.0)" \
        in text


def test_quality_checks_run_on_episodes_a_missing_column_stops(tmp_path, capsys):
    """A data file without a declared column fails its episodes (missing_column), and its timestamps off the
    frame grid are still reported, by check and by the import, checked on the columns it has."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines import check
    ds = _sample_copy(tmp_path)
    data = ds / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    ts = table.column("timestamp").to_numpy().copy()
    ts[3] += 0.013  # episode 0, frame 3: off the frame grid
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", pa.array(ts.astype(np.float32)))
    pq.write_table(table.drop(["observation.state"]), data)
    grid = ("episode 0: 1 of 12 frames have a timestamp more than 0.0001 s off frame_index / fps (30); first frame 3: "
            "0.113 s, expected 0.1 s")
    capsys.readouterr()
    assert check.run([str(ds)]) == 1
    text = capsys.readouterr().out
    assert "error [missing_column]" in text and grid in text
    out = tmp_path / "out"
    assert run_import(ds, out, "--skip-videos") == 1
    text = capsys.readouterr().out
    assert "  quality: timestamp_grid (1 episodes), timestamp_steps (1 episodes)" in text
    assert read_manifest(out)["quality"]["checks"]["timestamp_grid"]["example"].startswith(grid)
