"""What a Triton launch runs and the numbers it carries, as the provenance record digests them (provenance.py).

A launch's code digest (`code_digest`) covers the kernel's code and its @jit helpers', their defaults, the numbers
and `tl.constexpr`s among the globals they name, the CPU interpreter's cached rewrite and the compile-time constants
passed; `numbers` finds the numbers in arguments however wrapped, `grid_numbers` those of a grid without calling
it, `plain` a value as digested (no addresses). All of it runs in the candidate's process, bound when the harness
imports it.

    codes.add(code_digest(kernel, args, kwargs, key))
"""

from __future__ import annotations

import inspect
import marshal
import types
from hashlib import blake2b as _blake2b  # bound when the harness imports this, before any candidate code runs
from typing import Any

import numpy as np  # bound at import, never through sys.modules at call time (see provenance.py)


def kernel_name(kernel: Any) -> str:
    return getattr(getattr(kernel, "fn", None), "__name__", type(kernel).__name__)


def kernel_params(kernel: Any) -> list[str]:
    try:
        return list(inspect.signature(kernel.fn).parameters)
    except (TypeError, ValueError, AttributeError):
        return list(getattr(kernel, "arg_names", []) or [])


def code_digest(kernel: Any, args: Any, kwargs: Any, key: bytes) -> bytes:
    """A digest of what a launch runs: the kernel's code object and those of the @jit functions it names
    (recursively), their parameter defaults and the numbers and constants among the module globals they name, the
    function the CPU interpreter actually runs (its cached rewrite of the kernel: code and defaults), and the
    compile-time constants passed (the values of parameters annotated `tl.constexpr`). Data baked into a kernel's
    source per call (code generated at run time), rebound into a `tl.constexpr` global
    (cheats_v2/c2_fb_rt6_constexpr_global_hinge) or into the rewrite's defaults (c2_fb_rt6_constexpr_default_hinge)
    makes it change with the inputs."""
    fn = getattr(kernel, "fn", None)
    h = _blake2b(key=key, digest_size=16)
    seen: set[int] = set()

    def add(f: Any, depth: int) -> None:
        code = getattr(f, "__code__", None)
        if code is None or id(f) in seen or depth > 4:
            return
        seen.add(id(f))
        try:
            h.update(marshal.dumps(code))
        except ValueError:
            h.update(repr(code).encode())
        h.update(repr((plain(getattr(f, "__defaults__", None)), plain(getattr(f, "__kwdefaults__", None)))).encode())
        globs = getattr(f, "__globals__", {})
        for n in code.co_names:
            value = globs.get(n)
            inner = getattr(value, "fn", None)
            if inner is not None and callable(inner):
                add(inner, depth + 1)
            elif type(value).__name__ == "constexpr" or not callable(value) and not isinstance(value, types.ModuleType):
                h.update(f"{n}={plain(value)!r}".encode())  # a number or constant the kernel reads by name
    if fn is not None:
        add(fn, 0)
        rewrites = getattr(kernel, "rewritten_fn", None)  # the interpreter's cache: what a CPU launch runs
        add(rewrites.get(fn) if isinstance(rewrites, dict) else None, 0)
        notes = getattr(fn, "__annotations__", {})
        params = kernel_params(kernel)
        values = dict(zip(params, args)) | dict(kwargs)
        h.update(repr(sorted((p, canonical(plain(values.get(p)))) for p in params
                             if "constexpr" in repr(notes.get(p)))).encode())
    return h.digest()


def plain(value: Any) -> Any:
    """A value as digested: a `tl.constexpr`'s own value (its repr does not show it), numbers and strings by their
    built-in text (`canonical`), containers inside, anything else by type (its repr may hold an address that
    differs between processes)."""
    inner = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
    if inner is None or isinstance(inner, (bool, int, float, str, bytes)) or numpy_scalar(inner):
        return canonical(inner)
    if isinstance(inner, (tuple, list)):
        return tuple(plain(v) for v in inner)
    if isinstance(inner, dict):
        return tuple(sorted((str(k), plain(v)) for k, v in inner.items()))
    return type(inner).__name__


def canonical(value: Any, depth: int = 0) -> Any:
    """`value` as text the candidate's classes cannot choose, for digests: a number or a string by its built-in
    type's own repr (a float subclass whose `__repr__` always says "0.0" carried NumPy's answer past the record:
    cheats_v2/c2_fb_rt8_float_repr_arg_hinge), containers inside; anything else by its type's name."""
    for base in (bool, int, float, str, bytes):
        if isinstance(value, base):
            return f"{base.__name__}:{base.__repr__(value)}"
    if value is None:
        return "None"
    if numpy_scalar(value):
        return f"{type(value).__name__}:{np.ndarray.tobytes(np.array([value], dtype=type(value))).hex()}"
    if isinstance(value, (tuple, list)) and depth < 4:
        return tuple(canonical(v, depth + 1) for v in value)
    if isinstance(value, dict) and depth < 4:
        return tuple(sorted((canonical(k, depth + 1), canonical(v, depth + 1)) for k, v in value.items()))
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def numpy_scalar(value: Any) -> bool:
    """A NumPy scalar of NumPy's own type (a subclass defined elsewhere is not one)."""
    kind = type(value)
    return kind.__module__ == "numpy" and hasattr(kind, "dtype") and kind.__name__ not in ("ndarray", "dtype")


def grid_numbers(grid: Any) -> list[Any]:
    """The numbers a launch's grid holds: a tuple's, or a grid function's (its closure's, its defaults' and the
    module globals it names), without calling it (it is the candidate's code)."""
    if not callable(grid):
        return numbers([grid])
    code = getattr(grid, "__code__", None)
    cells = [c.cell_contents for c in (getattr(grid, "__closure__", None) or ()) if _has_contents(c)]
    named = [getattr(grid, "__globals__", {}).get(n) for n in (code.co_names if code is not None else ())]
    return numbers([*cells, *(getattr(grid, "__defaults__", None) or ()), *named])


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def numbers(values: list[Any], ints: bool = True, depth: int = 0, launch: bool = False) -> list[Any]:
    """The numbers in a launch's or a fill's arguments, inside tuples, lists and dicts too: floats (Python or
    NumPy), with `ints` integers (not bools); with `launch` (a kernel launch's) strings, bytes and bools as well
    (a string argument carried NumPy's answer as its text, cheats_v2/c2_fb_rt8_str_arg_channel_hinge, a tuple of
    bools its bits, c2_fb_rt8_bool_bits_args_hinge)."""
    found = []
    for v in values:
        kind = type(v)
        if isinstance(v, (tuple, list)) and depth < 3:
            found += numbers(list(v), ints, depth + 1, launch)
        elif isinstance(v, dict) and depth < 3:
            found += numbers(list(v.values()), ints, depth + 1, launch)
        elif launch and (isinstance(v, (str, bytes, bool)) or kind.__module__ == "numpy" and "bool" in kind.__name__):
            found.append(v)
        elif isinstance(v, bool) or kind.__module__ == "numpy" and "bool" in kind.__name__:
            continue
        elif isinstance(v, float) or kind.__module__ == "numpy" and "float" in kind.__name__:
            found.append(v)
        elif ints and (isinstance(v, int) or kind.__module__ == "numpy" and "int" in kind.__name__):
            found.append(v)
    return found


# ops whose first argument is written, not read (allocations, fills, copy_'s destination)


# keyword arguments of a launch that configure it (Triton's own), not data
LAUNCH_OPTIONS = frozenset({"grid", "warmup", "num_warps", "num_stages", "num_ctas", "enable_fp_fusion",
                             "maxnreg", "launch_cooperative_grid", "launch_pdl"})


def resolved_grid() -> Any:
    """The grid the interpreter ran the last launch over (its one builder's `grid_dim`, set at every interpreted
    launch from the grid it resolved), read after the launch; None without the interpreter."""
    try:
        from triton.runtime import interpreter
    except Exception:  # no Triton here: no launch either
        return None
    dims = getattr(getattr(interpreter, "interpreter_builder", None), "grid_dim", None)
    try:
        return tuple(int(d) for d in dims) if dims is not None else None
    except (TypeError, ValueError):  # not numbers: its text then, compared like any other
        return repr(dims)[:200]
