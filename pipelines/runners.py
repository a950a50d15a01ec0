"""Which runner a command line names, and whether it can run: checked before any lease or request,
since Beam would say it only once the pipeline is submitted. Asks nothing of the network."""

from __future__ import annotations

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


def runner_problem(options: PipelineOptions) -> Optional[str]:
    """Why the runner options cannot run (an unknown runner; Dataflow without its project, region or
    temp_location), as one line; None when they can. Asks nothing of the network."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner
    if runner is None or not isinstance(runner, str):
        return None
    from apache_beam.runners.runner import create_runner
    try:
        name = type(create_runner(runner)).__name__
    except (ValueError, ImportError) as ex:
        return f"--runner {runner}: {str(ex).splitlines()[0] if str(ex) else 'unknown runner'}"
    if name != "DataflowRunner":
        return None
    import importlib.util
    if importlib.util.find_spec("apitools") is None:  # Beam's Dataflow client, in apache-beam[gcp] only
        return (f"--runner {runner} needs Beam's Google Cloud libraries, which this install leaves out: "
                "pip install 'lerobot-beam-import[dataflow]' (or apache-beam[gcp])")
    cloud = options.view_as(GoogleCloudOptions)
    values = {"project": cloud.project, "region": cloud.region,
              "temp_location": cloud.temp_location or cloud.staging_location}
    missing = [(k, example) for k, example in DATAFLOW_NEEDS if not values[k]]
    if not missing:
        return None
    return (f"--runner {runner} needs {', '.join('--' + k for k, _ in missing)} (e.g. "
            f"{' '.join(f'--{k} {example}' for k, example in missing)})")


def is_dry_run(options: PipelineOptions) -> bool:
    return str(options.get_all_options().get("dry_run")).lower() in ("true", "1")
