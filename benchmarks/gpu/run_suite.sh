#!/usr/bin/env bash
# Run named GPU jobs in one call of a lent GPU machine, each under its own time limit; keep every log and
# result in one archive under $OUT (a call brings back at most 8 files), and print each job's tail.
#
#   OUT=/tmp/out benchmarks/gpu/run_suite.sh hacks!:240 bench:200 datacheck:110
#   (a `!` after the name: stop the suite when that job fails)
#
# Jobs (name:seconds): hacks (strict), hacksall, trust (trustrt, truststrict: one preset; trusthonestrt: the honest
# corpus under runtime; trustq: $TRUST_ARGS, e.g. --presets runtime --kinds cheat --only 'watch|hang'), replaycheck (the launch replay on real GPU kernels), benchnew, benchprod (runtime checks + profiled forward),
# benchold (the tree in .gpu/old, side by side),
# memory, memoryq, genopts, fsdp ($FSDP_ARGS, e.g. --gpus 1,8), learning ($LEARNING_ARGS; learnmain and learnflip: its
# RL arm and its flipped control as two processes, e.g. on two GPUs sharing $LEARNING_WORK), llmgpu, bench, baselines (all 100), datacheck, baselines0, baselines1, survival, seedskills, rl, gputests, evolution ($EVOLUTION_ARGS, e.g. --wall-s 80),
# rlgpus (one RL epoch of the learning demonstration on 1 and N GPUs, its wall split; $RLGPUS_ARGS), lineage ($LINEAGE_ARGS), firstcall (a fresh process's CUDA init and first launches; N at once), thrnew / throld (issue 14's one-GPU throughput, this tree / .gpu/old; $THR_MODES, $THR_OLD_MODES), ipcrelease, stall ($STALL_ARGS), underload ($UNDERLOAD_ARGS; multi-GPU), cluster (kernelgym_cluster_bench.py on the GPUs; $CLUSTER_ARGS, e.g. --modes local local-dask:8).
# Every job's folder also holds gpu_memory.csv and gpu_memory_by_pid.csv (nvidia-smi every 250 ms; only the GPUs
# in CUDA_VISIBLE_DEVICES where it is set, so two suites can run side by side, one per GPU, each with its own $OUT).
# Needs: PYTHONPATH with the repo; KernelBench in $KERNELBENCH_DIR (default .gpu/kernelbench, carried).
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/davinci-gpu-out}"
mkdir -p "$OUT"
WORK="$(mktemp -d)"
export PYTHONUNBUFFERED=1
export KERNELBENCH_DIR="${KERNELBENCH_DIR:-$PWD/.gpu/kernelbench}" DAVINCI_KERNELBENCH="${DAVINCI_KERNELBENCH:-$PWD/.gpu/kernelbench}"
if ls .whl/*.whl >/dev/null 2>&1; then
  bash benchmarks/gpu/install_wheels.sh && export PYTHONPATH="$PWD:/tmp/site:${PYTHONPATH:-}"
else
  export PYTHONPATH="$PWD:${PYTHONPATH:-}"
fi
SMI_GPUS=()
[ -n "${CUDA_VISIBLE_DEVICES:-}" ] && SMI_GPUS=(-i "$CUDA_VISIBLE_DEVICES")
nvidia-smi "${SMI_GPUS[@]}" --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$WORK/device.txt"
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset} of $(nvidia-smi -L | wc -l) GPUs; kernel $(uname -r) (4.4.0: gVisor)" | tee -a "$WORK/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$WORK/device.txt"

job_cmd() {
  case "$1" in
    hacks)      echo "python3 benchmarks/gpu/kernelgym_hacks_gpu.py --presets strict" ;;
    hacksall)   echo "python3 benchmarks/gpu/kernelgym_hacks_gpu.py" ;;
    bench)      echo "python3 benchmarks/kernelgym_bench.py" ;;
    datacheck)  echo "python3 -m data_prep.gpu_check --synthetic 8 --out $2" ;;
    baselines)  echo "python3 benchmarks/gpu/kernelgym_baselines_l1.py --max-s 1.5 --budget-s ${BASELINE_BUDGET_S:-470}" ;;
    baselines0) echo "python3 benchmarks/gpu/kernelgym_baselines_l1.py --start 0 --stop 50" ;;
    baselines1) echo "python3 benchmarks/gpu/kernelgym_baselines_l1.py --start 50 --stop 100" ;;
    survival)   echo "python3 benchmarks/gpu/kernelgym_survival_gpu.py" ;;
    seedskills) echo "python3 benchmarks/gpu/skills_admit_seed.py --budget-s ${SEED_BUDGET_S:-300}" ;;
    rlgpus)     echo "python3 benchmarks/gpu/rl_epoch_gpus.py ${RLGPUS_ARGS:-}" ;;
    rl)         echo "python3 benchmarks/gpu/rl_tiny_gpu.py --budget-s ${RL_BUDGET_S:-120}" ;;
    trust)      echo "python3 benchmarks/gpu/kernelgym_trust_gpu.py" ;;
    trustrt)    echo "python3 benchmarks/gpu/kernelgym_trust_gpu.py --presets runtime" ;;
    truststrict) echo "python3 benchmarks/gpu/kernelgym_trust_gpu.py --presets strict" ;;
    trusthonestrt) echo "python3 benchmarks/gpu/kernelgym_trust_gpu.py --presets runtime --kinds honest" ;;
    trustq)     echo "python3 benchmarks/gpu/kernelgym_trust_gpu.py ${TRUST_ARGS:-}" ;;
    replaycheck) echo "python3 benchmarks/gpu/replay_check.py" ;;
    evolution)  echo "python3 benchmarks/gpu/evolution_gpu.py ${EVOLUTION_ARGS:-}" ;;
    lineage)    echo "python3 benchmarks/gpu/lineage_gpu.py ${LINEAGE_ARGS:-}" ;;
    cluster)    echo "python3 benchmarks/kernelgym_cluster_bench.py --device cuda --out $2/kernelgym_cluster_bench.txt ${CLUSTER_ARGS:-}" ;;
    thrnew)     echo "python3 benchmarks/kernelgym_cluster_bench.py --device cuda --problems all --reps 3 --cold-reps 1 --cache-dir /tmp/kg-thr-new --out $2/kernelgym_throughput_new.txt --modes ${THR_MODES:-local 'local/2 lanes' 'local/4 lanes'}" ;;
    throld)     echo "python3 benchmarks/kernelgym_cluster_bench.py --device cuda --problems all --reps 3 --cold-reps 1 --cache-dir /tmp/kg-thr-old --out $2/kernelgym_throughput_old.txt --tree .gpu/old --modes ${THR_OLD_MODES:-local 'local/4 lanes'}" ;;
    firstcall)  echo "python3 benchmarks/gpu/first_call_probe.py" ;;
    stall)      echo "python3 benchmarks/gpu/kernelgym_stall_probe.py ${STALL_ARGS:-}" ;;
    benchnew)   echo "python3 benchmarks/kernelgym_bench.py --tag new" ;;
    benchprod)  echo "python3 benchmarks/kernelgym_bench.py --production --tag prod" ;;
    benchold)   echo "cd .gpu/old && PYTHONPATH=\$PWD:\$PYTHONPATH python3 benchmarks/kernelgym_bench.py --tag old" ;;
    memory)     echo "python3 benchmarks/gpu/rl_update_memory.py" ;;
    memoryq)    echo "python3 benchmarks/gpu/rl_update_memory.py --quick" ;;
    genopts)    echo "python3 benchmarks/gpu/generation_options.py" ;;
    fsdp)       echo "python3 benchmarks/gpu/fsdp_step.py ${FSDP_ARGS:-}" ;;
    learning)   echo "python3 benchmarks/gpu/learning_demo.py ${LEARNING_ARGS:-}" ;;
    learnmain)  echo "python3 benchmarks/gpu/learning_demo.py ${LEARNING_ARGS:-} --stages sft,eval_before,rl,eval_rl,sft_control,eval_sft" ;;
    learnflip)  echo "python3 benchmarks/gpu/learning_demo.py ${LEARNING_ARGS:-} --stages flipped,eval_flipped --wait-s 600" ;;
    llmgpu)     echo "python3 -m pytest -q -m gpu tests/llm/test_gpu.py -p no:cacheprovider" ;;
    underload)  echo "python3 benchmarks/gpu/self_speedup_under_load.py ${UNDERLOAD_ARGS:-}" ;;
    ipcrelease) echo "python3 benchmarks/gpu/ipc_release_check.py" ;;
    gputests)   echo "python3 -m pytest -q -m gpu tests/llm tests/kernelgym tests/data_prep tests/skills -p no:cacheprovider" ;;
    *) return 1 ;;
  esac
}

summary=()
for spec in "$@"; do
  name="${spec%%:*}"; limit="${spec##*:}"; must=0
  case "$name" in *!) name="${name%!}"; must=1 ;; esac
  dir="$WORK/$name"; mkdir -p "$dir"
  cmd="$(job_cmd "$name" "$dir")" || { echo "unknown job $name"; continue; }
  echo; echo "===== $name (limit ${limit}s): $cmd"
  start=$(date +%s)
  # Device memory while the job runs, outside its processes: the whole GPU and each process (pid, MiB),
  # every 250 ms, with timestamps to line up with the job's log (which evaluation held how much).
  nvidia-smi "${SMI_GPUS[@]}" --query-gpu=timestamp,memory.used --format=csv,noheader -lms 250 > "$dir/gpu_memory.csv" 2>/dev/null &
  watch_gpu=$!
  nvidia-smi --query-compute-apps=timestamp,pid,used_memory --format=csv,noheader -lms 250 > "$dir/gpu_memory_by_pid.csv" 2>/dev/null &
  watch_pid=$!
  OUT="$dir" timeout --kill-after=10 "$limit" bash -c "$cmd" > "$dir/log.txt" 2>&1
  rc=$?
  kill "$watch_gpu" "$watch_pid" 2>/dev/null; wait "$watch_gpu" "$watch_pid" 2>/dev/null
  peak=$(awk -F', ' '{gsub(/ MiB/,"",$2); if ($2+0 > m) m = $2+0} END {printf "%.1f GiB", m/1024}' "$dir/gpu_memory.csv")
  took=$(( $(date +%s) - start ))
  tail -n 45 "$dir/log.txt"
  summary+=("$name rc=$rc ${took}s peak device memory $peak")
  if [ "$must" = 1 ] && [ "$rc" != 0 ]; then summary+=("stopped: $name failed"); break; fi
done
tar czf "$OUT/gpu_suite.tgz" -C "$WORK" .
echo; echo "===== summary"; cat "$WORK/device.txt"; printf '%s\n' "${summary[@]}"
