"""Tolerance logic, hand-computed: KernelBench's elementwise rule with magnitude scaling, and the guards
that make zeros or a constant fail where every reference element is within tolerance of them."""

from __future__ import annotations

import math

import pytest
import torch

from davinci.kernelgym.compare import compare_outputs, compare_tensor, tolerance_for


def test_elementwise_rule_matches_hand_computation():
    ref = torch.tensor([1.0, 2.0, -3.0, 0.5])
    # rms(ref) = sqrt((1+4+9+0.25)/4) = 1.8875 -> atol = 1e-4 * 1.8875; element 2 allows atol + 1e-4*2.
    allowed = 1e-4 * math.sqrt((1 + 4 + 9 + 0.25) / 4) + 1e-4 * 2.0
    inside = ref.clone()
    inside[1] += allowed * 0.9
    outside = ref.clone()
    outside[1] += allowed * 1.1
    assert compare_tensor(inside, ref, 1e-4, 0.01).ok
    bad = compare_tensor(outside, ref, 1e-4, 0.01)
    assert not bad.ok and bad.first_bad_index == (1,) and bad.mismatch_fraction == pytest.approx(0.25)


def test_zeros_fail_on_a_near_zero_reference_that_allclose_accepts():
    torch.manual_seed(0)
    ref = torch.softmax(torch.rand(2, 65536), dim=1)        # every element ~1.5e-5 < 1e-4
    zeros = torch.zeros_like(ref)
    assert torch.allclose(zeros, ref, atol=1e-4, rtol=1e-4)  # KernelBench's check passes zeros
    c = compare_tensor(zeros, ref, 1e-4, 0.01)
    assert not c.ok and c.guard == "near_zero" and c.rel_error_norm == pytest.approx(1.0)


def test_constant_fails_on_a_near_constant_reference():
    torch.manual_seed(1)
    ref = torch.softmax(torch.rand(2, 65536), dim=1)
    const = torch.full_like(ref, float(ref.mean()))
    c = compare_tensor(const, ref, 1e-4, 0.01)
    assert not c.ok and "near" in c.reason


def test_honest_float_error_passes_the_guards():
    torch.manual_seed(2)
    x = torch.rand(2, 65536)
    ref = torch.softmax(x, dim=1)
    honest = torch.softmax(x.double(), dim=1).float()
    c = compare_tensor(honest, ref, 1e-4, 0.01)
    assert c.ok and c.rel_error_norm < 1e-5


def test_nan_is_not_a_wildcard_and_matches_only_nan():
    ref = torch.tensor([1.0, float("nan"), float("inf")])
    assert compare_tensor(ref.clone(), ref, 1e-4, 0.01).ok
    assert not compare_tensor(torch.tensor([1.0, 0.0, float("inf")]), ref, 1e-4, 0.01).ok
    assert not compare_tensor(torch.tensor([float("nan"), float("nan"), float("inf")]), ref, 1e-4, 0.01).ok


def test_shape_and_dtype_must_match_exactly():
    ref = torch.zeros(4, 3)
    assert "shape" in compare_tensor(torch.zeros(3, 4), ref, 1e-4, 0.01).reason
    assert "dtype" in compare_tensor(torch.zeros(4, 3, dtype=torch.float64), ref, 1e-4, 0.01).reason


def test_integer_outputs_compare_exactly_and_tuples_leaf_by_leaf():
    assert tolerance_for(torch.int64, 1e-4, 1e-2) == 0.0 and tolerance_for(torch.bfloat16, 1e-4, 1e-2) == 1e-2
    ref = [torch.tensor([1, 2, 3]), torch.tensor([0.5])]
    assert compare_outputs([torch.tensor([1, 2, 3]), torch.tensor([0.5])], ref, 1e-4, 1e-2, 0.01).ok
    c = compare_outputs([torch.tensor([1, 2, 4]), torch.tensor([0.5])], ref, 1e-4, 1e-2, 0.01)
    assert not c.ok and c.output_index == 0
    assert not compare_outputs([torch.tensor([1, 2, 3])], ref, 1e-4, 1e-2, 0.01).ok
