"""The source check before any interpreted launch (`kernelsource.source_error`): it fails closed where lowering
cannot be trusted in the interpreter's process. Each refused kernel is one way a body ran Python on the CPU that a
GPU would never compile (the red team's c2_fb_rt7_frontend_try_skip_relu, c2_fb_rt8_frontend_op_first_relu,
c2_fb_rt8_handle_data_relu); the honest ones use what Triton kernels use (@jit helpers, `tl.zeros`, reductions,
`tl.constexpr` globals, `math` and `triton` at compile time)."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from davinci.kernelgym.frontend import language_state  # noqa: E402
from davinci.kernelgym.kernelsource import source_error  # noqa: E402

SCALE = tl.constexpr(2.0)
PLAIN = 3.0
HIDDEN = tl.constexpr(abs)


def _python(x):
    return x


@triton.jit
def _helper(v):
    return tl.maximum(v, 0.0)


@triton.jit
def _honest(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n  # the last block runs past n
    acc = tl.zeros([BLOCK], tl.float32) + _helper(tl.load(x_ptr + offs, mask=m, other=0.0))
    for _ in tl.static_range(2):
        acc = acc * SCALE + math.pi * 0.0 + triton.cdiv(BLOCK, 2) * 0.0
    tl.store(out_ptr + offs, acc / tl.sum(acc, axis=0).to(acc.dtype), mask=m)


@triton.jit
def _try_first(x_ptr, BLOCK: tl.constexpr):
    try:
        pass
    finally:
        pass
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)


@triton.jit
def _python_call(x_ptr, BLOCK: tl.constexpr):
    z = tl.zeros([BLOCK], tl.float32)
    tl.store(x_ptr + tl.arange(0, BLOCK), _python(z))


@triton.jit
def _handle(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    x.handle.data.clip(0, None, out=x.handle.data)
    tl.store(x_ptr + tl.arange(0, BLOCK), x)


@triton.jit
def _getattr_handle(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    getattr(x, "hand" + "le")
    tl.store(x_ptr + tl.arange(0, BLOCK), x)


@triton.jit
def _plain_global(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), PLAIN)


@triton.jit
def _constexpr_function(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), HIDDEN(tl.load(x_ptr + tl.arange(0, BLOCK))))


@triton.jit
def _calls_bad_helper(x_ptr, BLOCK: tl.constexpr):
    _python_call(x_ptr, BLOCK)


@triton.jit
def _added_to_tl(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.my_relu(tl.load(x_ptr + tl.arange(0, BLOCK))))


@pytest.fixture(scope="module")
def state():
    return language_state()


def test_honest_kernels_and_their_helpers_pass(state):
    assert source_error(_honest, {}, state) is None


@pytest.mark.parametrize("kernel, expected", [
    (_try_first, "`Try` statement"),
    (_python_call, "`_python` is a function"),
    (_handle, "attribute `.handle`"),
    (_getattr_handle, "`getattr`"),
    (_plain_global, "`PLAIN` is a float"),
    (_constexpr_function, "constexpr holding a builtin_function_or_method"),
    (_calls_bad_helper, "kernel _python_call: `_python` is a function"),
])
def test_what_a_gpu_would_not_compile_is_refused(state, kernel, expected):
    error = source_error(kernel, {}, state)
    assert error is not None and expected in error, error


def test_a_function_added_to_triton_language_after_the_capture_is_refused(state, monkeypatch):
    monkeypatch.setattr(tl, "my_relu", _python, raising=False)
    error = source_error(_added_to_tl, {}, state)
    assert error is not None and "`tl.my_relu` is not defined" in error, error


def test_a_global_rebound_between_launches_is_refused_at_the_next(state, monkeypatch):
    facts: dict = {}
    assert source_error(_honest, facts, state) is None
    monkeypatch.setitem(_honest.fn.__globals__, "SCALE", _python)  # same code, so the cached AST facts are reused
    error = source_error(_honest, facts, state)
    assert error is not None and "`SCALE` is a function" in error, error
