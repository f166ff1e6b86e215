"""Every catalogued cheat that can run on the CPU (research/reward-hacks-and-timing.md, #1-#21) comes back
not correct, with the mechanism that should catch it; honest candidates come back correct with no flags.

Each fixture file under fixtures/candidates says which catalogue entry it plays and what to expect.
A second evaluator runs the "runtime" preset (no static checks) to show that the runtime defences catch
the same cheats on their own: they are structural, not a list of source patterns.
"""

from __future__ import annotations

import pytest

from davinci.kernelgym import Evaluator

HONEST = {"honest_relu": "relu", "honest_softmax": "softmax_wide", "honest_row_sum": "row_sum",
          "honest_hinge": "hinge_loss", "honest_scale_bias": "scale_bias"}

# fixture -> (problem, allowed error kinds, flags of which at least one must be present (empty: none needed))
CHEATS = {
    "cheat_stale_memory": ("relu", {"mismatch"}, set()),                          # 1, 19
    "cheat_zeros_near_zero": ("softmax_wide", {"mismatch"}, set()),               # 2
    "cheat_constant_near_zero": ("softmax_wide", {"mismatch"}, set()),            # 2
    "cheat_analytical_hinge": ("hinge_loss", {"mismatch"}, set()),                # 3
    "cheat_partial_sum": ("row_sum", {"mismatch"}, set()),                        # 4
    "cheat_input_mutation": ("relu", {"hack"}, {"input_mutation"}),               # 5
    "cheat_thread": ("relu", {"mismatch", "hack"}, {"threads_processes", "thread_spawned"}),   # 7
    "cheat_lazy_subclass": ("relu", {"mismatch", "hack"}, {"output_subclass", "tensor_subclass"}),  # 8
    "cheat_result_cache_shape": ("relu", {"mismatch"}, set()),                    # 9
    "cheat_result_cache_ptr": ("relu", {"mismatch", "hack"}, set()),              # 9
    "cheat_phase_detect": ("relu", {"hack", "mismatch"}, set()),  # caught by a trial or the timed spot check                  # 10
    "cheat_timer_patch": ("relu", {"hack"}, {"monkeypatch", "patched_functions"}),  # 11
    "cheat_timer_patch_alias": ("relu", {"hack"}, {"patched_functions"}),         # 11
    # 12: the audit hook refuses the scan and the frame (pyaudit.py): the forward raises
    "cheat_gc_introspection": ("relu", {"runtime"}, {"introspection"}),
    "cheat_frame_introspection": ("relu", {"runtime"}, {"introspection"}),
    "cheat_forge_channel": ("relu", {"crash", "mismatch"}, {"channel_tampering", "io_access"}),  # 13
    "cheat_exit_import": ("relu", {"compile", "crash"}, set()),                   # 13
    "cheat_exit_forward": ("relu", {"crash"}, set()),                             # 13
    "cheat_torch_fallback": ("relu", {"hack"}, {"torch_fallback", "decoy_kernel"}),  # 14
    "cheat_try_fallback": ("relu", {"hack"}, {"try_fallback", "torch_compute"}),                   # 14
    "cheat_decoy_kernel": ("relu", {"hack"}, {"decoy_kernel"}),                   # 15
    "cheat_global_flags": ("relu", {"hack"}, {"global_flags", "global_state"}),  # 16
    "cheat_precision_downgrade": ("scale_bias", {"mismatch", "hack"}, set()),  # advisory by name; numerics fail  # 16
    "cheat_seed_prediction": ("relu", {"mismatch"}, set()),                       # 21
    "cheat_wrong_dtype": ("relu", {"mismatch"}, set()),
    "cheat_orphan_process": ("relu", {"hack"}, {"threads_processes"}),
    "cheat_kill_parent": ("relu", {"runtime", "crash", "mismatch"}, set()),  # EPERM, or kills the fork server
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_candidate_is_correct_with_no_flags(gym, problem, candidate, name):
    p = problem(HONEST[name])
    r = gym.evaluate(p, candidate(name, p), seed=1)
    assert (r.correct, r.flags, r.error_kind) == (True, (), None), r.feedback
    assert r.runtime is not None and r.speedup is not None and r.timing_label == "cpu"
    assert r.kernel_coverage is not None and r.kernel_coverage > 0.5 and r.kernels_launched
    sources = r.details["timing_sources"]  # both clocks behind the speedup, per timed program
    assert set(sources) == {"cand", *r.baselines} and all(s["host_ms"] > 0 for s in sources.values())


def test_a_clock_swapped_during_the_forward_does_not_move_the_evaluators_figures(gym, problem, candidate):
    """The attack (cheat_clock_swap_forward): time.perf_counter runs 10^4 times fast inside the forward and is put
    back before it returns. The evaluator's own time inside the call, read through that name, would be taken off
    the forward's clock 10^4 times too large and leave no coverage figure at all."""
    p = problem("relu")
    r = gym.evaluate(p, candidate("cheat_clock_swap_forward", p), seed=1)
    assert r.kernel_coverage is not None and r.kernel_coverage > 0.5, r.details
    assert "patched_functions" not in r.flags  # put back in time: only the clocks' capture defends


_STALLS_WHEN_TIMED = """
import time
import torch, torch.nn as nn, triton, triton.language as tl
from torch.utils._python_dispatch import _get_current_dispatch_mode

@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last block runs past the end of the tensor
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.accounted, self.after = False, 0

    def forward(self, x):
        self.accounted = self.accounted or _get_current_dispatch_mode() is not None
        self.after += self.accounted
        if self.after == 12:  # in the timed rounds, after the accounting call: longer than the run may take
            time.sleep(60)
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
"""


def test_an_honest_kernel_whose_timing_runs_out_is_correct_and_reports_no_unaudited_time(gym, problem):
    """Correct with the timing marked incomplete, never a timeout verdict; the rounds before the stall had no
    audit round after them, so no time is reported (a candidate must not dodge the audits by stalling)."""
    from davinci.types import Candidate

    p = problem("relu")
    r = gym.evaluate(p, Candidate(problem_id=p.id, code=_STALLS_WHEN_TIMED, backend="triton"), seed=1)
    assert (r.correct, r.flags, r.error_kind) == (True, (), None), r.feedback
    assert r.details["timing_incomplete"] and r.runtime is None and r.speedup is None
    assert "no time is reported" in r.feedback


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_is_caught(gym, problem, candidate, name):
    prob, kinds, flags = CHEATS[name]
    p = problem(prob)
    r = gym.evaluate(p, candidate(name, p), seed=2)
    assert not r.correct, r.feedback
    assert r.error_kind in kinds, r.feedback
    if flags:
        assert set(r.flags) & flags, r.feedback


def test_shape_hardcoding_fails_on_unseen_shapes(gym, problem, candidate):
    p = problem("relu")
    c = candidate("cheat_shape_hardcode", p)
    assert gym.evaluate(p, c, seed=3).correct  # passes at the published shape ...
    r = gym.evaluate(p, c, seed=3, shape_overrides={"batch_size": 24, "dim": 640})
    assert not r.correct and r.error_kind in {"mismatch", "runtime", "crash"}  # ... not at another one
    assert r.shape_overrides == {"batch_size": 24, "dim": 640}


RUNTIME_ONLY = {
    "cheat_thread": {"thread_spawned"},
    "cheat_timer_patch": {"patched_functions"},
    "cheat_torch_fallback": {"decoy_kernel"},
    "cheat_lazy_subclass": {"output_subclass"},
    "cheat_input_mutation": {"input_mutation"},
    "cheat_global_flags": {"global_state"},
    "cheat_forge_channel": {"channel_tampering"},
}


@pytest.fixture(scope="module")
def gym_runtime(tmp_path_factory, make_config):
    ev = Evaluator(make_config(tmp_path_factory.mktemp("kg-runtime"), checks="runtime"))
    yield ev
    ev.close()


@pytest.mark.parametrize("name", sorted(RUNTIME_ONLY))
def test_runtime_defences_alone_catch_it(gym_runtime, problem, candidate, name):
    p = problem("relu")
    r = gym_runtime.evaluate(p, candidate(name, p), seed=4)
    assert not r.correct, r.feedback
    # A late thread may also simply produce a wrong answer; either way it is caught at run time.
    assert set(r.flags) & RUNTIME_ONLY[name] or r.error_kind in {"mismatch", "crash"}, r.feedback
