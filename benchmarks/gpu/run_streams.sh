#!/usr/bin/env bash
# Several run_suite.sh suites side by side on a machine of several GPUs, one suite per GPU (argument i runs on
# GPU i-1), each with its own $OUT folder ($OUT/gpu0, $OUT/gpu1, ...: an archive and a log each), then every
# summary. N single-GPU suites in one call spend an N-GPU lease the way one GPU would spend N leases. Timing
# jobs then share the host (CPU cores, PCIe) with the other GPUs' jobs: the `underload` job measures what that
# does to self-speedup. An empty argument leaves its GPU idle.
#
#   OUT=/tmp/out benchmarks/gpu/run_streams.sh "benchnew:220 benchold:140" "trust:420 hacks:140" "" "learning:580"
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/davinci-gpu-out}"
pids=()
gpu=0
for jobs_of_gpu in "$@"; do
  if [ -n "$jobs_of_gpu" ]; then
    mkdir -p "$OUT/gpu$gpu"
    # shellcheck disable=SC2086  # the job list splits into one argument per job
    CUDA_VISIBLE_DEVICES=$gpu OUT="$OUT/gpu$gpu" bash benchmarks/gpu/run_suite.sh $jobs_of_gpu > "$OUT/gpu$gpu.log" 2>&1 &
    pids+=($!)
  fi
  gpu=$((gpu + 1))
done
[ "${#pids[@]}" -gt 0 ] && wait "${pids[@]}"
for ((i = 0; i < gpu; i++)); do
  [ -f "$OUT/gpu$i.log" ] || continue
  echo "########## GPU $i"; sed -n '/===== summary/,$p' "$OUT/gpu$i.log"
done
