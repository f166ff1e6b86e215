"""Where a fresh candidate process spends its time on the GPU before and in its first forward.

kernelgym runs every candidate in a fresh process. On the H200 under gVisor a 1-lane batch paid ~0.5 s in
correctness call #0 (`details.runs_ms`), and with 8 lanes per GPU on a busy 4-GPU host the learning demo's
correctness-only evaluations took ~10 s each. Three questions, one table each:

1. the steps of one fresh process, each timed on its own: torch/triton import (the fork server has them),
   CUDA initialisation (the warm spare does it), Triton's driver, a Triton kernel's first and second launch,
   cuBLAS's first matmul. Three passes on one Triton cache folder: the first compiles, the later ones find
   everything cached (a repeated candidate's build folder);
2. where a warm-cache first launch spends its ~0.5-0.7 s (measured on the H200: the Triton driver itself is ~20 ms
   warm): the launch under cProfile, the top functions by cumulative and by own time (imports, subprocesses such
   as `ptxas --version`, module loads, the launcher), to decide what the fork server or the warm spare can do
   ahead of the candidate;
3. N fresh processes released at once, once every one of them has imported torch (N = 1, 4, 8, 16), each
   timing its CUDA initialisation: if the driver (or the sandbox's GPU proxy) serialises context creation,
   the median grows with N, and one process per candidate is what bounds throughput with many lanes.

The children are files in a temporary folder (`@triton.jit` needs its source in a file); a child that fails
prints its stderr in the table's place, and every wait has a timeout.

    PYTHONPATH=. python benchmarks/gpu/first_call_probe.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the Triton kernel both child scripts launch (a file of its own per child: @triton.jit reads its source)
RELU = '''
@triton.jit
def relu(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    m = o < n  # the tail block's lanes past n
    tl.store(y + o, tl.maximum(tl.load(x + o, mask=m), 0), mask=m)
'''

STEPS = r'''
import json, time
T = {}
t = time.perf_counter()
import torch, triton, triton.language as tl
T["import"] = time.perf_counter() - t
t = time.perf_counter(); torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
T["cuda_init"] = time.perf_counter() - t
t = time.perf_counter(); d = triton.runtime.driver.active; d.get_current_device(); d.utils
T["triton_driver"] = time.perf_counter() - t

{RELU}

x = torch.randn(1 << 20, device="cuda"); y = torch.empty_like(x)
t = time.perf_counter(); relu[(x.numel() // 1024,)](x, y, x.numel(), B=1024); torch.cuda.synchronize()
T["triton_first_launch"] = time.perf_counter() - t
t = time.perf_counter(); relu[(x.numel() // 1024,)](x, y, x.numel(), B=1024); torch.cuda.synchronize()
T["triton_second_launch"] = time.perf_counter() - t
a = torch.randn(512, 512, device="cuda")
t = time.perf_counter(); a @ a; torch.cuda.synchronize()
T["cublas_first_mm"] = time.perf_counter() - t
t = time.perf_counter(); torch.nn.functional.softmax(a, -1); torch.cuda.synchronize()
T["first_softmax"] = time.perf_counter() - t
print(json.dumps(T))
'''

FIRST_LAUNCH_PROFILE = r'''
import cProfile, io, pstats
import torch, triton, triton.language as tl
torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
triton.runtime.driver.active.utils  # the driver, timed on its own in the table above

{RELU}

x = torch.randn(1 << 20, device="cuda"); y = torch.empty_like(x)
prof = cProfile.Profile()
prof.enable()
relu[(x.numel() // 1024,)](x, y, x.numel(), B=1024); torch.cuda.synchronize()
prof.disable()
for key in ("cumulative", "tottime"):
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(18)
    print(f"--- first launch, warm cache, by {key}")
    print("\n".join(line for line in buf.getvalue().splitlines() if line.strip())[-3000:])
'''

INIT = r'''
import json, sys, time
import torch
print("ready", flush=True)
sys.stdin.readline()  # released together with the others
t = time.perf_counter(); torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
print(json.dumps({"cuda_init": time.perf_counter() - t}), flush=True)
'''

TIMEOUT_S = 120.0


def steps_table(folder: Path) -> None:
    script = folder / "steps.py"
    script.write_text(STEPS.replace("{RELU}", RELU))
    env = dict(os.environ, TRITON_CACHE_DIR=str(folder / "triton-cache"))
    keys: list[str] = []
    for label in ("cold cache", "warm cache", "warm cache again"):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        total = time.perf_counter() - t
        if out.returncode != 0:
            print(f"{label}: the child failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        if not keys:
            keys = list(row)
            print(f"{'pass':18s} {'process s':>9s} " + " ".join(f"{k:>20s}" for k in keys))
        print(f"{label:18s} {total:9.3f} " + " ".join(f"{row[k] * 1000:18.1f}ms" for k in keys))


def first_launch_profile(folder: Path) -> None:
    """The warm-cache first launch under cProfile (the cache `steps_table` filled)."""
    script = folder / "first_launch_profile.py"
    script.write_text(FIRST_LAUNCH_PROFILE.replace("{RELU}", RELU))
    env = dict(os.environ, TRITON_CACHE_DIR=str(folder / "triton-cache"))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    print(out.stdout if out.returncode == 0 else f"the profiled child failed (exit {out.returncode}):\n{out.stderr[-2000:]}")


def concurrent_init(script: Path, n: int) -> tuple[list[float], str]:
    """CUDA initialisation seconds of `n` fresh processes released at the same moment, and any failure."""
    procs = [subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    try:
        for p in procs:  # every child has imported torch before any is released
            if p.stdout.readline().strip() != "ready":
                return [], f"a child did not start: {p.stderr.read()[-1000:]}"
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        secs = []
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT_S)
            lines = out.strip().splitlines()
            if p.returncode != 0 or not lines:
                return secs, f"a child failed (exit {p.returncode}): {err[-1000:]}"
            secs.append(json.loads(lines[-1])["cuda_init"])
        return sorted(secs), ""
    except (subprocess.TimeoutExpired, BrokenPipeError, ValueError) as exc:
        return [], f"{type(exc).__name__}: {exc}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="first-call-probe-"))
    steps_table(folder)
    print()
    first_launch_profile(folder)
    script = folder / "init.py"
    script.write_text(INIT)
    print(f"\n{'processes at once':>17s} {'CUDA init median ms':>20s} {'max ms':>8s}")
    for n in (1, 4, 8, 16):
        secs, failure = concurrent_init(script, n)
        if failure:
            print(f"{n:17d} failed: {failure}")
            continue
        print(f"{n:17d} {1000 * secs[len(secs) // 2]:20.1f} {1000 * secs[-1]:8.1f}")


if __name__ == "__main__":
    main()
