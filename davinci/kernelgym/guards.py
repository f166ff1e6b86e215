"""Evidence collected inside the candidate's process by the harness (trusted code, untrusted neighbour).

Everything here is captured *before* the candidate is imported and re-checked after it ran:
- `capture()` / `changed()`: identities of the functions the harness and the timers rely on (clocks,
  events, synchronize, comparison helpers, nn.Module.__call__, os._exit, the socket and json functions,
  Triton's launch entry points). A candidate that reassigns any of them is reported by label. `capture()` also
  seals the harness's namespaces (`seals.py`, called from the integrity request as `captured["seals"]()`): a write
  to one that was undone before integrity is reported too.
- `global_state()`: numerics and speed flags (TF32, cuDNN benchmark/deterministic, matmul precision,
  default dtype, CPU threads). Flipping one makes the candidate's torch ops faster or less precise than
  the baseline's, which runs in a clean process.
- `thread_counts()`: Python threads and native threads (/proc/self/task) around calls.
- `LaunchRecorder`: which Triton kernels were launched during a call (JITFunction.run and, on the CPU,
  the interpreter's InterpretedFunction.run, plus `triton.knobs.runtime.launch_enter_hook` on the GPU),
  and on the CPU how long they ran (the time-coverage proxy); during each timed call, what each launch
  through those entries was given, so that it can be run again after the call (replay.py).
- `poison_cached_blocks(device, byte)`: fill every free block of the CUDA caching allocator with `byte`
  (0xFF is NaN for every float type), so an output that reads stale memory shows garbage.
"""

from __future__ import annotations

import builtins
import json
import os
import socket
import threading
import time
# bound when the harness imports this module, before a candidate can rebind time.perf_counter
from time import perf_counter as _clock
from typing import Any, Callable

import torch

from davinci.kernelgym import seals


def _triton_attr(path: str) -> Callable[[], Any]:
    def get() -> Any:
        if path == "jit.run":
            from triton.runtime.jit import JITFunction

            return JITFunction.run
        if path == "interp.run":
            from triton.runtime.interpreter import InterpretedFunction

            return InterpretedFunction.run
        if path == "interp.store":
            from triton.runtime.interpreter import InterpreterBuilder

            return InterpreterBuilder.create_masked_store
        import triton

        return triton.knobs.runtime.launch_enter_hook

    return get


WATCHED: dict[str, Callable[[], Any]] = {
    "time.perf_counter": lambda: time.perf_counter,
    "time.perf_counter_ns": lambda: time.perf_counter_ns,
    "time.time": lambda: time.time,
    "time.monotonic": lambda: time.monotonic,
    "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
    "torch._C._cuda_synchronize": lambda: getattr(torch._C, "_cuda_synchronize", None),
    "torch.cuda.Event": lambda: torch.cuda.Event,
    "torch.cuda.Event.record": lambda: torch.cuda.Event.record,
    "torch.cuda.Event.elapsed_time": lambda: torch.cuda.Event.elapsed_time,
    "torch.cuda.Event.synchronize": lambda: torch.cuda.Event.synchronize,
    "torch.cuda.current_stream": lambda: torch.cuda.current_stream,
    "torch.cuda.Stream": lambda: torch.cuda.Stream,
    "torch.allclose": lambda: torch.allclose,
    "torch.equal": lambda: torch.equal,
    "torch.testing.assert_close": lambda: torch.testing.assert_close,
    "torch.nn.Module.__call__": lambda: torch.nn.Module.__call__,
    "torch.nn.Module._call_impl": lambda: torch.nn.Module._call_impl,
    "torch.manual_seed": lambda: torch.manual_seed,
    "torch.Tensor.data_ptr": lambda: torch.Tensor.data_ptr,
    "builtins.type": lambda: builtins.type,
    "builtins.isinstance": lambda: builtins.isinstance,
    "os._exit": lambda: os._exit,
    "os.write": lambda: os.write,
    "socket.socket.send": lambda: socket.socket.send,
    "socket.socket.recv_into": lambda: socket.socket.recv_into,
    "json.dumps": lambda: json.dumps,
    "json.loads": lambda: json.loads,
    "threading.Thread.start": lambda: threading.Thread.start,
    "triton.JITFunction.run": _triton_attr("jit.run"),
    "triton.InterpretedFunction.run": _triton_attr("interp.run"),
    "triton.InterpreterBuilder.create_masked_store": _triton_attr("interp.store"),
    "triton.knobs.runtime.launch_enter_hook": _triton_attr("hook"),
}
_MISSING = object()


def _get(getter: Callable[[], Any]) -> Any:
    try:
        return getter()
    except Exception:
        return _MISSING


def c_entry(fn: Any) -> tuple[int, int] | None:
    """(PyMethodDef address, C function pointer) behind a builtin function, read from the object's memory
    (PyCFunctionObject.m_ml at offset 16, PyMethodDef.ml_meth at offset 8 on 64-bit CPython). A candidate
    that rewrites the C pointer through ctypes keeps the Python object's identity; this sees the change."""
    import ctypes
    import types

    if not isinstance(fn, types.BuiltinFunctionType) or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        m_ml = ctypes.c_void_p.from_address(id(fn) + 16).value
        return (m_ml, ctypes.c_void_p.from_address(m_ml + 8).value) if m_ml else None
    except (ValueError, OSError):
        return None


def capture() -> dict[str, Any]:
    out = {label: _get(getter) for label, getter in WATCHED.items()}
    # the C entry points of the watched builtins (a clock whose C pointer was swapped keeps its identity)
    out.update({f"cfn:{label}": (fn, c_entry(fn)) for label, fn in list(out.items()) if c_entry(fn) is not None})
    # the code objects of the watched Python functions too: a swapped __code__ keeps the identity
    out.update({f"code:{label}": (fn, fn.__code__) for label, fn in list(out.items()) if hasattr(fn, "__code__")})
    out.update(_harness_functions())
    out.update(_shared_tables())
    # every write to the harness's namespaces from here on, even one undone before integrity (seals.py); the
    # integrity request calls it from this dict, not through this module
    out["seals"] = seals.seal()
    return out


def _shared_tables() -> dict[str, Any]:
    """What the harness shares with the candidate and looks up at run time, as it is before the candidate is
    imported: every attribute of torch.Tensor and of its C base (`shared:Tensor.<name>` -> value), torch's FLOP
    formula table (`shared:flops.<op>` -> (formula, __code__)) and the functions of its module, the Triton
    interpreter's (`_interpreter_tables`) and `hashlib.blake2b`. The harness binds its own
    copies before the candidate runs (accounting.flop_table, first asked here; accounting._fill and
    provenance._blake2b at import); a candidate that changes the shared ones anyway is tampering, whatever it
    reached them through (a dict item, setattr on an alias), and so is having the harness's copy made again."""
    import hashlib

    from torch.utils import flop_counter
    from torch.utils.flop_counter import flop_registry

    from davinci.kernelgym.accounting import flop_table

    out: dict[str, Any] = {"shared:hashlib.blake2b": hashlib.blake2b, "shared:accounting.flop_table": flop_table()}
    for cls in (torch.Tensor, torch._C.TensorBase):
        out.update({f"shared:{cls.__name__}.{name}": value for name, value in list(vars(cls).items())})
    out.update({f"shared:flops.{op}": (fn, getattr(fn, "__code__", None)) for op, fn in list(flop_registry.items())})
    # the formulas look their helpers up in their module's dict (`get_shape`: c2_hp_rt7_flop_globals_rowsum)
    out.update({f"shared:flop_counter.{name}": value for name, value in list(vars(flop_counter).items())
                if callable(value)})
    out.update(_interpreter_tables())
    return out


_INTERP_OBJECTS = ("interpreter_builder", "interpreter_semantic")
_PER_LAUNCH = frozenset({"grid_dim", "grid_idx"})  # the builder's instance data each interpreted launch sets


def _interpreter_tables() -> dict[str, Any]:
    """The Triton interpreter's shared objects (every CPU launch runs through them): its module's functions and
    classes and its one builder and semantic object (`shared:interp.<name>`), the attributes of the classes that
    run a launch (`shared:<Class>.<name>`) and the two objects' instance attributes (`shared:<object>.<name>`).
    A method set on the builder instance shadows its class's, the harness's load and store recording among them
    (cheats_v2/c2_fb_rt7_builder_instance_load_relu)."""
    try:
        from triton.runtime import interpreter
    except Exception:  # no Triton: nothing interpreted
        return {}
    out: dict[str, Any] = {f"shared:interp.{name}": value for name, value in list(vars(interpreter).items())
                           if callable(value) or name in _INTERP_OBJECTS}
    # the modules its builder computes with: the C helpers (`_interpreter.load`, cheats_v2/c2_fb_rt8_c_helper_load_relu)
    # and NumPy's functions
    for label, module in (("interp_c", getattr(interpreter, "_interpreter", None)), ("numpy", getattr(interpreter, "np", None))):
        if module is not None:
            out.update({f"shared:{label}.{name}": value for name, value in list(vars(module).items()) if callable(value)})
    objects = [getattr(interpreter, name, None) for name in _INTERP_OBJECTS]
    for cls in (interpreter.InterpreterBuilder, interpreter.GridExecutor, interpreter.InterpretedFunction,
                getattr(interpreter, "TensorHandle", interpreter.GridExecutor), type(objects[1])):
        out.update({f"shared:{cls.__name__}.{name}": value for name, value in list(vars(cls).items())})
    for label, obj in zip(_INTERP_OBJECTS, objects):
        out.update({f"shared:{label}.{name}": value for name, value in list(getattr(obj, "__dict__", {}).items())
                    if name not in _PER_LAUNCH})
    return out


def _shared_changed(captured: dict[str, Any]) -> list[str]:
    """Labels of `_shared_tables` entries changed or removed since `captured` (a FLOP formula swapped, its code
    too), and of torch.Tensor attributes added in front of its C base's."""
    now = _shared_tables()
    bad = []
    for label, then in ((k, v) for k, v in captured.items() if k.startswith("shared:")):
        current = now.get(label, _MISSING)
        same = current is then if not isinstance(then, tuple) else (
            isinstance(current, tuple) and all(a is b for a, b in zip(current, then)))
        if not same:
            bad.append(label.removeprefix("shared:"))
    # added since: a torch.Tensor attribute in front of its C base's (a shadowed method). A FLOP formula added is
    # not reported: torch's own modules register more when a feature is first used (an honest torch.compile or
    # FlexAttention), and the harness counts with its own copy (accounting.flop_table), which never sees one
    base = vars(torch._C.TensorBase)
    bad += [f"{label.removeprefix('shared:')} (added)" for label in now
            if label not in captured and label.startswith("shared:Tensor.") and label[len("shared:Tensor."):] in base]
    # added to the interpreter's classes or its builder and semantic objects: nothing of Triton's own adds any
    interp = tuple(f"shared:{name}." for name in (*_INTERP_OBJECTS, "InterpreterBuilder", "GridExecutor",
                                                   "InterpretedFunction", "TensorHandle", "TritonSemantic"))
    bad += [f"{label.removeprefix('shared:')} (added)" for label in now if label not in captured and label.startswith(interp)]
    return bad


def _harness_functions() -> dict[str, Any]:
    """Every function and method of the evaluator's own modules loaded in this process, with its code
    object: `harness:<module>.<qualname>` -> (function, __code__). A candidate that rebinds a method of the
    harness (the timer, the request handlers, the launch recorder) or swaps a function's __code__ shows up
    here by label, whatever it reached the object through."""
    import sys
    import types

    out: dict[str, Any] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("davinci.kernelgym") or module is None:
            continue
        for attr, obj in list(vars(module).items()):
            if isinstance(obj, types.FunctionType) and obj.__module__ == name:
                out[f"harness:{name}.{attr}"] = (obj, obj.__code__)
            elif isinstance(obj, type) and obj.__module__ == name:
                for meth, fn in list(vars(obj).items()):
                    if isinstance(fn, types.FunctionType):
                        out[f"harness:{name}.{attr}.{meth}"] = (fn, fn.__code__)
    return out


def _watched_attrs(obj: Any) -> dict[str, Any]:
    """The attributes of a harness object whose identity must not change: callables (saved clocks,
    synchronize, exit) and the harness's own objects (its timer, recorder, channel)."""
    out = {}
    for name, value in list(getattr(obj, "__dict__", {}).items()):
        if callable(value) or type(value).__module__.startswith("davinci.kernelgym"):
            out[name] = value
    return out


def capture_objects(objects: dict[str, Any]) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Identities of the watched attributes of live harness objects (`label` -> (object, {attr: value}))."""
    return {label: (obj, _watched_attrs(obj)) for label, obj in objects.items()}


def objects_changed(captured: dict[str, tuple[Any, dict[str, Any]]]) -> list[str]:
    """`label.attr` of every watched attribute now bound to another object (or removed), and of every instance
    attribute added since that shadows one of its class's (a method, a property): a candidate that found the
    harness through frames or gc and swapped its saved clock, or bound its own `op_time` on the instance in
    front of the class's, shows up here."""
    bad = []
    for label, (obj, attrs) in captured.items():
        now = getattr(obj, "__dict__", {})
        bad += [f"{label}.{name}" for name, value in attrs.items() if now.get(name, _MISSING) is not value]
        bad += [f"{label}.{name} (shadows {type(obj).__name__}.{name})" for name in list(now)
                if name not in attrs and any(name in vars(k) for k in type(obj).__mro__[:-1])]
    return bad


def changed(captured: dict[str, Any]) -> list[str]:
    """Labels whose current object is not the one captured before the candidate was imported."""
    now = _harness_functions()
    bad = [label for label, obj in captured.items() if label in WATCHED and _get(WATCHED[label]) is not obj]
    for label, (fn, entry) in ((k, v) for k, v in captured.items() if k.startswith("cfn:")):
        if c_entry(fn) != entry:
            bad.append(f"{label.removeprefix('cfn:')} (its C function pointer)")
    for label, (fn, code) in ((k, v) for k, v in captured.items() if k.startswith("code:")):
        if getattr(fn, "__code__", None) is not code:
            bad.append(f"{label.removeprefix('code:')}.__code__")
    for label, (fn, code) in ((k, v) for k, v in captured.items() if k.startswith("harness:")):
        current = now.get(label)
        if current is None or current[0] is not fn or fn.__code__ is not code:
            bad.append(label.removeprefix("harness:"))
    return bad + _shared_changed(captured)


_STATE: dict[str, Callable[[], Any]] = {
    "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "cudnn.benchmark": lambda: torch.backends.cudnn.benchmark,
    "cudnn.deterministic": lambda: torch.backends.cudnn.deterministic,
    "cudnn.enabled": lambda: torch.backends.cudnn.enabled,
    "matmul.fp16_reduced": lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    "matmul.bf16_reduced": lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    "float32_matmul_precision": torch.get_float32_matmul_precision,
    "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
    "default_dtype": lambda: str(torch.get_default_dtype()),
    "num_threads": torch.get_num_threads,
}


def global_state() -> dict[str, Any]:
    out = {}
    for name, getter in _STATE.items():
        value = _get(getter)
        out[name] = None if value is _MISSING else value
    return out


def state_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    return {k: [before[k], after.get(k)] for k in before if before[k] != after.get(k)}


def thread_counts() -> tuple[int, int]:
    """(Python threads, native threads of this process)."""
    try:
        native = len(os.listdir("/proc/self/task"))
    except OSError:
        native = -1
    return threading.active_count(), native


def _resolved_grid(kernel: Any, args: tuple, kwargs: dict) -> Any:
    """An interpreted launch's grid function called here, before the launch's checks, on a dict of the kernel's
    bound arguments (as a GPU launch calls it), and the grid it returns launched instead. The interpreter would call
    it inside the launch, after every check and with the very dict the body then runs with: a grid that wrote the
    answer into it (cheats_v2/c2_fb_rt8_grid_writes_args_hinge), or rebound a global the checked body names, ran
    where nothing looks. A kernel without a Python function is left as it is."""
    import inspect

    fn = getattr(kernel, "fn", None)
    if not callable(fn):
        return kwargs["grid"]
    signature = inspect.signature(fn)
    bound = signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
    bound.apply_defaults()
    grid = kwargs["grid"](dict(bound.arguments))
    return tuple(grid) if isinstance(grid, (tuple, list)) else grid


def _hook_error(kernel: Any) -> str | None:
    """A pre-run hook on an interpreted kernel (Triton's public `add_pre_run_hook`) is Python that runs inside the
    launch, after the CPU record copied the arguments and before the kernel's loads: it could write the answer the
    kernel then copies (cheats_v2/c2_fb_rt7_pre_run_hook_relu). Nothing of Triton's or torch's adds one. Any list
    but an empty built-in one is refused (a list subclass can report itself empty and still yield hooks)."""
    hooks = getattr(kernel, "pre_run_hooks", None)
    if hooks is None or (type(hooks) is list and list.__len__(hooks) == 0):
        return None
    return "it has a pre-run hook (add_pre_run_hook): Python that runs inside the launch, which the CPU record cannot see"


class LaunchRecorder:
    """Records Triton launches while `active` (see the module docstring)."""

    def __init__(self) -> None:
        self.active = False
        self.names: list[str] = []
        self.kernel_s = 0.0
        self.installed: list[str] = []
        self.total = 0  # every launch since install, recording or not (accounting.PoisonMode reads it)
        self.provenance: Any = None  # provenance.Provenance during the CPU accounting forward
        self.refused: list[str] = []  # interpreted kernels Triton's GPU front end refused (frontend.py)
        self.frontend_s = 0.0  # time spent lowering them (the evaluator's, taken off the forward's clock)
        self._frontend: dict = {}
        # the launches of the timed call under way (worker._counting sets a list): (entry, kernel, args, kwargs)
        # with the entry bound before the candidate was imported, for the launch replay (replay.py)
        self.capture: list | None = None

    def count(self) -> int:
        return self.total

    def start(self) -> None:
        self.names, self.kernel_s, self.active = [], 0.0, True

    def stop(self) -> tuple[list[str], float]:
        self.active = False
        return list(dict.fromkeys(self.names)), self.kernel_s * 1e3

    def _wrap(self, cls: Any, label: str) -> None:
        original, rec, perf = cls.run, self, time.perf_counter
        interpreted = label == "interpreter"
        if interpreted:  # what runs is the kernel's own source (frontend.Rewrites), in replays too
            from davinci.kernelgym.frontend import Rewrites, reset_language

            rewrites, unpinned = Rewrites(), original

            def original(fn_self: Any, *args: Any, **kwargs: Any) -> Any:
                if not kwargs.get("warmup"):
                    rewrites.pin(fn_self)
                    state = rec._frontend.get("language")
                    if state is not None:  # the body runs against triton.language as the checks judged it
                        reset_language(state)
                return unpinned(fn_self, *args, **kwargs)

        def run(fn_self: Any, *args: Any, **kwargs: Any) -> Any:
            # asked once, as a plain bool: an object whose truth depends on who asks made the checks skip a launch
            # the interpreter then ran (cheats_v2/c2_fb_rt8_warmup_truthy_skip_relu)
            if "warmup" in kwargs:
                kwargs["warmup"] = bool(kwargs["warmup"])
            if interpreted and not kwargs.get("warmup") and callable(kwargs.get("grid")):
                kwargs["grid"] = _resolved_grid(fn_self, args, kwargs)  # before the checks: no candidate code after
            rec.total += 1
            if rec.capture is not None and not kwargs.get("warmup"):
                rec.capture.append((original, fn_self, args, kwargs))
            if interpreted and not kwargs.get("warmup"):
                rec._front_end(fn_self, args, kwargs)
            prov = rec.provenance
            if prov is not None and not kwargs.get("warmup"):  # what the kernel reads, vouched for (provenance.py)
                prov.before_launch(fn_self, args, kwargs)
                try:
                    return timed(fn_self, *args, **kwargs)
                finally:
                    prov.after_launch(fn_self)
            return timed(fn_self, *args, **kwargs)

        def timed(fn_self: Any, *args: Any, **kwargs: Any) -> Any:
            if not rec.active or kwargs.get("warmup"):
                return original(fn_self, *args, **kwargs)
            rec.names.append(getattr(getattr(fn_self, "fn", None), "__name__", type(fn_self).__name__))
            t0 = perf()
            try:
                return original(fn_self, *args, **kwargs)
            finally:
                rec.kernel_s += perf() - t0

        cls.run = run
        self.installed.append(label)

    def _front_end(self, kernel: Any, args: tuple, kwargs: dict) -> None:
        """On the CPU: a kernel Triton's GPU front end refuses (frontend.py, kernelsource.py), or one with a pre-run
        hook, does not run."""
        from davinci.kernelgym.frontend import FrontendRefused, frontend_error
        from davinci.kernelgym.kernelsource import argument_error

        t0 = _clock()
        try:
            facts, state = self._frontend.setdefault("sources", {}), self._frontend.get("language")
            error = (_hook_error(kernel) or argument_error(kernel, args, kwargs, facts, state)
                     or frontend_error(kernel, args, kwargs, self._frontend))
        finally:
            self.frontend_s += _clock() - t0
        if error:
            name = getattr(getattr(kernel, "fn", None), "__name__", "kernel")
            self.refused.append(f"{name}: {error}")
            raise FrontendRefused(f"kernel {name} is not run on the CPU (Triton's compiler would refuse it on a GPU, or "
                                  f"it runs Python inside the launch): {error}")

    def _hook(self, metadata: Any) -> None:
        self.total += 1
        if self.active:
            data = getattr(metadata, "data", metadata)
            name = data.get("name") if isinstance(data, dict) else None
            self.names.append(str(name or "triton_kernel"))

    def install(self, cuda: bool) -> list[str]:
        try:
            from triton.runtime.jit import JITFunction

            self._wrap(JITFunction, "jit")
            from triton.runtime.interpreter import InterpretedFunction

            from davinci.kernelgym.frontend import language_state

            self._frontend = {"language": language_state()}  # before the candidate, before anything interpreted
            self._wrap(InterpretedFunction, "interpreter")
        except Exception:
            return self.installed
        if cuda:
            try:
                import triton

                chain = triton.knobs.runtime.launch_enter_hook
                if hasattr(chain, "add"):
                    chain.add(self._hook)
                else:
                    triton.knobs.runtime.launch_enter_hook = self._hook
                self.installed.append("launch_enter_hook")
            except Exception:
                pass
            self._wrap_graph_replay()
        return self.installed

    def _wrap_graph_replay(self) -> None:
        """A CUDA graph replay re-runs the kernels captured in it without a Triton launch: it moves `total` too,
        so a candidate that captured its own kernels (or runs under torch.compile's CUDA graphs) launches in
        every timed call as far as the per-call count goes (what ran is the profiler's to say)."""
        try:
            graph_cls = torch.cuda.CUDAGraph
            original, rec = graph_cls.replay, self

            def replay(graph: Any, *args: Any, **kwargs: Any) -> Any:
                rec.total += 1
                return original(graph, *args, **kwargs)

            graph_cls.replay = replay
            self.installed.append("cuda_graph_replay")
        except Exception:
            pass


def poison_cached_blocks(device: str, byte: int) -> int:
    """Fill the caching allocator's free blocks with `byte`; returns the bytes poisoned (0 on the CPU)."""
    if not device.startswith("cuda"):
        return 0
    torch.cuda.synchronize()
    holders = []
    for segment in torch.cuda.memory_snapshot():
        for block in segment.get("blocks", []):
            if block.get("state") == "inactive" and block.get("size", 0) > 0:
                try:
                    holders.append(torch.empty(int(block["size"]), dtype=torch.uint8, device=device))
                except RuntimeError:
                    break
    for h in holders:
        h.fill_(byte & 0xFF)
    torch.cuda.synchronize()
    total = sum(h.numel() for h in holders)
    del holders
    return total
