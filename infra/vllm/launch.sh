#!/usr/bin/env bash
# Serve a checkpoint with `vllm serve` from vLLM's own venv (see infra/vllm/README.md).
#   bash infra/vllm/launch.sh --install-only          create the venv and install requirements.txt
#   bash infra/vllm/launch.sh CHECKPOINT [PORT] [extra vllm serve args...]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${VLLM_VENV:-$HOME/.venvs/davinci-vllm}"
PYTHON="${PYTHON:-python3}"

if [[ ! -x "$VENV/bin/vllm" ]]; then
  echo "creating vLLM venv at $VENV" >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --upgrade --quiet pip
  "$VENV/bin/python" -m pip install --quiet -r "$HERE/requirements.txt"
fi
if [[ "${1:-}" == "--install-only" ]]; then
  "$VENV/bin/vllm" --version
  exit 0
fi
if [[ $# -lt 1 ]]; then
  echo "usage: $0 CHECKPOINT [PORT] [extra vllm serve args...]   (or --install-only)" >&2
  exit 2
fi
CHECKPOINT="$1"; shift
PORT="${1:-8000}"; [[ $# -gt 0 ]] && shift
exec "$VENV/bin/vllm" serve "$CHECKPOINT" \
  --port "$PORT" \
  --served-model-name davinci \
  --generation-config vllm \
  --dtype bfloat16 \
  --max-model-len "${MAX_MODEL_LEN:-4096}" \
  --gpu-memory-utilization "${GPU_UTIL:-0.85}" \
  --tensor-parallel-size "${TP:-1}" \
  "$@"
