"""On the CPU, a kernel is judged only if Triton's own GPU front end would accept it.

The Triton interpreter (`TRITON_INTERPRET=1`, every CPU evaluation) runs a kernel's body as Python: it lets the
body call plain Python functions, read globals and touch NumPy, none of which Triton's compiler accepts on a GPU.
A candidate can hide the work there: a helper called from the kernel writes NumPy's answer into a scratch the
kernel then loads, and wipes it before the launch ends (cheats_v2/c2_fb_rt2_transient_scratch); or it replaces a
loaded block's values with a global array's (c2_fb_rt2_kernel_global_block). No record of loads and stores sees
values enter a register that way.

So before a kernel's first interpreted launch with a given signature, `frontend_error` lowers it the way a GPU
launch would, with Triton's code generator, to TTIR for a CUDA target, on the launch's own argument types and
compile-time constants (no GPU is needed for that step). A kernel the front end refuses gets its error, and the
launch fails with it (`FrontendRefused`): what would not compile for a GPU is not evaluated on the CPU either.

Choices:
  - the interpreter hands the kernel's @jit helpers around as `InterpretedFunction`s; the front end wants
    `JITFunction`s, so the kernel and its helpers are rebuilt as `JITFunction`s over a copy of their globals in
    which each `InterpretedFunction` is swapped for its `JITFunction` (the code objects are the candidate's own);
  - first, `kernelsource.source_error` checks the kernel's source and the values its names have against the code
    generator's rules without lowering (fails closed: an unsupported statement, a name outside its scope rules, the
    interpreter's `.handle`);
  - the lowering then refuses a name the compiler cannot resolve: a plain Python function, a
    global that is not `tl.constexpr`, a module such as NumPy (the compiler's NameError). Any other failure skips
    the lowering's check: lowering in a process where the interpreter has run is not reliable for every op (Triton's own
    `@jit` library functions are interpreted functions there, `tl.zeros` among them), and neither are argument
    types stood in for (float8, complex, tuples: `_STAND_IN`) or a Triton release whose API differs;
  - results are cached per kernel code, argument types and constants (one lowering per kernel and shape class);
  - the interpreter patches `triton.language` while it runs a kernel (and leaves it patched after a @jit helper
    call), so the lowering runs against the attributes taken before the candidate was imported
    (`language_state`, `_pristine`).

    cache = {"language": language_state()}      # before anything is interpreted in the process
    err = frontend_error(kernel, args, kwargs, cache)   # None when accepted or not checkable
"""

from __future__ import annotations

import types
from typing import Any

import torch

_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
           torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8",
           torch.bool: "i1"}
# An argument the mapping does not cover (float8, wider unsigned ints, complex, a tuple) is lowered as a stand-in of
# the same element width: an unused argument of such a type once switched the whole check off. The check refuses
# only names the compiler cannot resolve, which do not depend on argument types; a stand-in that makes the lowering
# fail otherwise skips the check, as any other failure does.
_STAND_IN = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}


class FrontendRefused(RuntimeError):
    """A kernel Triton's GPU front end refuses (raised at its launch on the CPU)."""


def frontend_error(kernel: Any, args: tuple, kwargs: dict, cache: dict) -> str | None:
    """The front end's error for this launch of an interpreted `kernel`, or None (accepted, or not checkable)."""
    fn = getattr(kernel, "fn", None)
    if not isinstance(fn, types.FunctionType):
        return None
    from davinci.kernelgym.kernelsource import source_error

    refused = source_error(kernel, cache.setdefault("sources", {}), cache.get("language"))  # fails closed
    if refused:
        return refused
    try:
        jit = _as_jit(fn, {})
        signature, constexprs = _signature(jit, args, kwargs)
    except _Unsupported:
        return None
    key = (fn.__code__, tuple(signature.items()), tuple(sorted((k, repr(v)) for k, v in constexprs.items())))
    if key not in cache:
        cache[key] = _lower(jit, signature, constexprs, cache.get("language"))
    return cache[key]


class _Unsupported(Exception):
    pass


def _as_jit(fn: types.FunctionType, memo: dict[int, Any]) -> Any:
    """A `JITFunction` of `fn` whose globals see every interpreted @jit function as a `JITFunction`."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if id(fn) in memo:
        return memo[id(fn)]
    import triton.runtime.interpreter as interpreter

    injected = vars(interpreter)  # the interpreter copies its own globals into the kernel's module: not the code's
    shadow = {k: v for k, v in fn.__globals__.items()
              if injected.get(k, _MISSING) is not v or isinstance(v, types.ModuleType)}
    clone = types.FunctionType(fn.__code__, shadow, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__annotations__ = dict(getattr(fn, "__annotations__", {}))
    clone.__qualname__, clone.__module__ = fn.__qualname__, fn.__module__
    try:
        jit = JITFunction(clone)
    except Exception as exc:  # no source to read (code built at run time without a file): not checkable here
        raise _Unsupported(str(exc)) from None
    memo[id(fn)] = jit
    for name in fn.__code__.co_names:
        value = shadow.get(name)
        if isinstance(value, InterpretedFunction) and isinstance(value.fn, types.FunctionType):
            shadow[name] = _as_jit(value.fn, memo)
    return jit


def _signature(jit: Any, args: tuple, kwargs: dict) -> tuple[dict[str, str], dict[str, Any]]:
    """Triton's signature (name -> type) and compile-time constants of one launch."""
    names = list(jit.arg_names)
    values = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
    constexpr = {names[i] for i in getattr(jit, "constexprs", [])}
    signature: dict[str, str] = {}
    constants: dict[str, Any] = {}
    import inspect

    defaults = {n: p.default for n, p in inspect.signature(jit.fn).parameters.items()}
    for name in names:
        if name not in values:
            if defaults.get(name, inspect.Parameter.empty) is inspect.Parameter.empty:
                raise _Unsupported(name)
            values[name] = defaults[name]
        value = values[name]
        if name in constexpr or value is None:
            signature[name], constants[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + _DTYPES.get(value.dtype, _STAND_IN.get(value.element_size(), "i8"))
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32" if -2**31 <= value < 2**31 else "i64"
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:  # a tuple, a descriptor: stood in for (see _STAND_IN)
            signature[name] = "i32"
    return signature, constants


def language_state() -> dict[Any, dict[str, Any]]:
    """The attributes of `triton`, `math`, `triton.language`'s modules, their classes and their objects (dtypes, @jit
    objects; held by identity, `Held`) as they are now. Taken before the candidate is imported and before anything
    is interpreted in the process: the lowering runs against them (`_pristine`), the source check resolves names
    through them (kernelsource.py) and each interpreted launch starts from them (`reset_language`)."""
    import sys

    import triton.language  # noqa: F401 (loads its submodules)

    try:  # the device-library dispatch module kernels import themselves (`from triton.language.extra import libdevice`)
        import triton.language.extra.libdevice  # noqa: F401
    except ImportError:  # an older Triton
        pass

    import math

    import triton

    objs: list[Any] = [triton, math]  # (kernelsource.py resolves dotted names through these as they were)
    held: list[Any] = []
    modules = [m for n, m in list(sys.modules.items()) if n.startswith("triton.language") and m is not None]
    seen: set[int] = set()
    while modules:  # and the submodules reached as attributes (triton.language.extra loads its backends' itself)
        module = modules.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        objs.append(module)
        objs += [v for v in vars(module).values() if isinstance(v, type) and
                 getattr(v, "__module__", "").startswith("triton.language")]
        held += [v for v in vars(module).values() if _an_instance(v)]  # tl.float32, tl.zeros (a @jit object)
        modules += [v for v in vars(module).values() if isinstance(v, types.ModuleType)
                    and v.__name__.startswith("triton.language")]
    state: dict[Any, dict[str, Any]] = {obj: dict(vars(obj)) for obj in dict.fromkeys(objs)}
    state.update({Held(v): dict(vars(v)) for v in held})
    return state


def _an_instance(value: Any) -> bool:
    """An object of Triton's own classes (a dtype, a @jit function object) with attributes of its own."""
    return (not isinstance(value, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType))
            and type(value).__module__.startswith("triton.") and hasattr(value, "__dict__"))


class Held:
    """An object held in `language_state` by identity (a dtype compares equal to others by name)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Held) and other.obj is self.obj


def _held(key: Any) -> Any:
    return key.obj if isinstance(key, Held) else key


def reset_language(state: dict[Any, dict[str, Any]]) -> int:
    """Put the objects of `state` back as it holds them: each attribute changed since set back, each one added since
    removed from a class or an object. Run before each interpreted launch with `language_state()`: the interpreter
    runs a kernel body against the live `triton.language`, while the source check and the lowering judged the state
    taken before the candidate, so a function rebound in it (cheats_v2/c2_fb_rt8_live_tl_rebind_relu) or one set on
    a dtype (c2_fb_rt8_dtype_attr_fn_relu) must not be what runs. The interpreter makes its own patches inside each
    launch, after this. Returns how many attributes it put back."""
    count = 0
    for key, attrs in state.items():
        obj = _held(key)
        live = vars(obj)
        changed = [(n, v) for n, v in attrs.items() if n not in _FIXED and live.get(n, _MISSING) is not v]
        # added to a class or an object is removed; to a module not (the interpreter adds its own names to the
        # modules of Triton's @jit library when it first rewrites one; a name added to a module resolves to nothing
        # in the source check, which reads the captured state)
        added = [] if isinstance(obj, types.ModuleType) else [n for n in list(live) if n not in attrs and n not in _FIXED]
        for name, value in changed:
            try:
                setattr(obj, name, value)
                count += 1
            except (AttributeError, TypeError):  # a read-only slot: left as it is
                pass
        for name in added:
            try:
                delattr(obj, name)
                count += 1
            except (AttributeError, TypeError):
                pass
    return count


class _pristine:
    """While lowering: `triton.language` as it was before the interpreter patched it. The interpreter swaps its
    functions for interpreted ones at each launch and, for a @jit helper called from a kernel, leaves them swapped;
    the code generator must not see those."""

    def __init__(self, state: dict[Any, dict[str, Any]] | None) -> None:
        self.state, self.saved = state or {}, []

    def __enter__(self) -> None:
        for key, attrs in self.state.items():
            obj = _held(key)
            for name, value in attrs.items():
                if name in _FIXED or vars(obj).get(name, _MISSING) is value:
                    continue
                self.saved.append((obj, name, vars(obj).get(name, _MISSING)))
                try:
                    setattr(obj, name, value)
                except (AttributeError, TypeError):  # a read-only slot: left as it is
                    self.saved.pop()

    def __exit__(self, *exc: Any) -> None:
        for obj, name, value in reversed(self.saved):
            if value is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


_MISSING = object()
_FIXED = frozenset({"__dict__", "__weakref__", "__doc__", "__module__", "__qualname__", "__name__", "__spec__",
                    "__loader__", "__package__", "__path__", "__file__", "__cached__", "__builtins__"})


def _lower(jit: Any, signature: dict[str, str], constants: dict[str, Any], state: Any = None) -> str | None:
    """Run Triton's code generator to TTIR for a CUDA target; its CompilationError's text, or None."""
    try:
        from triton._C.libtriton import ir
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia.compiler import CUDABackend
        from triton.compiler import ASTSource
        from triton.compiler.errors import CompilationError
    except Exception:
        return None
    target = GPUTarget("cuda", 90, 32)
    backend = CUDABackend(target)
    import triton

    try:  # the code generator imports gluon lazily, which asserts the interpreter's knob: import it as it stands
        import triton.experimental.gluon.language  # noqa: F401
    except Exception:
        pass
    interpret = triton.knobs.runtime.interpret
    try:
        triton.knobs.runtime.interpret = False  # Triton's helpers skip constexpr wrapping when it is on
        with _pristine(state):
            return _make_ir(jit, signature, constants, target, backend, ir, ASTSource)
    except CompilationError as exc:
        root: BaseException = exc
        while root.__cause__ or root.__context__:
            root = root.__cause__ or root.__context__  # type: ignore[assignment]
        if not isinstance(root, NameError):  # the front end under the interpreter's process state, not the code
            return None
        lines = [ln for ln in str(root).splitlines() if ln.strip()]
        return lines[0][:400] if lines else type(root).__name__
    except Exception:  # the front end's own API or our mapping, not the candidate's code
        return None
    finally:
        triton.knobs.runtime.interpret = interpret


def _make_ir(jit: Any, signature: dict[str, str], constants: dict[str, Any], target: Any, backend: Any, ir: Any,
             ast_source: Any) -> None:
    import inspect

    src = ast_source(jit, signature, constexprs=constants)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    options = backend.parse_options({"enable_fp_fusion": True})  # set: unset warns on every lowering (3.9)
    rest = (options, backend.get_codegen_implementation(options), backend.get_module_map(), context)
    with_target = "target" in inspect.signature(src.make_ir).parameters  # 3.9 takes it first; 3.6 does not
    src.make_ir(target, *rest) if with_target else src.make_ir(*rest)


class Rewrites:
    """What the interpreter runs for a kernel is the kernel's own source, the one `frontend_error` lowers.

    The interpreter runs a kernel (and each @jit helper it calls) as the rewrite its class caches per function
    (`InterpretedFunction.rewritten_fn`, a dict any code in the process can write), so a candidate could have it run
    another body, one that calls plain Python, while the front end checks the clean source
    (cheats_v2/c2_fb_rt6_swapped_rewrite). So before every interpreted launch the harness pins the cache entries of
    the kernel and its helpers to its own rewrites of their source, made once per function with the interpreter's
    rewriter class as bound before the candidate was imported, each entry a fresh function object built from that
    rewrite's parts (the candidate's changes to an earlier one do not carry over). A cache, `rewrite` or `run`
    replaced on the class or set on a kernel is a refusal (`FrontendRefused`).

        rewrites = Rewrites()                      # before the candidate is imported
        rewrites.pin(kernel)                       # before each interpreted launch
    """

    def __init__(self) -> None:
        from triton.runtime import interpreter

        self.cls = interpreter.InterpretedFunction
        self.cache, self.rewrite = self.cls.rewritten_fn, self.cls.rewrite
        self.rewriter = getattr(interpreter, "FunctionRewriter", None)  # (older Triton: the cache entry is dropped)
        self.own: dict[Any, tuple] = {}

    def pin(self, kernel: Any, depth: int = 0) -> None:
        fn = getattr(kernel, "fn", None)
        if not isinstance(fn, types.FunctionType) or depth > 4:
            return
        moved = [n for n in ("rewritten_fn", "rewrite", "run") if n in getattr(kernel, "__dict__", {})]
        if self.cls.rewritten_fn is not self.cache or self.cls.rewrite is not self.rewrite:
            moved.append("the interpreter's own cache or rewrite")
        if moved:
            raise FrontendRefused(f"the interpreter's rewrite of kernel {fn.__name__} was redirected ({', '.join(moved)}): "
                                  "a launch must run the kernel's own source")
        if self.rewriter is None:
            self.cache.pop(fn, None)
        else:
            self.cache[fn] = self._fresh(fn, kernel)
        for name in fn.__code__.co_names:  # the @jit helpers it calls run through the same cache
            helper = fn.__globals__.get(name)
            if isinstance(helper, self.cls) and helper is not kernel:
                self.pin(helper, depth + 1)

    def _fresh(self, fn: types.FunctionType, kernel: Any) -> Any:
        parts = self.own.get(fn)
        if parts is None:
            made = self.rewriter(fn, **(getattr(kernel, "kwargs", None) or {})).rewrite_ast()
            parts = self.own[fn] = (made.__code__, made.__globals__, made.__name__, made.__defaults__,
                                    made.__closure__, made.__kwdefaults__, dict(getattr(made, "__annotations__", {})))
        code, globs, name, defaults, closure, kwdefaults, notes = parts
        body = types.FunctionType(code, globs, name, defaults, closure)
        body.__kwdefaults__, body.__annotations__ = kwdefaults, dict(notes)  # (`tl.constexpr` parameters)
        return body

