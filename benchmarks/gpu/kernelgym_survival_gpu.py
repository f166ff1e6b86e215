"""200 candidates in a row on the GPU: honest Triton kernels mixed with illegal memory accesses (Triton and
CUDA), GPU and Python hangs, segfaults, exits at import and in forward, and exceptions. Every verdict must be
right, honest candidates after a crashed one must pass, and no process may be left behind (checked with
psutil by each lane's process marker, and with nvidia-smi for GPU processes).

    PYTHONPATH=. python benchmarks/gpu/kernelgym_survival_gpu.py            # GPU, ~5-8 min (four lanes on one GPU)
    PYTHONPATH=. python benchmarks/gpu/kernelgym_survival_gpu.py --device cpu --n 40   # CPU smoke run (~1 min)
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import shutil
import subprocess
import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu.kernelgym_common import Clock, config, log, out_dir, table, write_json  # noqa: E402
from benchmarks.gpu.kernelgym_hacks_gpu import CUDA_HEAD, FORWARD_CUDA, IMA_CUDA, PROBLEM, TRITON_HEAD  # noqa: E402
from davinci.kernelgym import Evaluator  # noqa: E402
from davinci.types import Candidate, Problem  # noqa: E402


def fwd(body: str, head: str = TRITON_HEAD, extra: str = "") -> str:
    return head + extra + "\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" + body


SPIN = """

@triton.jit
def spin_kernel(x_ptr, n):
    acc = 0.0
    for i in range(0, n):
        acc += tl.load(x_ptr)
    tl.store(x_ptr, acc)
"""
# name -> (source, expected error kinds (None = correct), share of the 200, runs on the CPU)
MIX = {
    "honest": (fwd("        return relu(x)\n"), None, 0.45, True),
    "ima_triton": (fwd("        out = torch.empty_like(x)\n        relu_kernel[(1 << 20,)](x, out, 1 << 40, BLOCK=4096)\n"
                       "        return out\n"), {"runtime", "crash"}, 0.10, False),
    "ima_cuda": (CUDA_HEAD.format(name="kg_survive_ima", body=IMA_CUDA) + FORWARD_CUDA, {"runtime", "crash"}, 0.05, False),
    "hang_gpu": (fwd("        y = x.clone()\n        spin_kernel[(1,)](y, 1 << 40)\n        return y\n", extra=SPIN),
                 {"timeout"}, 0.05, False),
    "hang_python": (fwd("        while True:\n            pass\n"), {"timeout"}, 0.05, True),
    "segfault": ("import ctypes\n" + fwd("        ctypes.string_at(0)\n        return x\n"), {"crash"}, 0.08, True),
    "exit_forward": ("import os\n" + fwd("        os._exit(3)\n"), {"crash"}, 0.08, True),
    "exit_import": ("import sys\nsys.exit(0)\n" + fwd("        return x\n"), {"compile", "crash"}, 0.07, True),
    "raise": (fwd("        raise ValueError('bad launch')\n"), {"runtime"}, 0.07, True),
}


def build_items(device: str, n: int) -> tuple[Problem, list[tuple[str, Candidate]]]:
    big = device == "cuda"
    problem = Problem(id="survival/relu", source="synthetic", level=1, name="relu",
                      code=PROBLEM.format(rows=1024 if big else 16, cols=4096 if big else 1024))
    kinds = [k for k, v in MIX.items() if device == "cuda" or v[3]]
    total = sum(MIX[k][2] for k in kinds)
    names: list[str] = []
    for k in kinds:
        names += [k] * max(1, round(n * MIX[k][2] / total))
    names = (names + ["honest"] * n)[:n]
    random.Random(0).shuffle(names)
    items = [(k, Candidate(problem.id, MIX[k][0], "cuda" if "load_inline" in MIX[k][0] else "triton")) for k in names]
    return problem, items


def lane_processes(markers: set[str]) -> list[int]:
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("KERNELGYM_LANE") in markers and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except psutil.Error:
            continue
    return out


def gpu_processes() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=30)
    return [line for line in q.stdout.splitlines() if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--lanes", type=int, default=4,
                    help="lanes (on one GPU they share it: fine for survival, which times nothing)")
    args = ap.parse_args()
    problem, items = build_items(args.device, args.n)
    # 8 s: a hung kernel in one lane time-slices the GPU with the other lane's honest candidates.
    cfg = config(args.device, checks="default", workers=args.lanes, measure_performance=False,
                 run_timeout_s=8.0 if args.device == "cuda" else 3.0,
                 compile_timeout_s=240.0, profile_coverage=False)
    clock = Clock()
    gpu_before = gpu_processes()
    ev = Evaluator(cfg)
    try:
        results = ev.evaluate_batch([(problem, c) for _, c in items], progress=True, seed=0)
        markers = {lane.marker for lane in ev.lanes}
        live = set()
        for lane in ev.lanes:
            live |= {lane.ref.popen.pid, lane.zygote.popen.pid} | lane.live_children
        stray = [pid for pid in lane_processes(markers) if pid not in live]
    finally:
        ev.close()
    after_close = lane_processes(markers)
    gpu_after = gpu_processes()
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    wrong = []
    for (kind, _), r in zip(items, results):
        expected = MIX[kind][1]
        ok = r.correct if expected is None else (not r.correct and r.error_kind in expected)
        counts[kind]["ok" if ok else "WRONG"] += 1
        if not ok:
            wrong.append({"kind": kind, "error_kind": r.error_kind, "error": r.error[:300]})
    walls: dict[str, list[float]] = collections.defaultdict(list)
    for (kind, _), r in zip(items, results):
        walls[kind].append(r.wall_s)
    rows = [[k, counts[k]["ok"] + counts[k]["WRONG"], counts[k]["ok"], counts[k]["WRONG"],
             "correct" if MIX[k][1] is None else "/".join(sorted(MIX[k][1])),
             statistics.median(walls[k]), max(walls[k])] for k in counts]
    text = table(rows, ["candidate kind", "n", "verdict right", "verdict wrong", "expected", "median wall s",
                        "max wall s"])
    text += (f"\n\n{len(results)} candidates in {clock():.0f} s; wrong verdicts: {len(wrong)}; stray processes while "
             f"running: {len(stray)}; processes after close: {len(after_close)}; GPU processes before/after: "
             f"{len(gpu_before)}/{len(gpu_after)}")
    slowest = sorted(((r.wall_s, i, kind) for i, ((kind, _), r) in enumerate(zip(items, results))), reverse=True)[:8]
    text += "\nslowest (wall s, index, kind): " + ", ".join(f"{w:.1f} #{i} {k}" for w, i, k in slowest)
    print("\n" + text)
    write_json("kernelgym_survival_gpu.json", {"wrong": wrong, "slowest": slowest, "stray": stray,
                                               "after_close": after_close, "gpu_after": gpu_after, "rows": rows})
    (out_dir() / "kernelgym_survival_gpu.txt").write_text(text + "\n")
    log("done")
    return 0 if not wrong and not stray and not after_close else 1


if __name__ == "__main__":
    sys.exit(main())
