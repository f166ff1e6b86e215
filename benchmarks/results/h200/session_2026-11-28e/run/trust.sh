#!/usr/bin/env bash
# Issue 12's GPU checks at the checkout's tree on one GPU, in three calls of a lent machine; every suite's archive
# ends up in $OUT/trust.tgz. Honest kernels run alone on the GPU (call 1), the cheats after (call 2), then the
# side-by-side bench and the hack scenarios (call 3).
#   bash benchmarks/results/h200/session_2026-11-28e/run/trust.sh 1
set -u
CALL=$1
T=$(mktemp -d)
q() { local tag=$1; shift; mkdir -p $T/$tag; OUT=$T/$tag bash benchmarks/gpu/run_suite.sh "$@"; }
case "$CALL" in
  1) TRUST_ARGS="--presets runtime --kinds honest" q c1_honest_runtime trustq:300
     TRUST_ARGS="--presets strict --kinds honest" q c1_honest_strict trustq:260 ;;
  2) TRUST_ARGS="--presets strict --kinds cheat,open --run-timeout-s 30" q c2_cheats_strict trustq:270
     TRUST_ARGS="--presets runtime --kinds cheat,open --run-timeout-s 30" q c2_cheats_runtime trustq:270 ;;
  3) q c3_bench benchold:170 benchnew:170
     q c3_hacks hacks:150 ;;
esac
tar czf $OUT/trust.tgz -C $T .
echo "trust call $CALL done $(date -u +%T)"
