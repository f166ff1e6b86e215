"""Tampering with what the harness shares with the candidate (guards._shared_tables), and the harness's own copies
bound before the candidate runs, so the tampering changes nothing it computes (accounting.flop_table, accounting._fill,
provenance._blake2b). Each test tampers the way a red-team cheat of 2026-11-28 did (cheats_v2/c2_hp_rt6_*) and
undoes it (monkeypatch)."""

from __future__ import annotations

import hashlib
from contextlib import contextmanager

import torch
from torch.utils.flop_counter import flop_registry

from davinci.kernelgym import accounting, guards
from davinci.kernelgym.provenance import Provenance


@contextmanager
def _noop_fill():
    """torch.Tensor.fill_ set in front of its C base's as a fill that writes nothing, then removed again (an undo
    that put the inherited method back on torch.Tensor would leave an attribute that was not there)."""
    torch.Tensor.fill_ = lambda self, value: self
    try:
        yield
    finally:
        del torch.Tensor.fill_


def test_untouched_tables_report_nothing():
    captured = guards.capture()
    torch.ones(4).relu().sum()  # ordinary use changes none of them
    assert guards.changed(captured) == []


def test_a_tensor_method_shadowed_a_formula_swapped_and_blake2b_swapped_are_each_reported(monkeypatch):
    captured = guards.capture()
    monkeypatch.setitem(flop_registry, torch.ops.aten.sum, lambda *a, **k: 0)
    monkeypatch.setattr(hashlib, "blake2b", object)
    formula = flop_registry[torch.ops.aten.mm]
    monkeypatch.setitem(flop_registry, torch.ops.aten.mm, lambda *a, **k: 0)  # an existing formula swapped
    with _noop_fill():
        assert set(guards.changed(captured)) >= {"Tensor.fill_ (added)", "flops.aten.mm", "hashlib.blake2b"}
    assert "fill_" not in vars(torch.Tensor) and formula is not None
    # a formula added is torch's own way when a feature is first used: not reported, and never consulted
    assert not any(label.startswith("flops.aten.sum") for label in guards.changed(captured))


def test_the_work_count_ignores_a_zero_formula_added_to_torchs_table(monkeypatch):
    x = torch.ones(4, 8)
    func = torch.ops.aten.sum.default
    assert accounting.op_work(func, (x,), {}, x.sum()) == 32  # no formula: its largest tensor's elements
    monkeypatch.setitem(flop_registry, torch.ops.aten.sum, lambda *a, **k: 0)
    assert accounting.op_work(func, (x,), {}, x.sum()) == 32


def test_the_poison_fills_through_the_fill_bound_at_import():
    x = torch.zeros(64)
    with _noop_fill():
        x.fill_(1.0)  # the candidate's fill writes nothing ...
        accounting._fill(x, float("nan"))  # ... the harness's own still does
    assert torch.isnan(x).all()


def test_record_digests_hold_with_a_constant_blake2b(monkeypatch):
    class Constant:
        def __init__(self, *args, **kwargs):
            pass

        def digest(self):
            return b"\0" * 16

    monkeypatch.setattr(hashlib, "blake2b", Constant)
    record = Provenance(key=b"k" * 16)
    assert record._value_digest("a", 1) != record._value_digest("a", 2)


def test_the_harness_copy_of_the_flop_table_cannot_be_written_or_rebound(monkeypatch):
    """A candidate that reaches the harness's own copy (sys.modules['davinci.kernelgym.accounting']) and writes a
    zero formula into it: the copy is read-only; one that drops the copy so the next call copies torch's table
    again (with its zero formula added) is tampering."""
    import pytest

    table = accounting.flop_table()
    with pytest.raises(TypeError):
        table[torch.ops.aten.mm] = lambda *a, **k: 0  # type: ignore[index]
    captured = guards.capture()
    monkeypatch.setitem(flop_registry, torch.ops.aten.sum, lambda *a, **k: 0)
    accounting.flop_table.cache_clear()
    try:
        assert "accounting.flop_table" in guards.changed(captured)
    finally:
        monkeypatch.undo()
        accounting.flop_table.cache_clear()


def test_importing_the_evaluator_does_not_import_triton():
    """torch.utils.flop_counter imports Triton; copied at import, the table would fix Triton's mode (TRITON_INTERPRET)
    for the process before the caller set it (a kernel then ran @jit helpers compiled for the GPU on the CPU)."""
    import subprocess
    import sys

    code = "import sys, davinci.kernelgym.accounting, davinci.kernelgym.hidden; print('triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
