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


DEFAULT_BLOCK = 64
SHAPE = tl.constexpr((1, 2))


@triton.jit
def _global_default(x_ptr, n, BLOCK: tl.constexpr = DEFAULT_BLOCK):
    offs = tl.arange(0, BLOCK) * SHAPE[0]
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _function_default(x_ptr, BLOCK: tl.constexpr, ACT: tl.constexpr = _python):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(x_ptr + tl.arange(0, BLOCK), ACT(x))


def test_a_global_in_a_default_and_a_constexpr_tuple_pass_as_on_a_gpu(state):
    """Triton's code generator reads globals freely in parameter defaults, and a constexpr global of a tuple."""
    assert source_error(_global_default, {}, state) is None


def test_a_plain_function_as_a_default_or_a_constexpr_argument_is_refused(state):
    """A Python function handed to the kernel as a constexpr ran NumPy on the loaded block
    (c2_fb_rt8_constexpr_param_fn_relu): refused as a default and as a launch argument; a @jit one is checked."""
    from davinci.kernelgym.kernelsource import argument_error

    error = source_error(_function_default, {}, state)
    assert error is not None and "default" in error, error
    error = argument_error(_try_first, (None,), {"BLOCK": _python}, {}, state)
    assert error is not None and "argument BLOCK of kernel _try_first is a builtins.function" in error, error
    assert argument_error(_try_first, (None,), {"BLOCK": 16}, {}, state) is None
    error = argument_error(_try_first, (None,), {"BLOCK": _handle}, {}, state)  # a @jit one: its source checked
    assert error is not None and "attribute `.handle`" in error, error


def test_a_subclass_of_a_number_or_a_dtype_is_refused(state):
    from davinci.kernelgym.kernelsource import argument_error

    class Liar(float):
        def __repr__(self) -> str:
            return "0.0"

    error = argument_error(_try_first, (Liar(0.5),), {"BLOCK": 16}, {}, state)
    assert error is not None and "Liar" in error, error
    assert argument_error(_try_first, ((True, 1.0, "s", tl.float32),), {"BLOCK": 16}, {}, state) is None
