#!/usr/bin/env bash
# Issue 12's GPU checks at the checkout's tree, on the GPU in CUDA_VISIBLE_DEVICES, one set per call; every suite's
# archive ends up in $OUT/trust.tgz (a call brings back 8 files at most).
set -u
CALL=$1
T=$(mktemp -d)
q() { local tag=$1; shift; mkdir -p $T/$tag; OUT=$T/$tag bash benchmarks/gpu/run_suite.sh "$@"; }
case "$CALL" in
  1) TRUST_ARGS="--presets runtime --kinds honest" q c1_honest_runtime trustq:290
     TRUST_ARGS="--presets strict --kinds cheat,open --run-timeout-s 30" q c1_cheats_strict trustq:200 ;;
  2) TRUST_ARGS="--presets strict --kinds honest" q c2_honest_strict trustq:260
     TRUST_ARGS="--presets runtime --kinds cheat,open --run-timeout-s 30" q c2_cheats_runtime trustq:250 ;;
  3) q c3_bench benchold:170 benchnew:170
     q c3_hacks hacks:150 ;;
esac
tar czf $OUT/trust.tgz -C $T .
echo "trust call $CALL done $(date -u +%T)"
