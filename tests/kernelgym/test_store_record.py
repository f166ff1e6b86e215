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


class _Handle:
    def __init__(self, data: object) -> None:
        import numpy as np

        self.data = np.asarray(data)


class _Triton39Builder:
    """The interpreter entry points with Triton 3.9's parameters, over a dict of address -> value."""

    def __init__(self) -> None:
        self.mem: dict[int, int] = {}
        self.calls: list[tuple] = []

    def create_masked_store(self, ptrs, value, mask, cache_policy):
        self.calls.append(("store", cache_policy))
        for p, v, m in zip(ptrs.data, value.data, mask.data):
            if m:
                self.mem[int(p)] = int(v)

    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        self.calls.append(("load", cache_policy, is_volatile))
        return _Handle([self.mem.get(int(p), 0) if m else 0 for p, m in zip(ptrs.data, mask.data)])

    def create_atomic_rmw(self, op, ptr, val, mask, sem, scope):
        self.calls.append(("rmw", sem, scope))
        for p, v, m in zip(ptr.data, val.data, mask.data):
            if m:
                self.mem[int(p)] = self.mem.get(int(p), 0) + int(v)

    def create_atomic_cas(self, ptr, cmp, val, sem, scope):
        self.calls.append(("cas", sem, scope))


class _Triton36Builder(_Triton39Builder):
    """Triton 3.6's parameters: an eviction policy after the cache modifier (the GPU machine's Triton, where every
    CPU evaluation failed with "create_masked_load() takes 6 positional arguments but 7 were given")."""

    def create_masked_store(self, ptrs, value, mask, cache_modifier, eviction_policy):
        return super().create_masked_store(ptrs, value, mask, (cache_modifier, eviction_policy))

    def create_masked_load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile):
        return super().create_masked_load(ptrs, mask, other, (cache_modifier, eviction_policy), is_volatile)


@pytest.mark.parametrize("builder_cls", [_Triton36Builder, _Triton39Builder], ids=["triton3.6", "triton3.9"])
def test_the_store_record_wraps_every_triton_releases_entry_points(builder_cls):
    cls = type(builder_cls.__name__, (builder_cls,), {})  # a fresh class: install patches it
    rec = StoreRecorder()
    assert rec.install(cls)
    b = cls()
    rec.start()
    extra = ("evict_last",) if builder_cls is _Triton36Builder else ()
    b.create_masked_store(_Handle([8, 16]), _Handle([1, 2]), _Handle([True, False]), ".cg", *extra)
    b.create_masked_load(_Handle([8, 16]), _Handle([True, True]), None, ".ca", *extra, True)
    b.create_atomic_rmw("add", _Handle([24]), _Handle([5]), _Handle([True]), "acq_rel", "gpu")
    rec.stop()
    stored = [(a.tolist(), v.tolist()) for a, v in rec.stores]
    assert stored == [([8], [1]), ([24], [5])]  # hand-computed: the masked-off lane at 16 is not a store
    assert [a.tolist() for a in rec.loads] == [[8, 16], [24]]
    # the interpreter got every argument as given; the atomic's read-back asked for no hints and not volatile
    hints = (".cg", "evict_last") if extra else ".cg"
    assert b.calls[0] == ("store", hints)
    assert b.calls[1] == ("load", (".ca", "evict_last") if extra else ".ca", True)
    assert b.calls[3] == ("load", (None, None) if extra else None, False)


@triton.jit
def _descriptor_plus_one(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    v = desc.load([0, 0])  # Triton 3.9's interpreter calls create_masked_load with cache_policy= by name here
    r = tl.arange(0, BM)[:, None]
    c = tl.arange(0, BN)[None, :]
    tl.store(out_ptr + r * N + c, v + 1.0)


def test_a_tensor_descriptor_load_runs_under_the_store_record():
    """The interpreter passes some arguments by name; the wrappers forward them (a wrapper taking positional
    arguments only broke every honest descriptor kernel on the CPU)."""
    rec = StoreRecorder()
    assert rec.install()
    x = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    out = torch.empty_like(x)
    rec.start()
    _descriptor_plus_one[(1,)](x, out, 8, 8, BM=8, BN=8)
    rec.stop()
    assert torch.equal(out, x + 1) and rec.kernel_share([out]) == 1.0
