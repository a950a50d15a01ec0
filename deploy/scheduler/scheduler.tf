# The nightly import as Terraform: a Cloud Scheduler job POSTing launch.json (the same body the
# gcloud script sends) to flexTemplates:launch with an OAuth token of the scheduler account.

variable "project" { type = string }
variable "region" {
  type    = string
  default = "us-central1"
}
variable "bucket" {
  description = "Bucket holding the template spec, the datasets and the imports."
  type        = string
}
variable "tag" {
  description = "Image tag built by deploy/cloudbuild.yaml."
  type        = string
}
variable "schedule" {
  type    = string
  default = "0 3 * * *"
}
variable "scheduler_service_account" {
  description = "Service account whose OAuth token launches the job (roles/dataflow.developer, roles/iam.serviceAccountUser on the worker account)."
  type        = string
}

resource "google_cloud_scheduler_job" "lerobot_import_nightly" {
  project          = var.project
  region           = var.region
  name             = "lerobot-import-nightly"
  description      = "Launch the lerobot-import Flex Template (bulk import of LeRobot v3 datasets)."
  schedule         = var.schedule
  time_zone        = "Etc/UTC"
  attempt_deadline = "320s"

  retry_config {
    retry_count = 1
  }

  http_target {
    http_method = "POST"
    uri         = "https://dataflow.googleapis.com/v1b3/projects/${var.project}/locations/${var.region}/flexTemplates:launch"
    headers     = { "Content-Type" = "application/json" }
    body = base64encode(templatefile("${path.module}/../flex-template/launch.json", {
      PROJECT = var.project
      REGION  = var.region
      BUCKET  = var.bucket
      TAG     = var.tag
    }))

    oauth_token {
      service_account_email = var.scheduler_service_account
      scope                 = "https://www.googleapis.com/auth/cloud-platform"
    }
  }
}
