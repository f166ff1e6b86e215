#!/usr/bin/env bash
# One device call: CALL LIMIT [sft]. Runs from .learning_n400/tree (git archive of HEAD: the tree stays the same
# across calls while the checkout is being edited). Call 2+ first fits the epochs into LIMIT (plan.py).
set -u
cd "$(dirname "$0")/.."
CALL=$1; LIMIT=$2
export PYTHONUNBUFFERED=1 LEARNING_WORK=$PWD/.learning_n400
ARGS="$(cat .learning_n400/ARGS)"
if [ "$CALL" != 1 ] && [ -f .learning_n400/args.json ]; then
  N=$(python3 .learning_n400/plan.py "$LIMIT") && ARGS="$(echo "$ARGS" | sed "s/--epochs [0-9]*/--epochs $N/")"
fi
export LEARNING_ARGS="$ARGS"
echo "call $CALL: $(date -u +%T) tree $(cat .learning_n400/tree/TREE_COMMIT) LEARNING_ARGS=$LEARNING_ARGS"; nproc; nvidia-smi -L
ln -sfn "$PWD/.whl" .learning_n400/tree/.whl
(cd .learning_n400/tree && OUT=$OUT bash benchmarks/gpu/run_streams.sh "learnmain:$LIMIT" "learnflip:$LIMIT")
echo "call $CALL streams ended $(date -u +%T)"
bash .learning_n400/backup.sh "$CALL" ${3:-}
