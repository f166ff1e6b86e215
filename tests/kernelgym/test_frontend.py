"""Triton's GPU front end run on interpreted kernels (`frontend.frontend_error`): the CPU evaluator runs only what
would compile for a GPU. A kernel body that calls plain Python or reads a non-constexpr global is refused (the red
team's cheats_v2/c2_fb_rt2_transient_scratch and c2_fb_rt2_kernel_global_block hid NumPy there); honest kernels,
@jit helpers included, are not; an argument type the check cannot map skips it rather than refusing."""

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
    frontend_error(_calls_python, (x, out, 64), {"BLOCK": 64}, cache)
    frontend_error(_calls_python, (x, out, 128), {"BLOCK": 64}, cache)  # same types and constants
    frontend_error(_calls_python, (x, out, 64), {"BLOCK": 32}, cache)   # another constant
    assert len(cache) == 2


def test_an_argument_type_it_cannot_map_skips_the_check():
    x, out = _args()
    assert frontend_error(_calls_python, (x, out, (1, 2)), {"BLOCK": 64}, {}) is None
