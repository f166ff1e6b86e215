"""Is one GPU's timing disturbed while the host's other GPUs evaluate? (issue 17, item 1; multi-GPU host)

For every GPU g: the other GPUs run a continuous kernelgym load (`kernelgym_cluster_bench.py` on a local
Dask cluster with one worker per other GPU, restricted to them by CUDA_VISIBLE_DEVICES) while the
self-speedup benchmark (`kernelgym_bench.py`, candidate = the reference, true speedup exactly 1) runs on g
alone. GPU 0 is also measured with the host quiet first, as the reference row. Prints one row per run:
|ln self-speedup| median, problems within 0.97-1.03, median wall per evaluation, and the load's
evaluations/min over the same span. A disturbed GPU shows as a wider |ln| or more problems out of band
than the quiet row.

    PYTHONPATH=. OUT=/tmp/out python benchmarks/gpu/self_speedup_under_load.py            # every visible GPU
    ... --gpus 0,1 --problems 1 23 40 47 100 --rounds 2
    PYTHONPATH=. OUT=/tmp/out python benchmarks/gpu/self_speedup_under_load.py --smoke-cpu  # mechanics only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ["1", "23", "40", "47", "100"]


def visible_gpus() -> list[int]:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [i for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def start_load(gpus: list[int], out: Path, smoke: bool) -> subprocess.Popen | None:
    """The other GPUs' evaluation load, in its own session (stopped as a group)."""
    if not gpus and not smoke:
        return None
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if smoke:
        cmd = [sys.executable, "benchmarks/kernelgym_cluster_bench.py", "--device", "cpu", "--modes", "local",
               "--reps", "50", "--problems", "relu"]
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        cmd = [sys.executable, "benchmarks/kernelgym_cluster_bench.py", "--device", "cuda", "--modes",
               f"local-dask:{len(gpus)}", "--reps", "400"]
    log = open(out / f"load_{'_'.join(map(str, gpus)) or 'cpu'}.log", "w")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def bench_on(gpu: int | None, tag: str, args: argparse.Namespace, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(out)}
    cmd = [sys.executable, "benchmarks/kernelgym_bench.py", "--tag", tag, "--rounds", str(args.rounds),
           "--problems", *args.problems]
    if gpu is None:
        cmd += ["--device", "cpu", "--small"]
    else:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    with open(out / f"bench_{tag}.log", "w") as log:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    path = out / f"kernelgym_bench_{tag}.json"
    return json.loads(path.read_text()) if rc == 0 and path.exists() else {"records": [], "rc": rc}


def summary(res: dict) -> tuple[str, str, str]:
    recs = res.get("records") or []
    last = {r["problem"]: r for r in recs}
    lns = [abs(math.log(r["speedup"])) for r in last.values() if r.get("speedup")]
    within = sum(1 for r in last.values() if r.get("speedup") and 0.97 <= r["speedup"] <= 1.03)
    walls = [r["wall_s"] for r in recs]
    return (f"{statistics.median(lns):.4f}" if lns else "-", f"{within}/{len(last)}",
            f"{statistics.median(walls):.2f}" if walls else "-")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="", help="comma-separated GPU indices (default: every visible GPU)")
    ap.add_argument("--problems", nargs="*", default=PROBLEMS, help="kernelgym_bench.py level-1 problem numbers")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--smoke-cpu", action="store_true", help="one CPU row under a CPU load: checks the mechanics")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "/tmp/self_speedup_under_load"))
    out.mkdir(parents=True, exist_ok=True)
    gpus = [int(g) for g in args.gpus.split(",") if g] if args.gpus else visible_gpus()
    if not gpus and not args.smoke_cpu:
        print("no GPU visible: run on a multi-GPU machine, or pass --smoke-cpu")
        return 2
    runs: list[tuple[str, int | None, list[int]]] = (
        [("cpu-quiet", None, []), ("cpu-loaded", None, [])] if args.smoke_cpu
        else [(f"gpu{gpus[0]}-quiet", gpus[0], [])] + [(f"gpu{g}-loaded", g, [o for o in gpus if o != g]) for g in gpus])
    rows = []
    for tag, gpu, others in runs:
        load = start_load(others, out, args.smoke_cpu) if tag.endswith("loaded") else None
        t0 = time.monotonic()
        try:
            res = bench_on(gpu, tag, args, out)
        finally:
            stop(load)
        rows.append([tag, ",".join(map(str, others)) or "-", *summary(res), f"{time.monotonic() - t0:.0f}"])
        print(f"{tag}: {rows[-1]}", flush=True)
    head = ["run", "others evaluating", "|ln self-speedup| median", "within 0.97-1.03", "median wall s", "span s"]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    text = "\n".join(" | ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in [head, *rows])
    print("\n" + text)
    (out / "self_speedup_under_load.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
