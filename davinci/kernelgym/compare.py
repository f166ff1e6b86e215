"""Output comparison with tolerances that trivial outputs cannot pass. Runs in the trusted reference worker.

Per output tensor (shapes: `out`, `ref` [*S], any S; compared in chunks of 2**24 elements so a 6 GB output
needs no second full-size buffer):
1. shape and dtype must match exactly;
2. elementwise, KernelBench's rule with the absolute part scaled by the output's magnitude:
   |out - ref| <= tol * max(1, rms(ref)) + tol * |ref|     (tol: 1e-4 fp32, 1e-2 fp16/bf16; ints exact);
   NaN matches only NaN and +-inf only the same inf (NaN is never a wildcard);
3. guards for outputs a trivial answer would pass:
   - near zero: every |ref| <= atol (so zeros pass step 2): also ||out - ref|| <= rho * ||ref||;
   - near constant: a constant m = mean(ref) would pass step 2 and the spread of ref is numerically
     resolvable (||ref - m|| >= 1e4 * eps * ||m||): also ||out - ref|| <= rho * ||ref - m||;
   rho = `near_zero_rel_norm` (0.01: zeros and constants score 1.0; honest kernels ~1e-6).
The result carries where and by how much the outputs differ, for the feedback text.
On a GPU, floating tensors go through `fused` (the same statistics, one Triton pass each instead of ~40 eager
float64 kernels per chunk).

    c = compare(out, ref, tol=1e-4, rel_norm=0.01); c.ok, c.reason, c.first_bad_index
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from davinci.kernelgym import fused

CHUNK = 1 << 24
HALF_DTYPES = {torch.float16, torch.bfloat16}


@dataclass(frozen=True)
class Comparison:
    ok: bool
    reason: str = ""
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatch_fraction: float = 0.0
    first_bad_index: tuple[int, ...] | None = None
    first_bad_values: tuple[float, float] | None = None   # (candidate, reference) at first_bad_index
    rel_error_norm: float = 0.0
    guard: str = ""                                        # "near_zero" / "near_constant" when a guard applied
    output_index: int = 0                                  # which output of a tuple/list

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tolerance_for(dtype: torch.dtype, tol_fp32: float, tol_half: float) -> float:
    if dtype in HALF_DTYPES or "float8" in str(dtype):
        return tol_half
    if dtype.is_floating_point or dtype.is_complex:
        return tol_fp32
    return 0.0


def _chunks(t: torch.Tensor):
    flat = t.reshape(-1)
    for start in range(0, flat.numel(), CHUNK):
        yield start, flat[start:start + CHUNK]


def _moments(ref: torch.Tensor) -> dict[str, float]:
    """Sum, sum of squares, min, max, max |x| and count over the finite elements of ref (float64).

    Accumulated on the tensor's device with one synchronisation at the end (a 6 GB output costs ~ms).
    """
    dev = ref.device
    acc = {"s": torch.zeros((), dtype=torch.float64, device=dev), "ss": torch.zeros((), dtype=torch.float64, device=dev),
           "lo": torch.full((), math.inf, dtype=torch.float64, device=dev),
           "hi": torch.full((), -math.inf, dtype=torch.float64, device=dev),
           "absmax": torch.zeros((), dtype=torch.float64, device=dev), "n": torch.zeros((), dtype=torch.int64, device=dev)}
    for _, r in _chunks(ref):
        r = r.double()
        finite = torch.isfinite(r)  # mask: NaN/inf would poison the magnitude that scales the tolerance
        rf = torch.where(finite, r, torch.zeros_like(r))
        acc["s"] += rf.sum()
        acc["ss"] += (rf * rf).sum()
        acc["lo"] = torch.minimum(acc["lo"], torch.where(finite, r, torch.full_like(r, math.inf)).min())
        acc["hi"] = torch.maximum(acc["hi"], torch.where(finite, r, torch.full_like(r, -math.inf)).max())
        acc["absmax"] = torch.maximum(acc["absmax"], rf.abs().max())
        acc["n"] += finite.sum()
    return {k: float(v) if k != "n" else int(v) for k, v in acc.items()}


def _bad_mask(o: torch.Tensor, r: torch.Tensor, atol: float, rtol: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    o64, r64 = o.double(), r.double()
    d = (o64 - r64).abs()
    same = (o64 == r64) | (torch.isnan(o64) & torch.isnan(r64))  # mask: equal infs and NaN-vs-NaN agree
    bad = ~(same | (d <= atol + rtol * r64.abs()))                  # NaN in d compares False -> bad
    return bad, torch.where(same, torch.zeros_like(d), d), r64


def _elementwise(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> dict[str, Any]:
    dev = ref.device
    zero = lambda: torch.zeros((), dtype=torch.float64, device=dev)  # noqa: E731
    max_abs, max_rel, diff_sq, nonfinite = zero(), zero(), zero(), zero()
    counts = []
    flat_out = out.reshape(-1)
    for start, r in _chunks(ref):
        bad, d, r64 = _bad_mask(flat_out[start:start + r.numel()], r, atol, rtol)
        finite = torch.isfinite(d)  # mask: keep the reported statistics finite
        dfin = torch.where(finite, d, torch.zeros_like(d))
        max_abs = torch.maximum(max_abs, dfin.max())
        # mask: a NaN reference (matched by a NaN) has no relative error; it would make the statistic NaN
        rel = torch.where(torch.isnan(r64), torch.zeros_like(dfin), dfin / (r64.abs() + 1e-30))
        max_rel = torch.maximum(max_rel, rel.max())
        diff_sq += (dfin * dfin).sum()
        nonfinite += (~finite).sum()
        counts.append(bad.sum())
    counts_list = torch.stack(counts).tolist()
    first = None
    for i, n in enumerate(counts_list):
        if n:
            start = i * CHUNK
            r = ref.reshape(-1)[start:start + CHUNK]
            bad, _, _ = _bad_mask(flat_out[start:start + r.numel()], r, atol, rtol)
            first = start + int(bad.nonzero()[0, 0])
            break
    return {"bad": int(sum(counts_list)), "first": first, "max_abs": float(max_abs), "max_rel": float(max_rel),
            "diff_sq": math.inf if float(nonfinite) else float(diff_sq)}


def _guard(ref_dtype: torch.dtype, atol: float, rtol: float, m: dict[str, float], diff_sq: float, rho: float):
    """(guard name, relative error norm, passed) for references that zeros or a constant would pass."""
    n = m["n"]
    if n == 0:
        return "", 0.0, True
    ref_norm, err_norm = math.sqrt(m["ss"]), math.sqrt(diff_sq)
    checks: list[tuple[str, float]] = []
    if m["absmax"] <= atol:  # zeros would pass the elementwise test
        if ref_norm == 0.0:
            return "near_zero", 0.0, err_norm <= atol * math.sqrt(n)
        checks.append(("near_zero", err_norm / ref_norm))
    mean = m["s"] / n
    spread = math.sqrt(max(m["ss"] - n * mean * mean, 0.0))  # ||ref - mean||
    eps = torch.finfo(ref_dtype).eps if ref_dtype.is_floating_point else 0.0
    constant_passes = max(m["hi"] - mean, mean - m["lo"]) <= atol + rtol * abs(mean)
    resolvable = spread > 0 and spread / math.sqrt(n) >= 1e4 * eps * abs(mean)
    if constant_passes and resolvable:
        checks.append(("near_constant", err_norm / spread))
    if not checks:
        return "", err_norm / ref_norm if ref_norm else 0.0, True
    failing = [c for c in checks if c[1] > rho]
    name, rel = failing[0] if failing else max(checks, key=lambda c: c[1])
    return name, rel, not failing


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, tol: float, rel_norm: float, index: int = 0) -> Comparison:
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}", output_index=index)
    if out.dtype != ref.dtype:
        return Comparison(False, f"dtype {out.dtype} != reference {ref.dtype}", output_index=index)
    if ref.numel() == 0:
        return Comparison(True, output_index=index)
    if out.device != ref.device:
        out = out.to(ref.device)
    fast = fused.usable(out, ref)  # one pass per statistic on a GPU, the same numbers (tests/kernelgym/test_fused_compare.py)
    moments = fused.moments(ref) if fast else _moments(ref)
    atol = tol * max(1.0, math.sqrt(moments["ss"] / moments["n"])) if moments["n"] else tol
    e = fused.elementwise(out, ref, atol, tol) if fast else _elementwise(out, ref, atol, tol)
    guard, rel, guard_ok = _guard(ref.dtype, atol, tol, moments, e["diff_sq"], rel_norm)
    first_idx = first_vals = None
    if e["first"] is not None:
        first_idx = _unravel(e["first"], ref.shape)
        first_vals = (float(out.reshape(-1)[e["first"]]), float(ref.reshape(-1)[e["first"]]))
    frac = e["bad"] / ref.numel()
    common = dict(max_abs_error=e["max_abs"], max_rel_error=e["max_rel"], mismatch_fraction=frac,
                  first_bad_index=first_idx, first_bad_values=first_vals, rel_error_norm=rel, guard=guard,
                  output_index=index)
    if e["bad"]:
        return Comparison(False, f"{e['bad']} of {ref.numel()} elements out of tolerance "
                                 f"(atol {atol:.2g}, rtol {tol:.2g})", **common)
    if not guard_ok:
        what = "zero" if guard == "near_zero" else "constant"
        return Comparison(False, f"reference is near {what} (every element within tolerance of it): relative "
                                 f"error norm {rel:.3g} > {rel_norm:g}", **common)
    return Comparison(True, **common)


def _unravel(flat: int, shape) -> tuple[int, ...]:
    idx = []
    for dim in reversed(tuple(shape)):
        idx.append(flat % dim)
        flat //= dim
    return tuple(reversed(idx))


def sample_pair(out: torch.Tensor, ref: torch.Tensor, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same `n` random elements (secret seed) of two equally shaped tensors, for cheap spot checks."""
    if ref.numel() <= n or out.shape != ref.shape:
        return out, ref
    gen = torch.Generator(device=ref.device)
    gen.manual_seed(seed % (2 ** 63 - 1))
    idx = torch.randint(0, ref.numel(), (n,), generator=gen, device=ref.device)
    return out.reshape(-1)[idx.to(out.device)], ref.reshape(-1)[idx]


def flatten_outputs(obj: Any) -> list[Any]:
    """Leaves of a (nested) tuple/list output in order; anything else is one leaf."""
    if isinstance(obj, (tuple, list)):
        return [leaf for item in obj for leaf in flatten_outputs(item)]
    return [obj]


def compare_outputs(out: list[Any], ref: list[Any], tol_fp32: float, tol_half: float, rel_norm: float) -> Comparison:
    """Compare flattened outputs leaf by leaf; the first failing leaf decides."""
    if len(out) != len(ref):
        return Comparison(False, f"{len(out)} outputs != reference's {len(ref)}")
    worst = Comparison(True)
    for i, (o, r) in enumerate(zip(out, ref)):
        if isinstance(r, torch.Tensor):
            if not isinstance(o, torch.Tensor):
                return Comparison(False, f"output {i} is {type(o).__name__}, reference is a tensor", output_index=i)
            c = compare_tensor(o, r, tolerance_for(r.dtype, tol_fp32, tol_half), rel_norm, i)
        else:
            same = o == r or (isinstance(o, float) and isinstance(r, float) and math.isclose(o, r, rel_tol=tol_fp32))
            c = Comparison(bool(same), "" if same else f"output {i} = {o!r} != reference {r!r}", output_index=i)
        if not c.ok:
            return c
        if c.max_abs_error >= worst.max_abs_error:
            worst = c
    return worst
