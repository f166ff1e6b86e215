#!/usr/bin/env bash
# After a call: the learning logs into the work folder, the small files of the work folder into $OUT/work_small.tgz,
# (call 1) the SFT weights in two parts, and the logs' tails to stdout.  Usage: backup.sh CALL [sft]
set -u
cd "$(dirname "$0")/.."
W=.learning_n400; CALL=$1
mkdir -p $W/logs
for g in 0 1; do
  tgz=$OUT/gpu$g/gpu_suite.tgz; [ -f "$tgz" ] || continue
  for j in learnmain learnflip; do
    tar xzf "$tgz" -O ./$j/learning_log.txt > $W/logs/call${CALL}_${j}_learning_log.txt 2>/dev/null || rm -f $W/logs/call${CALL}_${j}_learning_log.txt
    [ -s $W/logs/call${CALL}_${j}_learning_log.txt ] || rm -f $W/logs/call${CALL}_${j}_learning_log.txt
  done
done
(cd $W && find . \( -name '*.json' -o -name 'steps.jsonl' -o -name '*.txt' -o -path './eval_*/episodes.jsonl' -o -name 'ARGS' -o -name '*.py' -o -name '*.sh' \) \
   -type f -not -path './problems.jsonl' -not -path './tree/*' -size -4M | sort > /tmp/bk_list)
tar czf $OUT/work_small.tgz -C $W -T /tmp/bk_list
if [ "$(stat -c %s $OUT/work_small.tgz)" -gt 15000000 ]; then
  (cd $W && find . \( -name '*.json' -o -name '*.txt' \) -type f -size -1M | sort > /tmp/bk_list); tar czf $OUT/work_small.tgz -C $W -T /tmp/bk_list
fi
[ "${2:-}" = sft ] && [ -f $W/sft/model.safetensors ] && split -b 12M -d $W/sft/model.safetensors $OUT/sft_model.part
ls -la $OUT $OUT/gpu0 $OUT/gpu1 2>/dev/null | grep -v '^total'
du -sh $W; df -h /work 2>/dev/null | tail -1
for f in $W/logs/call${CALL}_*; do echo "== $f"; grep -v 'median s per evaluation' "$f" | cut -c1-250 | tail -n 24; done
