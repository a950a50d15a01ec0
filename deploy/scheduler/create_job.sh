#!/usr/bin/env bash
# Create (or update) the Cloud Scheduler job that launches the nightly import: an HTTP POST of
# deploy/flex-template/launch.json to Dataflow's flexTemplates:launch, authenticated with an
# OAuth token of the scheduler service account (googleapis.com takes OAuth, not OIDC).
#
#   PROJECT=my-project REGION=us-central1 BUCKET=my-bucket TAG=abc123 deploy/scheduler/create_job.sh
#
# Optional: SCHEDULE (cron, default "0 3 * * *"), TIME_ZONE (default Etc/UTC),
#           SCHEDULER_SA (default lerobot-import-scheduler@PROJECT.iam.gserviceaccount.com).
set -euo pipefail

: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET}" "${TAG:?set TAG}"
SCHEDULE="${SCHEDULE:-0 3 * * *}"
TIME_ZONE="${TIME_ZONE:-Etc/UTC}"
SCHEDULER_SA="${SCHEDULER_SA:-lerobot-import-scheduler@${PROJECT}.iam.gserviceaccount.com}"
JOB=lerobot-import-nightly
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

body="$(mktemp)"
trap 'rm -f "$body"' EXIT
# Fill ${PROJECT} ${REGION} ${BUCKET} ${TAG} (an unknown placeholder fails) and check the JSON.
PROJECT="$PROJECT" REGION="$REGION" BUCKET="$BUCKET" TAG="$TAG" python3 - "$HERE/../flex-template/launch.json" > "$body" <<'PY'
import json, os, string, sys
text = string.Template(open(sys.argv[1]).read()).substitute(
    {k: os.environ[k] for k in ("PROJECT", "REGION", "BUCKET", "TAG")})
json.loads(text)
sys.stdout.write(text)
PY

uri="https://dataflow.googleapis.com/v1b3/projects/${PROJECT}/locations/${REGION}/flexTemplates:launch"
args=(
  --project="$PROJECT" --location="$REGION"
  --schedule="$SCHEDULE" --time-zone="$TIME_ZONE"
  --uri="$uri" --http-method=POST
  --message-body-from-file="$body"
  --oauth-service-account-email="$SCHEDULER_SA"
  --oauth-token-scope=https://www.googleapis.com/auth/cloud-platform
  --attempt-deadline=320s
)

if gcloud scheduler jobs describe "$JOB" --project="$PROJECT" --location="$REGION" > /dev/null 2>&1; then
  gcloud scheduler jobs update http "$JOB" "${args[@]}" --update-headers=Content-Type=application/json
else
  gcloud scheduler jobs create http "$JOB" "${args[@]}" --headers=Content-Type=application/json
fi
