"""Speed of light: analytic FLOP and byte counts, the device's measured ceilings, %SOL and the roofline check.

- `count_work(model, inputs, outputs)` (trusted reference worker): FLOPs from
  `torch.utils.flop_counter.FlopCounterMode` over one reference forward (matmul, conv, attention, ...;
  elementwise ops count 0), bytes = inputs + outputs + parameters and buffers, each read or written once:
  a lower bound on the traffic any correct implementation must move.
- `measure_ceilings(device)`: achieved copy bandwidth (read + write bytes / time of a large `copy_`) and
  matmul FLOP rate per dtype (fp32 without TF32, tf32, fp16, bf16) on this device; measured once per
  device and torch version and cached on disk by the supervisor.
- `sol_ms` = max(flops / peak FLOP rate of the problem's dtype, bytes / copy bandwidth);
  `sol_percent` = 100 * sol_ms / candidate median.
- `roofline_violation`: a candidate whose implied bandwidth (bytes / time) or FLOP rate exceeds the best
  measured ceiling by `margin` did not do the work it claims (or its timing is forged).
"""

from __future__ import annotations

import time
from typing import Any, Sequence


def _nbytes(values: Sequence[Any]) -> int:
    import torch

    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def count_work(model: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> dict[str, Any]:
    """FLOPs of one forward, minimal bytes moved and the dominant floating dtype of the inputs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    flops = 0
    try:
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            model(*inputs)
        flops = int(counter.get_total_flops())
    except Exception:
        flops = 0
    params = list(model.parameters()) + list(model.buffers())
    floats = [v.dtype for v in inputs if isinstance(v, torch.Tensor) and v.dtype.is_floating_point]
    dtype = str(max(set(floats), key=floats.count)).removeprefix("torch.") if floats else "float32"
    return {"flops": flops, "bytes": _nbytes(inputs) + _nbytes(outputs) + _nbytes(params), "dtype": dtype}


def _time_op(fn, reps: int, cuda: bool) -> float:
    import torch

    fn()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def _copy_gbps(device: str, cuda: bool) -> float:
    import torch

    n = (1 << 30) if cuda else (64 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    return 2 * n / _time_op(lambda: dst.copy_(src), 10 if cuda else 3, cuda) / 1e9


def measure_ceilings(device: str) -> dict[str, float]:
    """Copy GB/s (read + write) and matmul TFLOP/s per dtype, measured on `device` (a few seconds on a GPU)."""
    import torch

    cuda = device.startswith("cuda")
    out = {"copy_gbps": _copy_gbps(device, cuda)}
    n = 8192 if cuda else 512
    tf32_state = torch.backends.cuda.matmul.allow_tf32
    dtypes = {"float32": torch.float32, "tf32": torch.float32}
    if cuda:
        dtypes.update({"float16": torch.float16, "bfloat16": torch.bfloat16})
    try:
        for name, dt in dtypes.items():
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            a = torch.rand(n, n, device=device, dtype=dt)
            b = torch.rand(n, n, device=device, dtype=dt)
            out[f"{name}_tflops"] = 2 * n ** 3 / _time_op(lambda: a @ b, 5 if cuda else 2, cuda) / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_state
    return out


def sol_ms(flops: int, nbytes: int, dtype: str, ceilings: dict[str, float]) -> float | None:
    bw = ceilings.get("copy_gbps")
    peak = ceilings.get(f"{dtype}_tflops") or ceilings.get("float32_tflops")
    if not bw or not peak:
        return None
    return max(flops / (peak * 1e12), nbytes / (bw * 1e9)) * 1e3


def sol_percent(t_ms: float, flops: int, nbytes: int, dtype: str, ceilings: dict[str, float]) -> float | None:
    s = sol_ms(flops, nbytes, dtype, ceilings)
    return 100.0 * s / t_ms if s is not None and t_ms > 0 else None


def roofline_violation(t_ms: float, flops: int, nbytes: int, ceilings: dict[str, float], margin: float) -> str | None:
    """Why the time is physically implausible on this device, or None."""
    if t_ms <= 0:
        return "non-positive time"
    bw = ceilings.get("copy_gbps", 0.0)
    implied_bw = nbytes / (t_ms * 1e-3) / 1e9
    if bw and implied_bw > margin * bw:
        return f"implied bandwidth {implied_bw:.0f} GB/s > {margin:g} x measured {bw:.0f} GB/s"
    best = max((v for k, v in ceilings.items() if k.endswith("_tflops")), default=0.0)
    implied = flops / (t_ms * 1e-3) / 1e12
    if best and implied > margin * best:
        return f"implied {implied:.1f} TFLOP/s > {margin:g} x best measured {best:.1f} TFLOP/s"
    return None
