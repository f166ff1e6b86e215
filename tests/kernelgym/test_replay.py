"""The launch replay (`replay.Replay`, the GPU's record of what a candidate's kernels write; audit.py compares it
between audit A and an unwatched request), run here on the Triton interpreter with the harness's own launch
capture (`guards.LaunchRecorder.capture`). Hand-computed shares: an honest kernel rewrites its whole output, a
token launch beside PyTorch's answer one element of it, and a copy kernel of an answer made earlier rewrites it
all but depends on none of the input; the replay leaves outputs and inputs as they were."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from davinci.kernelgym.audit import unwatched_drop  # noqa: E402
from davinci.kernelgym.guards import LaunchRecorder  # noqa: E402
from davinci.kernelgym.replay import Replay  # noqa: E402

N = 256


@triton.jit
def _relu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last block runs past n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


@triton.jit
def _copy(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last block runs past n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _accumulate(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n  # the block runs past n
    tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@pytest.fixture
def rec(monkeypatch):
    """A launch recorder installed on Triton's launch entries, which are put back after the test."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    monkeypatch.setattr(InterpretedFunction, "run", InterpretedFunction.run)
    monkeypatch.setattr(JITFunction, "run", JITFunction.run)
    recorder = LaunchRecorder()
    recorder.install(cuda=False)
    return recorder


def _call(rec: LaunchRecorder, forward, x: torch.Tensor) -> tuple[list, torch.Tensor]:
    """One call as the worker times it (worker._counting): its launches captured."""
    rec.capture = []
    try:
        out = forward(x)
    finally:
        captured, rec.capture = rec.capture, None
    return captured, out


def honest(x):
    out = torch.empty_like(x)
    _relu[(2,)](x, out, x.numel(), BLOCK=128)
    return out


def token(x):
    out = torch.relu(x)
    _relu[(1,)](x, out, 1, BLOCK=16)
    return out


def copy_of_torch(x):
    answer = torch.relu(x)
    out = torch.empty_like(x)
    _copy[(2,)](answer, out, x.numel(), BLOCK=128)
    return out


def _x() -> torch.Tensor:
    return torch.arange(1, N + 1, dtype=torch.float32) * torch.tensor([1.0, -1.0]).repeat(N // 2)


def test_an_honest_kernel_rewrites_all_of_its_output_and_it_depends_on_the_input(rec):
    x = _x()
    captured, out = _call(rec, honest, x)
    shares = Replay().shares([captured], [[out]], [[x]], seed=0)
    assert shares["rewrote_share"] == 1.0 and shares["replayed_launches"] == 1
    # every x is distinct and half are positive: a permutation changes relu at each element unless both the old
    # and the new value there are negative (~1/4) or the element stayed put
    assert 0.6 < shares["depends_share"] < 0.9


def test_a_token_launch_beside_pytorchs_answer_rewrites_one_element(rec):
    x = _x()
    captured, out = _call(rec, token, x)
    shares = Replay().shares([captured], [[out]], [[x]], seed=0)
    assert shares["rewrote_share"] == 1 / N
    assert shares["depends_share"] <= 1 / N


def test_a_copy_kernel_of_an_earlier_answer_rewrites_everything_and_depends_on_nothing(rec):
    x = _x()
    captured, out = _call(rec, copy_of_torch, x)
    shares = Replay().shares([captured], [[out]], [[x]], seed=0)
    assert shares["rewrote_share"] == 1.0 and shares["depends_share"] == 0.0


def test_accumulating_into_a_zeroed_output_counts_as_written(rec):
    x = torch.arange(1, 65, dtype=torch.float32)

    def forward(x):
        out = torch.zeros_like(x)
        _accumulate[(1,)](x, out, x.numel(), BLOCK=64)
        return out

    captured, out = _call(rec, forward, x)
    assert Replay().shares([captured], [[out]], [[x]], seed=1)["rewrote_share"] == 1.0


def test_the_replay_leaves_outputs_and_inputs_as_they_were(rec):
    x = _x()
    captured, out = _call(rec, honest, x)
    x0, out0 = x.clone(), out.clone()
    Replay().shares([captured], [[out]], [[x]], seed=3)
    assert torch.equal(x, x0) and torch.equal(out, out0)


def test_a_call_without_captured_launches_credits_nothing_and_no_output_gives_no_figure(rec):
    x = _x()
    captured, out = _call(rec, torch.relu, x)
    assert captured == []
    shares = Replay().shares([captured], [[out]], [[x]], seed=0)
    assert shares["rewrote_share"] == 0.0 and shares["depends_share"] == 0.0
    none = Replay().shares([captured], [[3.0]], [[x]], seed=0)
    assert none["rewrote_share"] is None and none["depends_share"] is None


def test_the_lowest_call_counts_and_the_token_switch_is_a_drop_against_the_watched_share(rec):
    x = _x()
    watched = Replay().shares(*zip(*[(c, [o], [x]) for c, o in [_call(rec, honest, x)]]), seed=0)
    calls = [_call(rec, honest, x), _call(rec, token, x)]
    unwatched = Replay().shares([c for c, _ in calls], [[o] for _, o in calls], [[x], [x]], seed=0)
    assert unwatched["rewrote_share"] == 1 / N  # the token call, not the mean of the two
    text = unwatched_drop(watched["rewrote_share"], unwatched["rewrote_share"], "rewrote")
    assert text is not None and "run again after the call, rewrote 0% of the output, against 100%" in text


def test_the_supervisor_reads_a_replay_as_shares_and_keeps_the_lowest():
    from davinci.kernelgym.replay import lowest, parsed, unwatched

    ok = {"ok": True, "rewrote_share": 1.0, "depends_share": 0.75, "replayed_launches": 2}
    assert parsed(ok) == {"rewrote": 1.0, "depends": 0.75}
    assert parsed({"ok": False, "error": "boom"}) == {"rewrote": None, "depends": None}  # watched: no figure
    assert unwatched({"ok": False, "error": "boom"}, native=True) == {"rewrote": 0.0, "depends": 0.0}
    assert unwatched(ok, native=False) == {"rewrote": 1.0}  # off native inputs only the rewritten share counts
    seen: dict = {}
    lowest(seen, {"rewrote": 1.0, "depends": 0.75})
    lowest(seen, {"rewrote": 0.25})
    lowest(seen, {"rewrote": 0.5, "depends": None})
    assert seen == {"rewrote": 0.25, "depends": 0.75}


def test_narrow_float_types_replay_too():
    """float8 has no random generator nor `take` of its own: the canary and the permutation go through float32 and
    the bits. A launch here is any callable in the capture's entry slot (the replay calls entry(kernel, *args))."""
    x = torch.arange(1, 65, dtype=torch.float32).to(torch.float8_e4m3fn)
    out = torch.empty_like(x)

    def entry(kernel, src, dst):  # stands for JITFunction.run: writes dst from src
        dst.copy_(src.float().neg().to(dst.dtype))

    entry(None, x, out)
    shares = Replay().shares([[(entry, None, (x, out), {})]], [[out]], [[x]], seed=0)
    assert shares["rewrote_share"] == 1.0 and shares["depends_share"] > 0.9
