"""Triton's GPU front end run on interpreted kernels (`frontend.frontend_error`): the CPU evaluator runs only what
would compile for a GPU. A kernel body that calls plain Python or reads a non-constexpr global is refused (the red
team's cheats_v2/c2_fb_rt2_transient_scratch and c2_fb_rt2_kernel_global_block hid NumPy there); honest kernels,
@jit helpers included, are not; an argument type the mapping does not cover is stood in, and what the interpreter
runs is pinned to the kernel's own source (`Rewrites`)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from davinci.kernelgym.frontend import frontend_error  # noqa: E402

_SCRATCH = {"n": 0}


def _plain_python() -> int:
    return 0


@triton.jit
def _helper(v):
    return tl.maximum(v, 0.0)


@triton.jit
def _honest(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n  # the last block runs past n
    tl.store(out_ptr + offs, _helper(tl.load(x_ptr + offs, mask=m)) * scale, mask=m)


@triton.jit
def _calls_python(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    _plain_python()
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def _reads_global(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK) + _SCRATCH["n"]
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


def _args():
    return torch.zeros(64), torch.zeros(64)


def test_an_honest_kernel_with_a_jit_helper_is_accepted():
    x, out = _args()
    assert frontend_error(_honest, (x, out, 64, 0.5), {"BLOCK": 64}, {}) is None


@pytest.mark.parametrize("kernel", [_calls_python, _reads_global])
def test_a_kernel_body_the_gpu_compiler_refuses_is_refused(kernel):
    x, out = _args()
    error = frontend_error(kernel, (x, out, 64), {"BLOCK": 64}, {})
    assert error and "global" in error


def test_the_verdict_is_cached_per_kernel_and_signature():
    x, out = _args()
    cache: dict = {}
    frontend_error(_honest, (x, out, 64, 0.5), {"BLOCK": 64}, cache)
    frontend_error(_honest, (x, out, 128, 0.25), {"BLOCK": 64}, cache)  # same types and constants
    frontend_error(_honest, (x, out, 64, 0.5), {"BLOCK": 32}, cache)   # another constant
    assert len([key for key in cache if isinstance(key, tuple)]) == 2  # lowerings (beside the source check's facts)


@pytest.mark.parametrize("odd", [(1, 2), torch.zeros(4, dtype=torch.float8_e5m2), torch.zeros(4, dtype=torch.uint32)],
                         ids=["tuple", "float8", "uint32"])
def test_an_argument_type_it_cannot_map_is_stood_in_and_the_check_still_runs(odd):
    """An unused argument of an unmapped type once switched the check off (cheats_v2/c2_fb_rt6_frontend_skip_dtype):
    it is lowered as a stand-in of its width, so a body calling Python is still refused and an honest one is not."""
    x, out = _args()
    assert "global" in (frontend_error(_calls_python, (x, out, odd), {"BLOCK": 64}, {}) or "")
    assert frontend_error(_honest, (x, out, 64, 0.5), {"BLOCK": 64}, {}) is None


def test_a_redirected_rewrite_is_replaced_by_the_kernels_own_and_a_moved_one_refused():
    """The interpreter runs what its cache of rewrites holds for a kernel; `Rewrites.pin` puts the harness's own
    rewrite of the kernel's source there before a launch (cheats_v2/c2_fb_rt6_swapped_rewrite) and refuses a kernel
    whose `rewrite` was moved onto the instance."""
    from davinci.kernelgym.frontend import FrontendRefused, Rewrites
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(_honest, InterpretedFunction):
        pytest.skip("the kernels are not interpreted (TRITON_INTERPRET was off when triton was imported)")
    rewrites = Rewrites()
    InterpretedFunction.rewritten_fn[_honest.fn] = _calls_python.rewrite()  # another body under _honest's function
    rewrites.pin(_honest)
    x, out = torch.arange(-32.0, 32.0), torch.zeros(64)
    _honest[(1,)](x, out, 64, 2.0, BLOCK=64)
    assert torch.equal(out, x.relu() * 2.0)  # _honest's own body ran (the other stores x)
    _calls_python.rewrite = lambda: _honest.rewrite()
    try:
        with pytest.raises(FrontendRefused, match="redirected"):
            rewrites.pin(_calls_python)
    finally:
        del _calls_python.rewrite
