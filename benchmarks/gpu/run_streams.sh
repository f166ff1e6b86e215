#!/usr/bin/env bash
# Two run_suite.sh suites side by side on a two-GPU machine, one per GPU, each with its own $OUT folder
# ($OUT/gpu0, $OUT/gpu1: an archive and a log each), then both summaries. Two single-GPU suites in one call
# spend a two-GPU lease the way one GPU would spend two leases. Timing jobs then share the host (CPU cores,
# PCIe) with the other GPU's job: the `underload` job measures what that does to self-speedup.
#
#   OUT=/tmp/out benchmarks/gpu/run_streams.sh "benchnew:220 benchold:140" "trust:420 hacks:140"
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/davinci-gpu-out}"
pids=()
for gpu in 0 1; do
  jobs_of_gpu=$([ "$gpu" = 0 ] && echo "${1:-}" || echo "${2:-}")
  [ -z "$jobs_of_gpu" ] && continue
  mkdir -p "$OUT/gpu$gpu"
  # shellcheck disable=SC2086  # the job list splits into one argument per job
  CUDA_VISIBLE_DEVICES=$gpu OUT="$OUT/gpu$gpu" bash benchmarks/gpu/run_suite.sh $jobs_of_gpu > "$OUT/gpu$gpu.log" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
for gpu in 0 1; do
  [ -f "$OUT/gpu$gpu.log" ] || continue
  echo "########## GPU $gpu"; sed -n '/===== summary/,$p' "$OUT/gpu$gpu.log"
done
