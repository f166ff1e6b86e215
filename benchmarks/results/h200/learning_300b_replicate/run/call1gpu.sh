#!/usr/bin/env bash
# One device call on nvidia-h200 (one GPU): CALL LIMIT. Both arms of the learning run (learnmain, learnflip) as two
# processes sharing the one GPU, gym.workers=8 each, as on the H100 run. No trust stream (no second GPU). The learning
# tree is .learning_h100b/tree (git archive of HEAD), so all calls run the same code. Epochs are cut to fit LIMIT only
# when PLAN_LIMIT is set (plan.py).
set -u
cd "$(dirname "$0")/.."
CALL=$1; LIMIT=$2
export PYTHONUNBUFFERED=1 LEARNING_WORK=$PWD/.learning_h100b
ARGS="$(cat .learning_h100b/ARGS)"
if [ "$CALL" != 1 ] && [ -f .learning_h100b/args.json ] && [ -n "${PLAN_LIMIT:-}" ]; then
  N=$(python3 .learning_h100b/plan.py "$PLAN_LIMIT") && ARGS="$(echo "$ARGS" | sed "s/--epochs [0-9]*/--epochs $N/")"
fi
export LEARNING_ARGS="$ARGS"
echo "call $CALL: $(date -u +%T) tree $(cat .learning_h100b/tree/TREE_COMMIT) LEARNING_ARGS=$LEARNING_ARGS"; nproc; nvidia-smi -L
bash benchmarks/gpu/install_wheels.sh > $OUT/install.log 2>&1 || { tail -n 20 $OUT/install.log; exit 1; }
ln -sfn "$PWD/.whl" .learning_h100b/tree/.whl
ln -sfn "$PWD/.gpu" .learning_h100b/tree/.gpu
mkdir -p "$OUT/main" "$OUT/flip"
(cd .learning_h100b/tree && CUDA_VISIBLE_DEVICES=0 OUT=$OUT/main bash benchmarks/gpu/run_suite.sh "learnmain:$LIMIT" > $OUT/main.log 2>&1) &
p1=$!
sleep 2
(cd .learning_h100b/tree && CUDA_VISIBLE_DEVICES=0 OUT=$OUT/flip bash benchmarks/gpu/run_suite.sh "learnflip:$LIMIT" > $OUT/flip.log 2>&1) &
p2=$!
wait $p1 $p2
echo "call $CALL learning streams ended $(date -u +%T)"
for a in main flip; do echo "## $a"; sed -n '/===== summary/,$p' $OUT/$a.log; done
bash .learning_h100b/backup.sh "$CALL"
