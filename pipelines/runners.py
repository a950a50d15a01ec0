"""Which runner a command line names, and whether it can run: checked before any lease or request,
since Beam would say it only once the pipeline is submitted. Asks nothing of the network."""

from __future__ import annotations

import re

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions


#: `--runner` values that name Beam's Dask runner (its short names, its class path): the import runs them on
#: `pipelines.dask_runner`, which computes what the DirectRunner computes (Beam's own loses outputs).
DASK_RUNNER_NAMES = ("daskrunner", "dask", "apache_beam.runners.dask.dask_runner.daskrunner")


def use_dask_runner(options: PipelineOptions) -> bool:
    """`--runner DaskRunner` (or Beam's class path) runs on `pipelines.dask_runner.DaskRunner`; only then is
    that module (and Dask) loaded. SystemExit with one line when this Beam or this install cannot run it."""
    from apache_beam.options.pipeline_options import StandardOptions

    standard = options.view_as(StandardOptions)
    if not isinstance(standard.runner, str) or standard.runner.lower() not in DASK_RUNNER_NAMES:
        return False
    from pipelines import dask_runner
    dask_runner.check_beam()
    problem = dask_runner.check_installed()
    if problem:
        raise SystemExit(f"error: {problem}")
    standard.runner = dask_runner.RUNNER_PATH
    return True


DATAFLOW_NEEDS = (("project", "PROJECT"), ("region", "us-central1"), ("temp_location", "gs://BUCKET/tmp"))
#: A Google Cloud project ID (6 to 30 lowercase letters, digits and hyphens, starting with a letter), with
#: an optional `domain:` prefix (domain-scoped projects).
_PROJECT_ID = re.compile(r"([a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
_REGION = re.compile(r"[a-z]+-[a-z]+[0-9]+")


class RunnerProblem(str):
    """Why the runner options cannot run; `usage`: the command line is wrong (exit status 2), else the
    install lacks what the runner needs (1)."""

    usage = True


def _install_problem(text: str) -> RunnerProblem:
    problem = RunnerProblem(text)
    problem.usage = False
    return problem


def first_line(ex: BaseException) -> str:
    """An exception in one line: its type and its message's first line."""
    text = str(ex).strip().splitlines()
    return f"{type(ex).__name__}: {text[0][:500]}" if text else type(ex).__name__


def runner_problem(options: PipelineOptions) -> Optional[RunnerProblem]:
    """Why the runner options cannot run (an unknown runner; Dataflow without its project, region or
    temp_location, or with one that no Dataflow job takes), as one line; None when they can. Asks nothing
    of the network: Beam would find a bad value only by submitting, after a minute of retries, in a
    traceback."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner
    if runner is None or not isinstance(runner, str):
        return None
    from apache_beam.runners.runner import create_runner
    try:
        name = type(create_runner(runner)).__name__
    except (ValueError, ImportError) as ex:
        return RunnerProblem(f"--runner {runner}: {str(ex).splitlines()[0] if str(ex) else 'unknown runner'}")
    if name != "DataflowRunner":
        return None
    import importlib.util
    if importlib.util.find_spec("apitools") is None:  # Beam's Dataflow client, in apache-beam[gcp] only
        return _install_problem(f"--runner {runner} needs Beam's Google Cloud libraries, which this install leaves "
                                "out: pip install 'lerobot-beam-import[dataflow]' (or apache-beam[gcp])")
    cloud = options.view_as(GoogleCloudOptions)
    values = {"project": cloud.project, "region": cloud.region,
              "temp_location": cloud.temp_location or cloud.staging_location}
    missing = [(k, example) for k, example in DATAFLOW_NEEDS if not values[k]]
    if missing:
        return RunnerProblem(f"--runner {runner} needs {', '.join('--' + k for k, _ in missing)} (e.g. "
                             f"{' '.join(f'--{k} {example}' for k, example in missing)})")
    if not _PROJECT_ID.fullmatch(str(values["project"])):
        return RunnerProblem(f"--project {values['project']} is not a Google Cloud project ID (6 to 30 lowercase "
                             "letters, digits and hyphens, starting with a letter): give the project's ID, as "
                             "`gcloud projects list` shows it")
    if not _REGION.fullmatch(str(values["region"])):
        return RunnerProblem(f"--region {values['region']} is not a Google Cloud region (e.g. us-central1, "
                             "europe-west4)")
    if not str(values["temp_location"]).startswith("gs://"):
        return RunnerProblem(f"--temp_location {values['temp_location']}: Dataflow stages its files in Cloud "
                             "Storage, so it is a gs:// folder (e.g. gs://BUCKET/tmp)")
    return None


def is_dry_run(options: PipelineOptions) -> bool:
    return str(options.get_all_options().get("dry_run")).lower() in ("true", "1")
