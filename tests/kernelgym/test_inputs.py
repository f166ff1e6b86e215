"""Input distributions: structure-preserving (zeros, signs, symmetry, triangularity), discrete inputs kept."""

from __future__ import annotations

import torch

from davinci.kernelgym.inputs import DISTRIBUTIONS, apply_distribution, is_continuous, native_inputs


def test_distributions_preserve_structure_but_not_magnitude():
    torch.manual_seed(0)
    a = torch.rand(64, 64)
    sym = (a + a.t()) / 2
    tri = torch.triu(torch.rand(64, 64))
    signed = torch.randn(64, 64)
    for name in ("scaled", "heavy_tail", "spikes", "reshaped"):
        s, t, g = apply_distribution([sym.clone(), tri.clone(), signed.clone()], name, seed=3)  # works in place
        assert torch.equal(s, s.t()), name
        assert torch.equal(torch.triu(t), t), name
        assert torch.equal(torch.sign(g), torch.sign(signed)), name
        assert not torch.allclose(s, sym), name
    heavy = apply_distribution([torch.rand(100_000)], "heavy_tail", seed=1)[0]
    assert float(heavy.max()) / float(heavy.median()) > 20  # rare values far above the typical one
    big = torch.rand((1 << 24) + 5)
    expect = torch.sign(big) * big.max() * ((1 - 0.999 * big / big.max()) ** (-2 / 3) - 1)
    assert torch.allclose(apply_distribution([big], "heavy_tail", seed=0)[0], expect, rtol=1e-4)  # chunked == whole


def test_spikes_leave_almost_every_value_native_and_move_a_few_far():
    torch.manual_seed(0)
    x = torch.rand(1 << 16) * 2 - 1
    out = apply_distribution([x.clone()], "spikes", seed=5)[0]
    moved = out != x
    assert 4 <= int(moved.sum()) <= 64  # ~16 expected: a sample of the input rarely meets one ...
    assert float(out[moved].abs().min()) >= 4 * float(x.abs().max())  # ... and each is far out of range
    assert torch.equal(torch.sign(out), torch.sign(x))
    assert torch.equal(out[~moved], x[~moved])


def test_discrete_inputs_keep_their_contract():
    targets = torch.randint(0, 2, (4096,)).float() * 2 - 1
    labels = torch.randint(0, 10, (64,))
    assert not is_continuous(targets) and not is_continuous(labels)
    out = apply_distribution([targets, labels, 7], "heavy_tail", seed=0)
    assert torch.equal(out[0], targets) and torch.equal(out[1], labels) and out[2] == 7


def test_native_inputs_are_seeded_and_on_the_device():
    def get_inputs():
        return [torch.rand(3, 4), torch.randint(0, 5, (2,)), 1.5]

    a, b = native_inputs(get_inputs, 11, "cpu"), native_inputs(get_inputs, 11, "cpu")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == 1.5
    assert not torch.equal(native_inputs(get_inputs, 12, "cpu")[0], a[0])
    assert DISTRIBUTIONS.names() == ("heavy_tail", "native", "reshaped", "scaled", "spikes")
