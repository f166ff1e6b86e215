"""Checks on a GPU how torch.profiler links device work to the harness's ranges (worker._profiled_kernels):
a Triton kernel outside any range, an aten fill and `torch.cuda._sleep` inside HARNESS_RANGE. Prints every
device event and the table the coverage check reads (the harness's work must be absent from it).

    PYTHONPATH=. python benchmarks/gpu/profiled_kernels_check.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from davinci.kernelgym.worker import HARNESS_RANGE, _profiled_kernels  # noqa: E402


@triton.jit
def twice_kernel(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    m = o < n
    tl.store(y + o, tl.load(x + o, mask=m) * 2, mask=m)


def main() -> None:
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    twice_kernel[(x.numel() // 1024,)](x, y, x.numel(), B=1024)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            with record_function(HARNESS_RANGE):
                flush.fill_(1)
                torch.cuda._sleep(100_000)
                z = x.cpu()
            twice_kernel[(x.numel() // 1024,)](x, y, x.numel(), B=1024)
            w = x + 1
        torch.cuda.synchronize()
    del z, w
    for e in prof.events():
        if str(e.device_type).endswith("CUDA"):
            print(f"device  {e.name[:60]:<60} {e.device_time_total:9.1f} us  annotation={e.is_user_annotation}")
    table = _profiled_kernels(prof.events())
    print("table:", table)
    names = [n for n, _ in table]
    ok = any("twice_kernel" in n for n in names) and not any("Memcpy" in n or n == HARNESS_RANGE for n in names)
    print("harness work left out:", ok)


if __name__ == "__main__":
    main()
