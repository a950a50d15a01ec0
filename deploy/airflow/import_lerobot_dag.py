"""Airflow DAG: launch the lerobot-import Flex Template nightly and wait for the job (deferred).

Deploy this file to the Composer/Airflow dags/ folder; it needs apache-airflow-providers-google.
The launch body mirrors deploy/flex-template/launch.json (same template parameters, validated
against the pipeline's options by tests/test_deploy.py); PARAMETERS' values are Jinja templates
over the DAG params, so a manual run can import another dataset list or output.
"""

from __future__ import annotations

import datetime

from airflow.providers.google.cloud.operators.dataflow import DataflowStartFlexTemplateOperator

try:  # Airflow 3
    from airflow.sdk import DAG, Param
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.models.param import Param

PROJECT = "my-project"
REGION = "us-central1"
BUCKET = "my-bucket"
IMAGE = f"{REGION}-docker.pkg.dev/{PROJECT}/lerobot/lerobot-import:latest-build"

#: Template parameters (names and values as in launch.json; see metadata.json for each one's rules).
PARAMETERS = {
    "datasets": "{{ params.datasets }}",
    "output": "{{ params.output }}",
    "one_part": "{{ params.one_part }}",
    "inline_index": "{{ params.inline_index }}",
}

#: Defaults of the DAG params the PARAMETERS templates read.
DEFAULT_PARAMS = {
    "datasets": f"gs://{BUCKET}/lerobot/*",
    "output": f"gs://{BUCKET}/imports",
    "one_part": "false",
    "inline_index": "false",
}

with DAG(
    dag_id="import_lerobot",
    description="Bulk import of LeRobot v3 datasets with the lerobot-import Flex Template",
    schedule="0 3 * * *",
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    params={name: Param(value, type="string") for name, value in DEFAULT_PARAMS.items()},
    tags=["lerobot", "dataflow"],
) as dag:
    DataflowStartFlexTemplateOperator(
        task_id="launch_import",
        project_id=PROJECT,
        location=REGION,
        body={
            "launchParameter": {
                "jobName": "lerobot-import-{{ ds_nodash }}",
                "containerSpecGcsPath": f"gs://{BUCKET}/templates/lerobot-import.json",
                "parameters": PARAMETERS,
                "environment": {
                    "sdkContainerImage": IMAGE,
                    "serviceAccountEmail": f"lerobot-import-worker@{PROJECT}.iam.gserviceaccount.com",
                    "tempLocation": f"gs://{BUCKET}/dataflow/tmp",
                    "stagingLocation": f"gs://{BUCKET}/dataflow/staging",
                    "maxWorkers": 20,
                    "machineType": "n2-standard-4",
                    "additionalUserLabels": {"app": "lerobot-import"},
                },
            }
        },
        append_job_name=True,
        deferrable=True,
    )
