#!/usr/bin/env bash
# One device call on ONE GPU: CALL LIMIT [sft]. Both arms (learnmain, learnflip) run as two processes on the same
# GPU, sharing the host's 16 cores (gym.workers=8 each). Runs from .learning_h100/tree (git archive of HEAD), so the
# tree stays the same across calls while the checkout is edited. Call 2+ first fits the epochs into LIMIT (plan.py).
set -u
cd "$(dirname "$0")/.."
CALL=$1; LIMIT=$2
export PYTHONUNBUFFERED=1 LEARNING_WORK=$PWD/.learning_h100
ARGS="$(cat .learning_h100/ARGS)"
if [ "$CALL" != 1 ] && [ -f .learning_h100/args.json ]; then
  N=$(python3 .learning_h100/plan.py "$LIMIT") && ARGS="$(echo "$ARGS" | sed "s/--epochs [0-9]*/--epochs $N/")"
fi
export LEARNING_ARGS="$ARGS"
echo "call $CALL: $(date -u +%T) tree $(cat .learning_h100/tree/TREE_COMMIT) LEARNING_ARGS=$LEARNING_ARGS"; nproc; nvidia-smi -L
ln -sfn "$PWD/.whl" .learning_h100/tree/.whl
ln -sfn "$PWD/.gpu" .learning_h100/tree/.gpu
mkdir -p "$OUT/main" "$OUT/flip"
(cd .learning_h100/tree && CUDA_VISIBLE_DEVICES=0 OUT=$OUT/main bash benchmarks/gpu/run_suite.sh "learnmain:$LIMIT" > $OUT/main.log 2>&1) &
p1=$!
sleep 2
(cd .learning_h100/tree && CUDA_VISIBLE_DEVICES=0 OUT=$OUT/flip bash benchmarks/gpu/run_suite.sh "learnflip:$LIMIT" > $OUT/flip.log 2>&1) &
p2=$!
wait $p1 $p2
echo "call $CALL streams ended $(date -u +%T)"
for a in main flip; do echo "## $a"; sed -n '/===== summary/,$p' $OUT/$a.log; done
bash .learning_h100/backup.sh "$CALL" ${3:-}
