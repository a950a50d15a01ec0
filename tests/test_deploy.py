"""deploy/ is checked against the pipeline it deploys, offline.

A Flex Template only fails on GCP, at launch time, when its metadata names an option the pipeline
does not have, a regex lets a bad value through, a launch body sends a value argparse rejects, or
the image's entry point is missing; each of those is caught here instead. The Dataflow job graph
is built with `--dry_run` (DataflowRunner translates the pipeline and stops before the API call).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import shutil
import string
import subprocess
import sys
import time

import apache_beam as beam
import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineResult, PipelineRunner, PipelineState

from tests.helpers import REPO, SAMPLE, read_manifest
from pipelines.import_lerobot import build_pipeline, config_from_options, run
from pipelines.options import ImportOptions

DEPLOY = REPO / "deploy"
FLEX = DEPLOY / "flex-template"
#: Values for launch.json's ${...} placeholders (what the scheduler script / Terraform fill in).
PLACEHOLDERS = {"PROJECT": "test-project", "REGION": "us-central1", "BUCKET": "lerobot-test", "TAG": "v1"}

#: Per template parameter: values its regexes must accept, with the option value each parses to,
#: and values they must reject.
GOOD = {
    "dataset": {"gs://my-bucket/lerobot/so101": ["gs://my-bucket/lerobot/so101"],
                "gs://my-bucket": ["gs://my-bucket"],
                "gs://b.example.com/a/b_c-d/": ["gs://b.example.com/a/b_c-d/"]},
    "datasets": {"gs://my-bucket/lerobot/*": "gs://my-bucket/lerobot/*",
                 "gs://bkt/a,gs://bkt/b/c": "gs://bkt/a,gs://bkt/b/c",
                 "@gs://my-bucket/lists/datasets.txt": "@gs://my-bucket/lists/datasets.txt"},
    "output": {"gs://my-bucket/imports": "gs://my-bucket/imports", "gs://my-bucket/": "gs://my-bucket/"},
    "force": {"true": True, "false": False},
    "verify_output": {"true": True, "false": False},
    "one_part": {"true": True, "false": False},
    "read_in_parts": {"true": True, "false": False},
    "inline_index": {"true": True, "false": False},
    "skip_videos": {"true": True, "false": False},
    "strict": {"all": "all", "timestamp_grid": "timestamp_grid",
               "timestamp_grid,video_samples": "timestamp_grid,video_samples"},
    "data_span_limit": {"67108864": 67108864, "1": 1, "1099511627776": 1099511627776},
    "phase_deadline": {"600": "600", "plan=60": "plan=60", "check=1800,write=7200.5": "check=1800,write=7200.5"},
    "hub_list_max_pages": {"2000": 2000, "1": 1},
    "hub_list_max_items": {"1000000": 1000000, "5000000": 5000000},
    "min_read_rate": {"1024": "1024", "512/10": "512/10", "0": "0", "2048.5/7.5": "2048.5/7.5"},
}
BAD = {
    "dataset": ["", "/local/path", "my-bucket/x", "s3://bkt/x", "gs://", "gs://B/x", "gs://ab c/x",
                "gs://bkt/a,gs://bkt/b", "gs://bkt/*", "gs://bkt/x y", "http://bkt/x"],
    "datasets": ["", "gs://bkt/a,", ",gs://bkt/a", "gs://bkt/a, gs://bkt/b", "@", "@gs://bkt",
                 "/local/*", "gs://bkt/a b"],
    "output": ["", "out", "/tmp/out", "gs://", "gs://bkt/*", "gs://bkt/a,gs://bkt/b", "s3://bkt/out"],
    "force": ["", "True", "1", "yes", "on", "true "],
    "verify_output": ["", "TRUE", "1"],
    "one_part": ["", "TRUE", "0", "y"],
    "read_in_parts": ["", "TRUE", "0", "y"],
    "inline_index": ["", "False", "no"],
    "skip_videos": ["", "t", "f"],
    "strict": ["", "ALL", "timestamp_grid,", ",all", "timestamp_grid, video_samples", "a;b"],
    "data_span_limit": ["", "0", "-1", "64MiB", "1e6", "01", " 5", "1.5"],
    "phase_deadline": ["", "plan", "plan=", "listing=5", "plan=5,", "plan=5, write=6", "-1", "plan=1e3"],
    "hub_list_max_pages": ["", "0", "-5", "1.5", "01"],
    "hub_list_max_items": ["", "0", "1e6", "10 "],
    "min_read_rate": ["", "-1", "fast", "1/", "/30", "1e3", "1/2/3", "1 "],
}


def import_option_actions() -> dict[str, argparse.Action]:
    """name -> argparse action of every option ImportOptions declares (the real CLI)."""
    parser = argparse.ArgumentParser(add_help=False)
    ImportOptions._add_argparse_args(parser)
    return {a.dest: a for a in parser._actions}


def is_flag(action: argparse.Action) -> bool:
    return action.nargs == 0 and action.const is True


def metadata() -> dict:
    return json.loads((FLEX / "metadata.json").read_text())


def parameters() -> dict[str, dict]:
    return {p["name"]: p for p in metadata()["parameters"]}


def launch_body(**values: str) -> dict:
    return json.loads(string.Template((FLEX / "launch.json").read_text()).substitute({**PLACEHOLDERS, **values}))


def load_launcher():
    """deploy/flex-template/launcher.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("flex_template_launcher", FLEX / "launcher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_template_parameters(params: dict[str, str]) -> ImportOptions:
    """What the template launcher hands the pipeline: `--name=value` per parameter."""
    argv = load_launcher().template_argv([f"--{k}={v}" for k, v in params.items()])
    return PipelineOptions(argv).view_as(ImportOptions)


def matches_all(regexes: list[str], value: str) -> bool:
    # Dataflow matches a parameter's regexes against the whole value.
    return all(re.fullmatch(r, value) for r in regexes)


# --- metadata.json -----------------------------------------------------------------------------

def test_metadata_is_valid_template_metadata():
    templates = pytest.importorskip("google.cloud.dataflow_v1beta3.types.templates")
    # Strict: a misspelt field (e.g. "isOptionnal") would be silently ignored by hand-written checks.
    parsed = templates.TemplateMetadata.from_json((FLEX / "metadata.json").read_text(),
                                                  ignore_unknown_fields=False)
    assert parsed.name == "lerobot-import"
    assert not parsed.streaming
    names = [p.name for p in parsed.parameters]
    assert len(names) == len(set(names))
    types = templates.ParameterType
    assert {p.name: p.param_type for p in parsed.parameters}["inline_index"] == types.BOOLEAN


def test_template_parameters_are_exactly_the_import_options():
    actions = import_option_actions()
    declared = set(parameters())
    options = {dest for dest, a in actions.items() if a.option_strings}
    assert declared - options == set(), "template parameters that are not pipeline options"
    assert options - declared == set(), "pipeline options the template does not expose"


def test_parameter_types_and_defaults_follow_the_options():
    actions = import_option_actions()
    for name, p in parameters().items():
        action = actions[name]
        assert f"--{name}" in action.option_strings, name  # the launcher passes --name=value
        if is_flag(action):
            assert p["paramType"] == "BOOLEAN" and p["regexes"] == ["^(true|false)$"], name
            assert p["defaultValue"] == str(action.default).lower() == "false", name
        elif action.type is int:
            assert p["paramType"] == "NUMBER", name
            assert p["defaultValue"] == str(action.default), name
        else:
            assert p["paramType"] in {"TEXT", "GCS_READ_FOLDER", "GCS_WRITE_FOLDER"}, name
            assert "defaultValue" not in p, name
        assert p["isOptional"] is (name != "output"), name


@pytest.mark.parametrize("name", sorted(GOOD))
def test_parameter_regexes_accept_good_and_reject_bad_values(name):
    p = parameters()[name]
    assert p["regexes"], f"{name} has no regex"
    for value in GOOD[name]:
        assert matches_all(p["regexes"], value), f"{name} rejects {value!r}"
    for value in BAD[name]:
        assert not matches_all(p["regexes"], value), f"{name} accepts {value!r}"
    if "defaultValue" in p:
        assert matches_all(p["regexes"], p["defaultValue"])


def test_every_parameter_has_regex_examples():
    assert set(GOOD) == set(BAD) == set(parameters())


@pytest.mark.parametrize("name", sorted(GOOD))
def test_accepted_values_parse_as_pipeline_options(name):
    for value, expected in GOOD[name].items():
        params = {"output": "gs://bkt/out", name: value}
        assert getattr(parse_template_parameters(params), name) == expected, (name, value)


def test_flags_left_out_keep_their_defaults():
    options = parse_template_parameters({"dataset": "gs://bkt/ds", "output": "gs://bkt/out"})
    assert (options.one_part, options.inline_index, options.skip_videos, options.force) == (False,) * 4
    assert options.dataset == ["gs://bkt/ds"]


def test_launcher_rejects_a_flag_value_it_cannot_read():
    with pytest.raises(SystemExit, match="--inline_index takes true or false"):
        load_launcher().template_argv(["--inline_index=maybe"])
    # the launcher itself: one line in the launch log and exit status 2, as the command does
    assert load_launcher().main(["--inline_index=maybe"]) == 2


# --- launch.json -------------------------------------------------------------------------------

def test_launch_body_is_a_valid_launch_request():
    templates = pytest.importorskip("google.cloud.dataflow_v1beta3.types.templates")
    request = templates.LaunchFlexTemplateRequest.from_json(json.dumps(launch_body()), ignore_unknown_fields=False)
    launch = request.launch_parameter
    assert launch.job_name == "lerobot-import-nightly"
    assert launch.container_spec_gcs_path == "gs://lerobot-test/templates/lerobot-import.json"
    env = launch.environment
    assert env.sdk_container_image == "us-central1-docker.pkg.dev/test-project/lerobot/lerobot-import:v1"
    assert env.temp_location.startswith("gs://lerobot-test/")
    assert env.service_account_email == "lerobot-import-worker@test-project.iam.gserviceaccount.com"


def test_launch_placeholders_are_the_ones_filled_in():
    found = {m.group("braced") for m in string.Template.pattern.finditer((FLEX / "launch.json").read_text())}
    assert found == set(PLACEHOLDERS)
    tf = (DEPLOY / "scheduler" / "scheduler.tf").read_text()
    call = re.search(r'templatefile\("\$\{path\.module\}/\.\./flex-template/launch\.json",\s*\{(.*?)\}\)', tf, re.S)
    assert call, "scheduler.tf does not render launch.json"
    assert set(re.findall(r"^\s*(\w+)\s*=", call.group(1), re.M)) == set(PLACEHOLDERS)


def test_launch_parameters_are_valid_template_parameters():
    params = launch_body()["launchParameter"]["parameters"]
    declared = parameters()
    assert set(params) <= set(declared)
    assert {n for n, p in declared.items() if not p["isOptional"]} <= set(params)
    assert ("dataset" in params) != ("datasets" in params)  # one of them, as the pipeline requires
    for name, value in params.items():
        assert isinstance(value, str), name  # the API takes string values only
        assert matches_all(declared[name]["regexes"], value), (name, value)
    options = parse_template_parameters(params)
    assert options.datasets == "gs://lerobot-test/lerobot/*"
    assert options.output == "gs://lerobot-test/imports"
    assert (options.one_part, options.inline_index) == (False, False)


def test_launch_body_matches_what_cloud_build_publishes():
    build = yaml.safe_load((DEPLOY / "cloudbuild.yaml").read_text())
    subs = build["substitutions"]
    values = {"PROJECT_ID": PLACEHOLDERS["PROJECT"], "_REGION": PLACEHOLDERS["REGION"],
              "_BUCKET": PLACEHOLDERS["BUCKET"], "_TAG": PLACEHOLDERS["TAG"], "_REPOSITORY": subs["_REPOSITORY"]}
    image = string.Template(subs["_IMAGE"]).substitute(values)
    template = string.Template(subs["_TEMPLATE"]).substitute(values)
    launch = launch_body()["launchParameter"]
    assert launch["environment"]["sdkContainerImage"] == image
    assert launch["containerSpecGcsPath"] == template
    steps = {s["id"]: s["args"] for s in build["steps"]}
    assert steps["build"][:3] == ["build", "-f", "deploy/flex-template/Dockerfile"]
    assert (REPO / steps["build"][2]).is_file()
    assert steps["template"][:4] == ["dataflow", "flex-template", "build", "${_TEMPLATE}"]
    assert "--metadata-file=deploy/flex-template/metadata.json" in steps["template"]
    assert "--sdk-language=PYTHON" in steps["template"]


# --- Airflow DAG (read as text: Airflow is not a test dependency) ----------------------------------

def _dag_tree() -> ast.Module:
    return ast.parse((DEPLOY / "airflow" / "import_lerobot_dag.py").read_text())


def _assigned_literal(tree: ast.Module, name: str):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    raise AssertionError(f"the DAG does not assign {name}")


def test_dag_launches_the_template_with_the_launch_parameters():
    tree = _dag_tree()
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "id", None) == "DataflowStartFlexTemplateOperator"]
    assert len(calls) == 1
    kwargs = {k.arg: k.value for k in calls[0].keywords}
    assert {"task_id", "project_id", "location", "body"} <= set(kwargs)
    body = kwargs["body"]
    launch = body.values[[k.value for k in body.keys].index("launchParameter")]
    launch_keys = [k.value for k in launch.keys]
    assert set(launch_keys) <= {"jobName", "containerSpecGcsPath", "parameters", "environment", "launchOptions",
                                "update", "transformNameMappings"}
    assert getattr(launch.values[launch_keys.index("parameters")], "id", None) == "PARAMETERS"

    parameters_ = ast.literal_eval(_assigned_literal(tree, "PARAMETERS"))
    assert set(parameters_) == set(launch_body()["launchParameter"]["parameters"])
    assert parameters_ == {k: "{{ params.%s }}" % k for k in parameters_}  # every value a DAG param


def test_dag_params_defaults_are_valid_template_values():
    tree = _dag_tree()
    defaults = _assigned_literal(tree, "DEFAULT_PARAMS")
    bucket = ast.literal_eval(_assigned_literal(tree, "BUCKET"))
    # f"gs://{BUCKET}/..." -> the value with BUCKET filled in
    values = {}
    for key, value in zip(defaults.keys, defaults.values):
        if isinstance(value, ast.JoinedStr):
            value = "".join(v.value if isinstance(v, ast.Constant) else bucket for v in value.values)
        else:
            value = ast.literal_eval(value)
        values[ast.literal_eval(key)] = value
    declared = parameters()
    for name, value in values.items():
        assert matches_all(declared[name]["regexes"], value), (name, value)
    assert parse_template_parameters(values).one_part is False


# --- Dockerfile ----------------------------------------------------------------------------------

def _dockerfile() -> list[list[str]]:
    lines = (FLEX / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    return [line.split() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_dockerfile_entry_point_is_the_launcher():
    instructions = _dockerfile()
    env = dict(i[1].split("=", 1) for i in instructions if i[0] == "ENV")
    copies = {i[-1]: i[1:-1] for i in instructions if i[0] == "COPY" and not i[1].startswith("--from")}
    py_file = env["FLEX_TEMPLATE_PYTHON_PY_FILE"]
    assert copies[py_file] == ["deploy/flex-template/launcher.py"]
    assert (REPO / copies[py_file][0]).is_file()
    for sources in copies.values():
        for src in sources:
            assert (REPO / src.rstrip("/")).exists(), src
    # Nothing installed at launch time: the image already holds the package.
    assert not {"FLEX_TEMPLATE_PYTHON_REQUIREMENTS_FILE", "FLEX_TEMPLATE_PYTHON_SETUP_FILE"} & set(env)
    assert instructions[-1] == ["ENTRYPOINT", '["/opt/apache/beam/boot"]']


def test_dockerfile_pins_beam_and_the_launcher():
    instructions = _dockerfile()
    args = dict(i[1].split("=", 1) for i in instructions if i[0] == "ARG" and "=" in i[1])
    froms = [string.Template(i[1]).substitute(args) for i in instructions if i[0] == "FROM"]
    assert froms[-1] == f"apache/beam_python3.11_sdk:{beam.__version__}"
    launcher_base = froms[0]
    assert launcher_base.startswith("gcr.io/dataflow-templates-base/python311-template-launcher-base:")
    assert not launcher_base.endswith((":latest", ":public-image-latest"))
    copy_from = [i for i in instructions if i[0] == "COPY" and i[1].startswith("--from")]
    assert copy_from == [["COPY", "--from=launcher", "/opt/google/dataflow/python_template_launcher",
                          "/opt/google/dataflow/python_template_launcher"]]
    install = next(" ".join(i) for i in instructions if i[0] == "RUN" and "pip install" in " ".join(i))
    assert 'pip install --no-cache-dir "/template[dataflow]"' in install and "pip check" in install


# --- the job Dataflow would receive, built offline ----------------------------------------------

DATAFLOW_ARGS = ["--runner=DataflowRunner", "--project=test-project", "--region=us-central1",
                 "--temp_location=gs://lerobot-test/dataflow/tmp", "--job_name=lerobot-import-test",
                 "--sdk_container_image=us-central1-docker.pkg.dev/test-project/lerobot/lerobot-import:v1",
                 "--no_auth", "--dry_run=True"]


def _transform_names(proto) -> set[str]:
    return {t.unique_name for t in proto.components.transforms.values()}


def test_dataflow_job_graph_builds_without_network():
    argv = ["--dataset=gs://lerobot-test/lerobot/so101", "--output=gs://lerobot-test/imports/so101",
            "--inline_index"] + DATAFLOW_ARGS
    options = PipelineOptions(argv)
    assert options.get_all_options()["dry_run"] == "True"  # Beam 2.77's TestOptions.dry_run
    config = config_from_options(options.view_as(ImportOptions))
    result = build_pipeline(options, config, "2026-01-01T00:00:00+00:00").run()
    assert result.state == PipelineState.DONE  # dry run: translated, not submitted
    job = result.job
    assert job.proto.name == "lerobot-import-test"
    envs = [e for e in job.proto_pipeline.components.environments.values()]
    assert envs and all(e.urn == "beam:env:docker:v1" for e in envs)
    assert all(b"us-central1-docker.pkg.dev/test-project/lerobot/lerobot-import:v1" in e.payload for e in envs)
    # The import's whole graph reaches Dataflow, transform for transform.
    names = _transform_names(job.proto_pipeline)
    local = PipelineOptions(argv[:3])
    built = build_pipeline(local, config_from_options(local.view_as(ImportOptions)), "2026-01-01T00:00:00+00:00")
    plain = _transform_names(built.to_runner_api())
    shutil.rmtree(built.local_tempdir, ignore_errors=True)  # Beam removes its temporary folder only in run()
    imported = {n for n in names if n == "Import" or n.startswith("Import/")}
    assert imported == {n for n in plain if n == "Import" or n.startswith("Import/")}
    steps = ("CheckDatasets", "PlanEpisodesFiles", "ReadMp4Facts", "WriteParts", "CommitEpisodesFiles",
             "FinishDatasets")  # the import's named steps
    assert {"Datasets", "Import"} | {f"Import/{step}" for step in steps} <= names
    assert job.options.view_as(ImportOptions).inline_index is True


def test_launcher_submits_to_dataflow_and_returns():
    """The template's entry point with DataflowRunner (dry run) and template-style flag values."""
    launcher = load_launcher()
    assert launcher.main(["--dataset=gs://lerobot-test/lerobot/so101", "--output=gs://lerobot-test/imports",
                          "--inline_index=true", "--read_in_parts=false"] + DATAFLOW_ARGS) == 0


# --- the launcher returns without waiting -------------------------------------------------------

class _PendingResult(PipelineResult):
    def __init__(self):
        super().__init__(PipelineState.RUNNING)

    def wait_until_finish(self, duration=None):
        raise AssertionError("the launcher waited for the job")

    def metrics(self):
        raise AssertionError("the launcher read the job's metrics")


class PendingRunner(PipelineRunner):
    """A runner whose job never finishes: submitting returns a RUNNING result."""
    submitted: list = []

    def run_pipeline(self, pipeline, options):
        PendingRunner.submitted.append(options.view_as(ImportOptions).get_all_options())
        return _PendingResult()


def test_launcher_returns_while_the_job_is_still_running(tmp_path):
    PendingRunner.submitted.clear()
    started = time.monotonic()
    # The output is checked before the job is submitted (its own state must be safe to write): a local one
    # here, since no storage answers for gs:// in tests.
    code = load_launcher().main(["--dataset=gs://lerobot-test/ds", f"--output={tmp_path / 'out'}",
                                 "--skip_videos=true", f"--runner={__name__}.PendingRunner"])
    assert code == 0
    assert time.monotonic() - started < 30
    assert len(PendingRunner.submitted) == 1
    assert PendingRunner.submitted[0]["skip_videos"] is True
    assert PendingRunner.submitted[0]["dataset"] == ["gs://lerobot-test/ds"]


def test_run_without_wait_on_fnapirunner(tmp_path, capsys):
    out = tmp_path / "out"
    assert run(["--dataset", str(SAMPLE), "--output", str(out), "--runner", "FnApiRunner"], wait=False) == 0
    assert "episodes" not in capsys.readouterr().out  # no summary: that needs the finished job
    assert read_manifest(out)["status"] == "imported"  # FnApiRunner runs the job inside run()


def test_launcher_script_runs_the_import_on_fnapirunner(tmp_path):
    """`python launcher.py --name=value ...`, as the template launcher calls it (in a subprocess)."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(FLEX / "launcher.py"), f"--dataset={SAMPLE}", f"--output={out}",
                           "--inline_index=true", "--read_in_parts=false", "--runner=FnApiRunner"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = read_manifest(out)
    assert manifest["status"] == "imported"
    assert not (out / "media_index").exists()  # --inline_index=true took effect


# --- Cloud Scheduler script -----------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not available")
def test_scheduler_script_posts_the_launch_body(tmp_path):
    """create_job.sh with a stand-in gcloud: the job it creates POSTs the filled-in launch.json."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "gcloud-calls.json"
    (bin_dir / "gcloud").write_text(f"""#!{sys.executable}
import json, sys
args = sys.argv[1:]
if args[:3] == ["scheduler", "jobs", "describe"]:
    sys.exit(1)  # no such job yet
body = next(a.split("=", 1)[1] for a in args if a.startswith("--message-body-from-file="))
json.dump({{"args": args, "body": open(body).read()}}, open({str(record)!r}, "w"))
""")
    (bin_dir / "gcloud").chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **PLACEHOLDERS}
    proc = subprocess.run(["bash", str(DEPLOY / "scheduler" / "create_job.sh")], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    call = json.loads(record.read_text())
    args = call["args"]
    assert args[:5] == ["scheduler", "jobs", "create", "http", "lerobot-import-nightly"]
    assert ("--uri=https://dataflow.googleapis.com/v1b3/projects/test-project/locations/us-central1/"
            "flexTemplates:launch") in args
    assert "--http-method=POST" in args
    assert "--oauth-service-account-email=lerobot-import-scheduler@test-project.iam.gserviceaccount.com" in args
    assert "--oauth-token-scope=https://www.googleapis.com/auth/cloud-platform" in args
    assert json.loads(call["body"]) == launch_body()
