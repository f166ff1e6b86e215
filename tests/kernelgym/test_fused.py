"""The fused (Triton) passes of the reference worker against the torch code they replace on a GPU, run through the
Triton interpreter on the CPU in a subprocess (TRITON_INTERPRET must be set before Triton is imported):
- the comparison gives compare.py's numbers exactly on adversarial tensors: NaN and infinities on either side,
  -0, values at the edge of each dtype's range, half dtypes, a length that is not a multiple of the block;
- the distribution maps give the float32 map (rounded once for half inputs), and spikes moves exactly the
  positions the torch map moves.
On a GPU, compare_tensor takes the fused path and the verdicts are the torch path's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = r'''
import math, torch
from davinci.kernelgym import compare, fused
torch.manual_seed(0)
def cases():
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        r = (torch.randn(10007) * 3).to(dt)
        yield "equal", r.clone(), r
        yield "noisy", (r.double() + torch.randn(10007).double() * 1e-3).to(dt), r
        r3 = r.clone(); r3[5] = float("nan"); r3[17] = float("inf"); r3[99] = -float("inf"); r3[100] = -0.0
        o3 = r3.clone(); o3[100] = 0.0
        yield "specials_same", o3, r3
        o4 = r3.clone(); o4[5] = 1.0; o4[17] = -float("inf"); o4[500] = float("nan")
        yield "specials_bad", o4, r3
        r5 = torch.full((9000,), 1e-30 if dt != torch.float16 else 1e-7, dtype=dt)
        yield "tiny", torch.zeros_like(r5), r5
        r6 = torch.tensor([3e38 if dt in (torch.float32, torch.float64) else 6e4] * 5000, dtype=dt)
        yield "huge", -r6, r6
def same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * max(1.0, abs(a))
    return a == b
n = 0
for name, o, r in cases():
    m_ref, m_fused = compare._moments(r), fused.moments(r)
    for k in m_ref:
        assert same(m_ref[k], m_fused[k]), (name, r.dtype, k, m_ref[k], m_fused[k])
    for atol, rtol in ((1e-4, 1e-4), (1e-2, 1e-2), (0.0, 0.0)):
        e_ref, e_fused = compare._elementwise(o, r, atol, rtol), fused.elementwise(o, r, atol, rtol)
        for k in e_ref:
            assert same(e_ref[k], e_fused[k]), (name, r.dtype, atol, k, e_ref[k], e_fused[k])
        n += 1
print("compared", n)
'''


MAPS = r'''
import torch
from davinci.kernelgym import fused, inputs
torch.manual_seed(0)
def heavy(c, m):
    t = (c.abs() / m).clamp(max=1.0); return torch.sign(c) * m * ((1.0 - 0.999 * t) ** (-2.0 / 3.0) - 1.0)
def reshape(c, top, k):
    return torch.sign(c) * top * (c.abs() / top) ** k
n = 0
for dt in (torch.float32, torch.float16, torch.bfloat16):
    for shape in ((37, 1000), (64, 64), (10007,)):
        x = (torch.randn(shape) * 2).to(dt)
        m = float(x.abs().max())
        tol = 1e-5 if dt == torch.float32 else 1e-2  # half: the float32 map rounded once (torch in half rounds every step)
        want = heavy(x.float(), m).to(dt).float()
        got = fused.heavy_tail_(x.clone(), m).float()
        assert torch.allclose(got, want, rtol=tol, atol=1e-6), ("heavy_tail", dt, shape)
        want = reshape(x.float(), m, 2.7).to(dt).float()
        got = fused.reshaped_(x.clone(), m, 2.7).float()
        assert torch.allclose(got, want, rtol=tol, atol=1e-6), ("reshaped", dt, shape)
        g1 = torch.Generator(); g1.manual_seed(5); g2 = torch.Generator(); g2.manual_seed(5)
        torch_map = inputs.spikes(x.clone(), g1)  # on the CPU: the torch map
        salt = int(torch.randint(0, 1 << 30, (), generator=g2)); factor = 2.0 ** float(8.0 + 4.0 * torch.rand((), generator=g2))
        amount = min(factor * m, torch.finfo(dt).max ** 0.5 / 4.0)
        by_value = x.dim() >= 2 and x.shape[-1] == x.shape[-2]
        skip = 0 if by_value else max(1, x.numel() // 8)
        rate = int(min(8192, max(32, (x.numel() - skip) // 16)))
        got = fused.spikes_(x.clone(), salt, rate, skip, int(x.shape[-1]), amount, by_value)
        assert int((torch_map != x).sum()) > 0 and torch.equal(torch_map != x, got != x), ("spikes positions", dt, shape)
        same = torch.equal(torch_map, got) if dt == torch.float32 else torch.allclose(torch_map.float(), got.float(), rtol=1e-2)
        assert same, ("spikes values", dt, shape)
        n += 1
print("maps agree", n)
'''


def _interpreted(script: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_fused_statistics_equal_the_torch_path_on_adversarial_tensors():
    assert "compared 72" in _interpreted(SCRIPT)


def test_fused_distribution_maps_equal_the_float32_maps_and_spikes_moves_the_same_positions():
    assert "maps agree 9" in _interpreted(MAPS)


@pytest.mark.gpu
def test_compare_tensor_takes_the_fused_path_on_a_gpu_with_the_same_verdicts(monkeypatch):
    from davinci.kernelgym import compare, fused

    ref = torch.randn(3_000_001, device="cuda")
    outs = {"honest": ref + 1e-6 * torch.randn_like(ref), "zeros": torch.zeros_like(ref), "one_nan": ref.clone()}
    outs["one_nan"][1_234_567] = float("nan")
    fast = {k: compare.compare_tensor(o, ref, 1e-4, 0.01) for k, o in outs.items()}
    assert fused.usable(ref, ref)
    monkeypatch.setattr(fused, "usable", lambda out, ref: False)
    slow = {k: compare.compare_tensor(o, ref, 1e-4, 0.01) for k, o in outs.items()}
    for k in outs:
        assert (fast[k].ok, fast[k].first_bad_index, fast[k].reason) == (slow[k].ok, slow[k].first_bad_index, slow[k].reason)
    assert fast["honest"].ok and not fast["zeros"].ok and fast["one_nan"].first_bad_index == (1_234_567,)
    # a reference with NaN and infinities (the finiteness test inside the kernels is r - r == 0): matched exactly
    # passes, a wrong infinity or a number in place of NaN fails, on both paths alike
    special = ref.clone()
    special[7], special[8], special[9] = float("nan"), float("inf"), -float("inf")
    wrong_inf, wrong_nan = special.clone(), special.clone()
    wrong_inf[8], wrong_nan[7] = -float("inf"), 0.0
    cases = {"same": special.clone(), "wrong_inf": wrong_inf, "wrong_nan": wrong_nan}
    slow = {k: compare.compare_tensor(o, special, 1e-4, 0.01) for k, o in cases.items()}
    monkeypatch.undo()
    fast = {k: compare.compare_tensor(o, special, 1e-4, 0.01) for k, o in cases.items()}
    assert [fast[k].ok for k in cases] == [slow[k].ok for k in cases] == [True, False, False]
    assert (fast["wrong_inf"].first_bad_index, fast["wrong_nan"].first_bad_index) == ((8,), (7,))


@pytest.mark.gpu
def test_distributions_on_a_gpu_take_the_fused_maps_with_the_torch_maps_results(monkeypatch):
    from davinci.kernelgym import fused, inputs

    x = torch.randn(300, 1000, device="cuda") * 2
    fast = {n: inputs.apply_distribution([x.clone()], n, seed=3)[0] for n in ("heavy_tail", "spikes", "reshaped")}
    monkeypatch.setattr(fused, "maps", lambda t: False)
    for name, got in fast.items():
        want = inputs.apply_distribution([x.clone()], name, seed=3)[0]
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), name
        assert name != "spikes" or torch.equal(got != x, want != x)
