#!/usr/bin/env bash
# Prefect API server + UI for daVinci-kernel schedules. Env: PREFECT_HOME (default .davinci/prefect),
# PREFECT_SERVER_DATABASE_CONNECTION_URL (Postgres for shared use), HOST, PORT (4200).
set -euo pipefail
cd "$(dirname "$0")/.."
export PREFECT_HOME="${PREFECT_HOME:-$(pwd)/.davinci/prefect}"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
mkdir -p "$PREFECT_HOME"
exec .venv/bin/prefect server start --host "${HOST:-127.0.0.1}" --port "${PORT:-4200}"
