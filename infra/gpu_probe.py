"""Probe a GPU box: device, measured ceilings (copy GB/s, matmul TFLOP/s), first-compile times.

    python infra/gpu_probe.py

Needs only torch (and triton for the Triton line). Prints a short table; nothing is written.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path


def _time_script(source: str, env_extra: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.py"
        path.write_text(textwrap.dedent(source))
        start = time.perf_counter()
        subprocess.run(f"{env_extra.format(tmp=tmp)} {sys.executable} {path}", shell=True, check=True, capture_output=True)
        return time.perf_counter() - start


TRITON = """
import torch, triton, triton.language as tl
@triton.jit
def k(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B); m = o < n
    tl.store(y + o, tl.load(x + o, mask=m) * 2, mask=m)
x = torch.randn(1 << 20, device="cuda"); y = torch.empty_like(x)
k[(1024,)](x, y, x.numel(), B=1024); torch.cuda.synchronize()
"""


def ceilings() -> tuple[float, float, float]:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    x = torch.empty(1 << 29, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    start.record()
    for _ in range(10):
        y.copy_(x)
    end.record()
    torch.cuda.synchronize()
    gbps = 2 * x.numel() * 4 / (start.elapsed_time(end) / 10) / 1e6
    del x, y
    rates = []
    for dtype in (torch.bfloat16, torch.float32):
        a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
        b = torch.randn_like(a)
        for _ in range(3):
            a @ b
        start.record()
        for _ in range(10):
            a @ b
        end.record()
        torch.cuda.synchronize()
        rates.append(2 * 8192**3 / (start.elapsed_time(end) / 10) / 1e9)
    return gbps, rates[0], rates[1]


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device visible")
        return 1
    props = torch.cuda.get_device_properties(0)
    gbps, bf16, fp32 = ceilings()
    triton_s = _time_script(TRITON, "TRITON_CACHE_DIR={tmp}/tc")
    print(f"{'device':28s} {props.name} ({props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB)")
    print(f"{'torch / cuda':28s} {torch.__version__} / {torch.version.cuda}")
    print(f"{'copy bandwidth (r+w)':28s} {gbps:,.0f} GB/s")
    print(f"{'matmul bf16 / fp32':28s} {bf16:,.0f} / {fp32:,.0f} TFLOP/s")
    print(f"{'first Triton kernel process':28s} {triton_s:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
