"""Single-pass Triton versions of the reference worker's output comparison and input distributions (the fast
paths of `compare.py` and `inputs.py` on a GPU).

Why: `compare._moments` and `compare._elementwise` run ~40 eager float64 kernels per 2**24-element chunk,
about 300 bytes of memory traffic per compared element; on a 1.6 G-element output (KernelBench L1 ReLU) one
comparison took 0.3 s on an H200 (`details.round_trips` "ref:check", 6 per evaluation), the largest share of
the correctness phase. Here each statistic is computed in one read of the tensors (4-8 bytes per element and
tensor): one kernel for the reference's moments, one for the elementwise test, each writing a partial per
block that torch reduces (deterministic, no float64 atomics).

Semantics are exactly compare.py's (float64 arithmetic inside the kernels, the same NaN/inf rules); the
tests run both on adversarial tensors (NaN, +-inf, -0, subnormals, huge values, half dtypes) through the
Triton interpreter on the CPU and require equal results. Used for float16/bfloat16/float32/float64 tensors on
a CUDA device (`usable`); everything else keeps the torch path.

The distribution maps (`heavy_tail_`, `reshaped_`, `spikes_`) replace ~10 eager kernels per 2**24-element
chunk with one read and one write; they compute in float32 like the torch maps do for float32 inputs (half
inputs: torch computes in half, here in float32 and rounded once, as close or closer), and `spikes_` moves
exactly the positions the torch map moves (same hash). Used for contiguous float16/bfloat16/float32 tensors on
a CUDA device (`maps`).

Shapes: N elements (flattened), NB = cdiv(N, BLOCK) blocks.

    m = moments(ref)                         # dict as compare._moments
    e = elementwise(out, ref, atol, rtol)    # dict as compare._elementwise
"""

from __future__ import annotations

import math
from typing import Any

import torch

BLOCK = 4096
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_KERNELS: dict[str, Any] = {}


def usable(out: torch.Tensor, ref: torch.Tensor) -> bool:
    """The fused path applies: same float dtype, same CUDA device."""
    return ref.is_cuda and out.device == ref.device and ref.dtype in FLOATS and out.dtype == ref.dtype


def _kernels() -> dict[str, Any]:
    """The Triton kernels, compiled on first use (importing this module imports no Triton), and the compile
    options of the comparison's: no fused multiply-add, so `atol + rtol * |r|` rounds as torch rounds it and the
    two paths agree at the tolerance's exact edge too (a CUDA backend option; the interpreter has no such rounding)."""
    if not _KERNELS:
        import os

        import triton
        import triton.language as tl

        _KERNELS.update(_compare_kernels(triton, tl), **_map_kernels(triton, tl))
        _KERNELS["exact"] = {} if os.environ.get("TRITON_INTERPRET") == "1" else {"enable_fp_fusion": False}
    return _KERNELS


def _compare_kernels(triton: Any, tl: Any) -> dict[str, Any]:
    """The moments of the reference and the elementwise test, float64 inside."""

    @triton.jit
    def moments_kernel(r_ptr, n, s_ptr, ss_ptr, lo_ptr, hi_ptr, amax_ptr, cnt_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        # inb: the last block runs past n; out-of-range lanes are neither finite nor counted
        inb = offs < n
        r = tl.load(r_ptr + offs, mask=inb, other=0.0).to(tl.float64)
        # finite: r - r is 0 only for finite r (inf - inf and NaN - NaN are NaN)
        finite = inb & ((r - r) == 0.0)
        rf = tl.where(finite, r, 0.0)
        tl.store(s_ptr + pid, tl.sum(rf, axis=0))
        tl.store(ss_ptr + pid, tl.sum(rf * rf, axis=0))
        tl.store(lo_ptr + pid, tl.min(tl.where(finite, r, float("inf")), axis=0))
        tl.store(hi_ptr + pid, tl.max(tl.where(finite, r, float("-inf")), axis=0))
        tl.store(amax_ptr + pid, tl.max(tl.abs(rf), axis=0))
        tl.store(cnt_ptr + pid, tl.sum(finite.to(tl.int64), axis=0))

    @triton.jit
    def elementwise_kernel(o_ptr, r_ptr, n, tol_ptr, bad_ptr, first_ptr, mabs_ptr, mrel_ptr, sq_ptr, nonfin_ptr,
                           BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        atol = tl.load(tol_ptr)  # float64 scalars from memory (a Python float argument would be float32)
        rtol = tl.load(tol_ptr + 1)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        # inb: the last block runs past n; out-of-range lanes compare 0 with 0 (same, never bad)
        inb = offs < n
        o = tl.load(o_ptr + offs, mask=inb, other=0.0).to(tl.float64)
        r = tl.load(r_ptr + offs, mask=inb, other=0.0).to(tl.float64)
        d = tl.abs(o - r)
        # same: equal values (equal infs included) or NaN against NaN
        same = (o == r) | ((o != o) & (r != r))
        ok = same | (d <= atol + rtol * tl.abs(r))  # NaN in d compares False: bad
        bad = inb & (ok == 0)
        dd = tl.where(same, 0.0, d)
        # finite: keep the reported statistics finite; a non-finite difference is counted instead
        finite = (dd - dd) == 0.0
        dfin = tl.where(finite, dd, 0.0)
        tl.store(bad_ptr + pid, tl.sum(bad.to(tl.int64), axis=0))
        tl.store(first_ptr + pid, tl.min(tl.where(bad, offs, n), axis=0))
        tl.store(mabs_ptr + pid, tl.max(dfin, axis=0))
        # r != r: a NaN reference (matched by a NaN) has no relative error
        tl.store(mrel_ptr + pid, tl.max(tl.where(r != r, 0.0, dfin / (tl.abs(r) + 1e-30)), axis=0))
        tl.store(sq_ptr + pid, tl.sum(dfin * dfin, axis=0))
        tl.store(nonfin_ptr + pid, tl.sum((inb & (finite == 0)).to(tl.int64), axis=0))

    return {"moments": moments_kernel, "elementwise": elementwise_kernel}


def _map_kernels(triton: Any, tl: Any) -> dict[str, Any]:
    """The input distributions' maps, in place, float32 inside."""

    @triton.jit
    def heavy_tail_kernel(x_ptr, n, m, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inb = offs < n  # inb: the last block runs past n
        x = tl.load(x_ptr + offs, mask=inb, other=0.0)
        xf = x.to(tl.float32)
        t = tl.minimum(tl.abs(xf) / m, 1.0)
        grown = tl.exp2(tl.log2(1.0 - 0.999 * t) * (-2.0 / 3.0)) - 1.0
        sign = tl.where(xf > 0, 1.0, tl.where(xf < 0, -1.0, 0.0))
        tl.store(x_ptr + offs, (sign * m * grown).to(x.dtype), mask=inb)

    @triton.jit
    def reshaped_kernel(x_ptr, n, top, k, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inb = offs < n  # inb: the last block runs past n
        x = tl.load(x_ptr + offs, mask=inb, other=0.0)
        xf = x.to(tl.float32)
        sign = tl.where(xf > 0, 1.0, tl.where(xf < 0, -1.0, 0.0))
        tl.store(x_ptr + offs, (sign * top * tl.exp2(tl.log2(tl.abs(xf) / top) * k)).to(x.dtype), mask=inb)

    @triton.jit
    def spikes_kernel(x_ptr, n, salt, rate, skip, cols, shift, BY_VALUE: tl.constexpr, INT: tl.constexpr,
                      BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inb = offs < n  # inb: the last block runs past n
        x = tl.load(x_ptr + offs, mask=inb, other=0.0)
        if BY_VALUE:
            key = x.to(INT, bitcast=True).to(tl.int64)
        else:
            key = offs
        mixed = ((key ^ salt) * 0x9E3779B1) >> 16
        picked = inb & ((mixed & 0x7FFFFFFF) % rate == 0)
        if not BY_VALUE:  # not in the flat first eighth, nor in the first eighth of any row
            picked = picked & (key >= skip) & (key % cols >= cols // 8)
        xf = x.to(tl.float32)
        sign = tl.where(xf > 0, 1.0, tl.where(xf < 0, -1.0, 0.0))
        tl.store(x_ptr + offs, (xf + tl.where(picked, sign * shift, 0.0)).to(x.dtype), mask=inb)

    return {"heavy_tail": heavy_tail_kernel, "reshaped": reshaped_kernel, "spikes": spikes_kernel}


MAPPED = (torch.float16, torch.bfloat16, torch.float32)
_INT_OF = {2: "int16", 4: "int32"}


def maps(x: torch.Tensor) -> bool:
    """The fused distribution maps apply: a contiguous half or float32 tensor on a CUDA device."""
    return x.is_cuda and x.dtype in MAPPED and x.is_contiguous()


def heavy_tail_(x: torch.Tensor, m: float) -> torch.Tensor:
    """inputs.heavy_tail's map in one pass, in place (float32 arithmetic)."""
    n = x.numel()
    _kernels()["heavy_tail"][(max(1, math.ceil(n / BLOCK)),)](x, n, float(m), BLOCK=BLOCK)
    return x


def reshaped_(x: torch.Tensor, top: float, k: float) -> torch.Tensor:
    """inputs.reshaped's map in one pass, in place (float32 arithmetic)."""
    n = x.numel()
    _kernels()["reshaped"][(max(1, math.ceil(n / BLOCK)),)](x, n, float(top), float(k), BLOCK=BLOCK)
    return x


def spikes_(x: torch.Tensor, salt: int, rate: int, skip: int, cols: int, shift: float, by_value: bool) -> torch.Tensor:
    """inputs.spikes' map in one pass, in place: the same hash, so the same positions move."""
    import triton.language as tl

    n = x.numel()
    _kernels()["spikes"][(max(1, math.ceil(n / BLOCK)),)](x, n, int(salt), int(rate), int(skip), int(cols), float(shift),
                                                          BY_VALUE=bool(by_value), INT=getattr(tl, _INT_OF[x.element_size()]),
                                                          BLOCK=BLOCK)
    return x


def _launch(name: str, blocks: int, *args: Any) -> None:
    """Run a comparison kernel with its compile options."""
    kernels = _kernels()
    kernels[name][(blocks,)](*args, BLOCK=BLOCK, **kernels["exact"])


def _partials(n_blocks: int, device: torch.device, kinds: str) -> list[torch.Tensor]:
    """One [NB] buffer per statistic: 'f' float64, 'i' int64."""
    return [torch.empty(n_blocks, dtype=torch.float64 if k == "f" else torch.int64, device=device) for k in kinds]


def moments(ref: torch.Tensor) -> dict[str, float]:
    """compare._moments in two kernels: sum, sum of squares, min, max, max |x| and count of finite elements."""
    flat = ref.reshape(-1).contiguous()
    n = flat.numel()
    nb = max(1, math.ceil(n / BLOCK))
    s, ss, lo, hi, amax, cnt = _partials(nb, flat.device, "fffffi")
    _launch("moments", nb, flat, n, s, ss, lo, hi, amax, cnt)
    vals = torch.stack([s.sum(), ss.sum(), lo.min(), hi.max(), amax.max(), cnt.sum().double()]).tolist()
    return {"s": vals[0], "ss": vals[1], "lo": vals[2], "hi": vals[3], "absmax": vals[4], "n": int(vals[5])}


def elementwise(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> dict[str, Any]:
    """compare._elementwise in one kernel: bad count, first bad flat index, max abs / rel error, squared error."""
    o, r = out.reshape(-1).contiguous(), ref.reshape(-1).contiguous()
    n = r.numel()
    nb = max(1, math.ceil(n / BLOCK))
    bad, first, mabs, mrel, sq, nonfin = _partials(nb, r.device, "iifffi")
    tol = torch.tensor([float(atol), float(rtol)], dtype=torch.float64, device=r.device)
    _launch("elementwise", nb, o, r, n, tol, bad, first, mabs, mrel, sq, nonfin)
    count, first_i, nonfinite = torch.stack([bad.sum(), first.min(), nonfin.sum()]).tolist()
    max_abs, max_rel, diff_sq = torch.stack([mabs.max(), mrel.max(), sq.sum()]).tolist()
    return {"bad": int(count), "first": int(first_i) if count else None, "max_abs": max_abs, "max_rel": max_rel,
            "diff_sq": math.inf if nonfinite else diff_sq}


__all__ = ["usable", "moments", "elementwise", "maps", "heavy_tail_", "reshaped_", "spikes_", "BLOCK"]
