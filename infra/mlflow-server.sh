#!/usr/bin/env bash
# MLflow tracking server for daVinci-kernel. Env: MLFLOW_BACKEND (default sqlite in ./mlruns),
# MLFLOW_ARTIFACTS (default ./mlartifacts), HOST (127.0.0.1), PORT (5000).
set -euo pipefail
cd "$(dirname "$0")/.."
BACKEND="${MLFLOW_BACKEND:-sqlite:///$(pwd)/mlruns/mlflow.db}"
ARTIFACTS="${MLFLOW_ARTIFACTS:-$(pwd)/mlartifacts}"
mkdir -p mlruns
exec .venv/bin/mlflow server --backend-store-uri "$BACKEND" --artifacts-destination "$ARTIFACTS" \
  --host "${HOST:-127.0.0.1}" --port "${PORT:-5000}" --workers 1
