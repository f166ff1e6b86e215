"""PyTorch work hidden from the dispatch-mode accounting (accounting.PoisonMode) is still `torch_compute`.

A candidate can compute with PyTorch out of the mode's sight: inside a custom op whose body also launches a
token kernel (the op counts as the candidate's own work, and the mode is popped in its body), or under
`torch._C._DisableTorchDispatch`. On the CPU the Triton interpreter's store/load record (`host_compute`) catches
both, but that record does not exist on a GPU; the CPU profiler that runs beside the mode does
(`hidden.hidden_work`). These tests ask for `torch_compute` itself, which only that path can give here
(host_compute is reported only when torch_compute is not).

Unit tests run the mode and the profiler in-process on small forwards (cheats, honest glue); the evaluator
tests run the red team's fixtures end to end under `strict`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from davinci.kernelgym import Evaluator, load_problem_file
from davinci.kernelgym.accounting import PoisonMode, torch_verdict
from davinci.kernelgym.hidden import accounted
from davinci.types import Candidate

FIXTURES = Path(__file__).parent / "fixtures"
CHEATS_DIR = FIXTURES / "cheats_v2"
HIDDEN_CHEATS = [("c2_fb_custom_op_token_kernel", "relu"), ("c2_fb_disable_dispatch_launder", "relu"),
                 ("c2_fb_thread_matmul_launder", "matmul_cpu"), ("c2_fb_profiler_off", "relu")]


@torch.library.custom_op("kg_hidden_test::relu", mutates_args=())
def _custom_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


@_custom_relu.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _run(fn, *args) -> tuple[PoisonMode, list[tuple[str, int]]]:
    """`fn(*args)` under the accounting (mode + profiler); (mode, hidden ops)."""
    mode = PoisonMode()
    with accounted(mode) as hidden:
        fn(*args)
    return mode, hidden.ops


# --- unit: what counts as hidden ----------------------------------------------------------------------------

def test_disabled_dispatch_compute_is_hidden_work():
    def forward(x):
        with torch._C._DisableTorchDispatch():
            y = x.clamp(min=0)
        return y.clone()

    mode, hidden = _run(forward, torch.randn(64, 256))
    assert [n for n, _ in hidden] == ["aten::clamp"]
    assert sum(w for _, w in hidden) == 64 * 256
    assert mode.work == 0  # the mode saw only the clone


def test_compute_inside_a_custom_op_body_is_hidden_work():
    _, hidden = _run(lambda x: _custom_relu(x.contiguous()), torch.randn(64, 256))
    assert [n for n, _ in hidden] == ["aten::relu"]
    assert sum(w for _, w in hidden) == 64 * 256


def test_compute_in_a_thread_started_before_the_accounting_is_hidden_work():
    """The mode is thread-local: a matmul handed to a thread the candidate started at import is seen only by
    a profiler that records every thread."""
    import queue
    import threading

    jobs: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()

    def worker():
        a, b = jobs.get()
        done.put(torch.mm(a, b))

    threading.Thread(target=worker, daemon=True).start()

    def forward(a, b):
        jobs.put((a, b))
        return done.get().clone()

    mode, hidden = _run(forward, torch.randn(32, 64), torch.randn(64, 48))
    assert [n for n, _ in hidden] == ["aten::mm"]
    assert sum(w for _, w in hidden) == 2 * 32 * 64 * 48
    assert mode.work == 0


def test_hidden_matmul_counts_flops():
    def forward(a, b):
        with torch._C._DisableTorchDispatch():
            return torch.nn.functional.linear(a, b)

    _, hidden = _run(forward, torch.randn(32, 64), torch.randn(48, 64))
    assert sum(w for _, w in hidden) == 2 * 32 * 64 * 48  # the addmm below linear, as op_work counts it


@pytest.mark.parametrize("name,forward,args,flops", [
    ("linear with a bias", lambda x, w, b: torch.nn.functional.linear(x, w, b),
     (torch.randn(32, 64), torch.randn(48, 64), torch.randn(48)), 2 * 32 * 64 * 48),
    ("baddbmm", torch.baddbmm, (torch.randn(4, 8, 16), torch.randn(4, 8, 32), torch.randn(4, 32, 16)), 2 * 4 * 8 * 32 * 16),
    ("conv2d, same padding", lambda x, w: torch.nn.functional.conv2d(x, w, padding=1),
     (torch.randn(2, 8, 16, 16), torch.randn(4, 8, 3, 3)), 2 * 2 * 4 * 16 * 16 * 8 * 9),
])
def test_hidden_ops_with_scalar_arguments_count_their_flops(name, forward, args, flops):
    """The profiler records a scalar argument (addmm's beta, alpha) as an empty shape: read as a tensor it
    broke the FLOP formula, and the fallback (largest input) counted a biased layer 100-1000x too low."""
    def hidden_forward(*a):
        with torch._C._DisableTorchDispatch():
            return forward(*a)

    _, hidden = _run(hidden_forward, *args)
    assert sum(w for _, w in hidden) == flops, (name, hidden)


def test_a_profiler_that_cannot_start_leaves_the_forward_alone(monkeypatch):
    """Without privileges the profiler failed to start; that must cost the hidden-work evidence only, never
    the forward (a failed accounting forward is a `torch_compute` verdict on the candidate)."""
    import torch.profiler

    def broken(*a, **k):
        raise RuntimeError("Invalid argument")

    monkeypatch.setattr(torch.profiler, "profile", broken)
    mode = PoisonMode()
    with accounted(mode) as hidden:
        out = torch.randn(8, 8).clone()
    assert out.shape == (8, 8) and hidden.ops == [] and "did not start" in hidden.error
    with pytest.raises(ZeroDivisionError):  # the block's own failure still passes through
        with accounted(PoisonMode()):
            1 / 0


class _Sneaky(torch.Tensor):
    """A wrapper subclass whose every op computes relu of the wrapped tensor (inside the op the mode handled)."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return torch.relu(args[0].elem)


def test_compute_inside_a_glue_op_the_mode_saw_is_hidden_work():
    """`clone` is glue to the mode (not poisoned, not counted): what its implementation computed is not."""
    _, hidden = _run(lambda x: _Sneaky(x).clone(), torch.randn(64, 256))
    assert [n for n, _ in hidden] == ["aten::relu"]


def test_honest_glue_and_visible_compute_are_not_hidden():
    def forward(x, w):
        y = x.t().contiguous().view(-1).clone().view(x.shape[1], x.shape[0])
        buf = torch.empty(4, *y.shape)
        buf.copy_(y.expand(4, *y.shape))
        out = buf.sum(0)  # a split-K epilogue: seen by the mode (its own work), not hidden
        z = torch.nn.functional.linear(x, w)
        return out, z, x.size(0), torch.result_type(x, w), x.is_contiguous()

    mode, hidden = _run(forward, torch.randn(32, 64), torch.randn(16, 64))
    assert hidden == []
    assert mode.work > 0


def test_verdict_names_the_hidden_ops():
    msg = torch_verdict(None, 100, 100, hidden=["aten::clamp"])
    assert msg is not None and "aten::clamp" in msg
    assert torch_verdict(None, 10, 100, hidden=["aten::clamp"]) is None


# --- end to end: the red team's fixtures -------------------------------------------------------------------

@pytest.fixture(scope="module")
def strict_gym(tmp_path_factory, make_config):
    ev = Evaluator(make_config(tmp_path_factory.mktemp("kg-hidden"), checks="strict"))
    yield ev
    ev.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name,problem", HIDDEN_CHEATS)
def test_hidden_torch_work_is_torch_compute(strict_gym, name, problem):
    p = load_problem_file(FIXTURES / "problems" / f"{problem}.py")
    cand = Candidate(problem_id=p.id, code=(CHEATS_DIR / f"{name}.py").read_text(), backend="triton")
    r = strict_gym.evaluate(p, cand, seed=2)
    assert "torch_compute" in r.flags, (r.flags, r.feedback)


def test_a_profiler_switched_off_inside_the_forward_is_tampering():
    """Switching the profiler off hides whatever runs after it; the accounting's marks at both ends of the
    block are then missing from what it recorded."""
    def forward(x):
        torch.autograd._disable_profiler()
        with torch._C._DisableTorchDispatch():
            return x.clamp(min=0)

    with accounted(PoisonMode()) as clean:
        torch.randn(8, 8).clone()
    assert clean.tampered == ""
    with accounted(PoisonMode()) as hidden:
        forward(torch.randn(64, 256))
    assert "switched off" in hidden.tampered and hidden.ops == []  # the clamp after it went unrecorded


def test_the_profilers_own_cost_is_reported_for_the_audit_wall():
    """The audit round compares its wall with the scored rounds' (audit.WATCHED_RATIO); the profiler's start,
    stop, reading and per-event callbacks are the evaluator's cost, reported so the audit can take them off."""
    from davinci.kernelgym.hidden import PROFILED_OP_MS

    mode = PoisonMode()
    with accounted(mode) as hidden:
        x = torch.randn(16, 16)
        for _ in range(50):
            x = x.t().contiguous()
    overhead = hidden.overhead_ms  # reads the events on first use
    assert hidden.events >= 50
    assert overhead >= PROFILED_OP_MS * hidden.events > 0
