"""The CPU store record (`accounting.StoreRecorder`, Triton interpreter) counts atomic read-modify-writes as the
kernel's stores: split-K reductions into a zeroed output (`tl.atomic_add`) and compare-and-swap are honest, and
were flagged `host_compute` (0% of the output stored by the kernels) before (red team of 2026-11-26;
fixtures honest_v2_atomic_row_sum, honest_v2_atomic_hinge)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from davinci.kernelgym.accounting import StoreRecorder  # noqa: E402


@triton.jit
def _cas_then_add(p, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_cas(p + offs, tl.zeros([BLOCK], tl.int32), tl.full([BLOCK], 7, tl.int32))
    tl.atomic_add(p + offs, tl.full([BLOCK], 1, tl.int32), mask=offs < BLOCK // 2)


def test_atomic_stores_count_with_the_value_they_leave():
    rec = StoreRecorder()
    assert rec.install()
    x = torch.zeros(16, dtype=torch.int32)
    rec.start()
    _cas_then_add[(1,)](x, BLOCK=16)
    rec.stop()
    assert x.tolist() == [8] * 8 + [7] * 8  # hand-computed: cas 0 -> 7 everywhere, +1 on the first half
    assert rec.kernel_share([x]) == 1.0
    x[3] = 5  # written after the kernels: not theirs
    assert rec.kernel_share([x]) == pytest.approx(15 / 16)


@triton.jit
def _double(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n  # the lanes past n
    tl.store(dst + offs, tl.load(src + offs, mask=m) * 2.0, mask=m)


def test_a_cat_of_kernel_buffers_is_the_kernels_work_and_other_pieces_are_not():
    from davinci.kernelgym.accounting import PoisonMode

    rec = StoreRecorder()
    assert rec.install()
    x = torch.arange(1, 9, dtype=torch.float32)
    a, b = torch.empty(8), torch.empty(8)
    other = torch.from_numpy((x.numpy() * 3.0).copy())  # computed out of the kernels' sight
    rec.start()
    with PoisonMode(track_copies=True) as mode:
        _double[(1,)](x, a, 8, BLOCK=8)
        _double[(1,)](x, b, 8, BLOCK=8)
        both = torch.cat([a, b])
        mixed = torch.stack([a, other])
    rec.stop()
    assert rec.kernel_share([both], mode.copies) == 1.0  # every element a copy of a kernel's store
    assert rec.kernel_share([mixed], mode.copies) == 0.5  # hand-computed: one of two rows
