#!/usr/bin/env bash
# After a call: the learning logs into the work folder, the small files of the work folder into $OUT/work_small.tgz,
# and the logs' tails to stdout.  Usage: backup.sh CALL
set -u
cd "$(dirname "$0")/.."
W=.learning_h100b; CALL=$1
mkdir -p $W/logs
for a in main flip; do
  tgz=$OUT/$a/gpu_suite.tgz; [ -f "$tgz" ] || continue
  j=learn$a
  tmp=$(mktemp)
  if tar xzf "$tgz" -O ./$j/learning_log.txt > "$tmp" 2>/dev/null && [ -s "$tmp" ]; then
    mv "$tmp" $W/logs/call${CALL}_${j}_learning_log.txt
  else rm -f "$tmp"; fi
done
(cd $W && find . \( -name '*.json' -o -name 'steps.jsonl' -o -name '*.txt' -o -path './eval_*/episodes.jsonl' -o -name 'ARGS' -o -name '*.py' -o -name '*.sh' \) \
   -type f -not -path './problems.jsonl' -not -path './tree/*' -size -4M | sort > /tmp/bk_list)
tar czf $OUT/work_small.tgz -C $W -T /tmp/bk_list
if [ "$(stat -c %s $OUT/work_small.tgz)" -gt 15000000 ]; then
  (cd $W && find . \( -name '*.json' -o -name '*.txt' \) -type f -size -1M | sort > /tmp/bk_list); tar czf $OUT/work_small.tgz -C $W -T /tmp/bk_list
fi
du -sh $W
for f in $W/logs/call${CALL}_*; do echo "== $f"; grep -v 'median s per evaluation' "$f" | cut -c1-220 | tail -n 22; done
