# Generate problems.jsonl for the GPU run with exactly its arguments (load_problems reads only synthetic/seed/ops/lengths).
import shlex, sys
from pathlib import Path
sys.path.insert(0, ".")
sys.path.insert(0, "benchmarks/gpu")
import learning_demo as ld
argv = shlex.split(open(".learning_h100b/ARGS").read())
args = ld.parse_args(argv)
ps = ld.load_problems(args, Path(".learning_h100b"), Path(".learning_h100b/scratch_out"))
print(len(ps))
