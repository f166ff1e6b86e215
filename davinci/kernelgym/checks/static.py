"""Static hack checks: each reads the candidate's AST (never a regex over the whole file) and returns the
reason it flags, or None. Registered in `STATIC_CHECKS` by name; presets in `checks/__init__.py`.

Each check targets a capability a cheat needs, not a known cheat: starting threads or processes, reading
interpreter state (gc, frames, globals), touching files, sockets or file descriptors, exiting early,
reaching native memory (ctypes), rebinding attributes of imported modules (timers, synchronize, Triton
hooks), flipping global numerics flags, side streams and L2-persistence control in the CUDA sources,
tensor subclasses, reusing the reference `Model`, calling every operator the problem asks to replace,
falling back to torch inside an `except`, and defining no custom kernel at all.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable

from davinci.kernelgym.backend import BackendInfo
from davinci.kernelgym.checks.source import Source
from davinci.registry import Registry


@dataclass(frozen=True)
class StaticContext:
    src: Source
    problem: Source | None
    backend: BackendInfo


STATIC_CHECKS: Registry[Callable[[StaticContext], str | None]] = Registry("static check")


def _calls(src: Source) -> list[tuple[str, ast.Call]]:
    return [(src.qualname(n.func) or "", n) for n in ast.walk(src.tree) if isinstance(n, ast.Call)]


def _uses(src: Source, modules: set[str]) -> str | None:
    """First imported module (or imported object) whose root is in `modules`."""
    for name in sorted(src.imported_modules):
        if name.split(".")[0] in modules or name in modules:
            return name
    return None


def _first_call(src: Source, names: set[str]) -> str | None:
    for q, _ in _calls(src):
        if q in names:
            return q
    return None


@STATIC_CHECKS.register("threads_processes")
def threads_processes(ctx: StaticContext) -> str | None:
    mod = _uses(ctx.src, {"threading", "_thread", "multiprocessing", "concurrent", "subprocess", "asyncio", "pty",
                          "torch.multiprocessing", "sched"})
    if mod:
        return f"imports {mod}: work outside the timed call escapes the timer"
    call = _first_call(ctx.src, {f"os.{n}" for n in ("fork", "forkpty", "system", "popen", "spawnl", "spawnv",
                                                     "posix_spawn", "execv", "execve", "execl", "execvp")})
    return f"calls {call}" if call else None


_FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_code", "tb_frame", "gi_frame", "cr_frame", "__globals__",
                "__closure__", "__code__", "__subclasses__", "__builtins__"}
_SYS_STATE = {"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.modules", "sys.gettrace"}


@STATIC_CHECKS.register("introspection")
def introspection(ctx: StaticContext) -> str | None:
    mod = _uses(ctx.src, {"gc", "inspect", "importlib", "dis", "builtins", "__builtin__"})
    if mod:
        return f"imports {mod}: reads interpreter state the evaluator relies on"
    for node in ast.walk(ctx.src.tree):
        if isinstance(node, ast.Attribute):
            if node.attr in _FRAME_ATTRS:
                return f"accesses .{node.attr}"
            if (ctx.src.qualname(node) or "") in _SYS_STATE:
                return f"accesses {ctx.src.qualname(node)}"
        if isinstance(node, ast.Name) and node.id in {"__builtins__", "__import__", "globals", "vars", "eval", "exec"}:
            return f"uses {node.id}"
    return None


@STATIC_CHECKS.register("io_access")
def io_access(ctx: StaticContext) -> str | None:
    mod = _uses(ctx.src, {"socket", "urllib", "http", "requests", "httpx", "ftplib", "smtplib", "pickle", "marshal",
                          "shelve", "shutil", "io", "pathlib", "fcntl", "select", "selectors", "sqlite3", "dbm"})
    if mod:
        return f"imports {mod}: file, socket or descriptor access"
    os_io = {f"os.{n}" for n in ("open", "read", "write", "pipe", "dup", "dup2", "fdopen", "remove", "unlink", "rmdir",
                                 "rename", "replace", "listdir", "scandir", "truncate", "sendfile", "mkfifo")}
    call = _first_call(ctx.src, os_io | {"open", "io.open"})
    if call:
        return f"calls {call}"
    for s in ctx.src.strings():
        if any(p in s for p in ("/proc/", "/dev/fd", "/dev/shm", "/dev/mem")):
            return f"names the path {s[:40]!r}"
    return None


@STATIC_CHECKS.register("process_exit")
def process_exit(ctx: StaticContext) -> str | None:
    mod = _uses(ctx.src, {"signal", "atexit", "faulthandler"})
    if mod:
        return f"imports {mod}"
    call = _first_call(ctx.src, {"sys.exit", "os._exit", "exit", "quit", "os.kill", "os.killpg", "os.abort",
                                 "sys.exit.__call__"})
    return f"calls {call}: ends or signals a process instead of returning a result" if call else None


@STATIC_CHECKS.register("native_escape")
def native_escape(ctx: StaticContext) -> str | None:
    mod = _uses(ctx.src, {"ctypes", "cffi", "mmap", "_ctypes"})
    if mod:
        return f"imports {mod}: raw memory and native calls outside the kernel API"
    call = _first_call(ctx.src, {"torch.ops.load_library", "torch.cuda.cudart"})
    return f"calls {call}" if call else None


def _attr_target(node: ast.AST) -> ast.Attribute | None:
    return node if isinstance(node, ast.Attribute) else None


@STATIC_CHECKS.register("monkeypatch")
def monkeypatch(ctx: StaticContext) -> str | None:
    src = ctx.src
    if _uses(src, {"unittest"}):
        return "imports unittest (mock.patch)"
    for node in ast.walk(src.tree):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and src.qualname(node.func) in {"setattr", "delattr"} and node.args:
            targets = [ast.Attribute(value=node.args[0], attr="?", ctx=ast.Store())]
        for t in targets:
            a = _attr_target(t)
            if a is None or not src.is_imported(a.value) and not src.is_imported(a):
                continue
            q = src.qualname(a) or "?"
            if q.startswith("torch.backends.") or q.startswith("os.environ"):
                continue  # reported by global_flags / allowed (build settings)
            return f"rebinds {q}: attributes of imported modules (timers, sync, hooks) are off limits"
    return None


@STATIC_CHECKS.register("global_flags")
def global_flags(ctx: StaticContext) -> str | None:
    src = ctx.src
    for node in ast.walk(src.tree):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                q = src.qualname(t) or ""
                if q.startswith("torch.backends.") or q.startswith("torch._dynamo.config") or q.startswith("torch._inductor.config"):
                    return f"sets {q}: changes numerics or speed of torch ops globally"
    call = _first_call(src, {"torch.set_float32_matmul_precision", "torch.use_deterministic_algorithms",
                             "torch.set_default_dtype", "torch.set_num_threads", "torch.set_flush_denormal",
                             "torch.backends.cudnn.flags", "torch.set_num_interop_threads"})
    return f"calls {call}: changes numerics or speed of torch ops globally" if call else None


_STREAM_CALLS = {"torch.cuda.Stream", "torch.cuda.ExternalStream", "torch.cuda.stream", "torch.cuda.set_stream",
                 "torch.Stream", "torch.cuda.streams.Stream"}
_STREAM_STRINGS = ("cudaStreamCreate", "cudaStreamNonBlocking", "getStreamFromPool", "cudaLaunchHostFunc",
                   "std::thread", "pthread_create", "cudaStreamCreateWithPriority", "getStreamFromExternal")


@STATIC_CHECKS.register("streams")
def streams(ctx: StaticContext) -> str | None:
    call = _first_call(ctx.src, _STREAM_CALLS)
    if call:
        return f"calls {call}: work on another stream escapes the timer's stream"
    for node in ast.walk(ctx.src.tree):
        if isinstance(node, ast.Attribute) and node.attr == "wait_stream":
            return "calls wait_stream"
    for s in ctx.src.strings():
        for needle in _STREAM_STRINGS:
            if needle in s:
                return f"CUDA source uses {needle}"
    return None


@STATIC_CHECKS.register("cache_control")
def cache_control(ctx: StaticContext) -> str | None:
    needles = ("PersistingL2", "accessPolicyWindow", "AccessPolicyWindow", "cudaAccessPropertyPersisting",
               "hitProp", "cudaDeviceSetLimit", "cudaDeviceSetCacheConfig", "cudaFuncSetCacheConfig")
    for s in ctx.src.strings():
        for needle in needles:
            if needle in s:
                return f"CUDA source uses {needle}: L2 persistence survives the evaluator's cache flush"
    return None


@STATIC_CHECKS.register("tensor_subclass")
def tensor_subclass(ctx: StaticContext) -> str | None:
    src = ctx.src
    for node in ast.walk(src.tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if (src.qualname(base) or "") in {"torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase",
                                                  "torch.nn.Parameter", "torch.nn.parameter.Parameter"}:
                    return f"class {node.name} subclasses {src.qualname(base)}: lazy or fake outputs"
        if isinstance(node, ast.FunctionDef) and node.name in {"__torch_function__", "__torch_dispatch__"}:
            return f"defines {node.name}"
        if isinstance(node, ast.Attribute) and node.attr in {"_make_subclass", "_make_wrapper_subclass", "as_subclass"}:
            return f"uses {node.attr}"
    return None


@STATIC_CHECKS.register("reference_fallback")
def reference_fallback(ctx: StaticContext) -> str | None:
    cls = ctx.src.classes().get("ModelNew")
    if cls is None:
        return None
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id == "Model":
            return "ModelNew inherits from the reference Model"
    for node in ast.walk(cls):
        if isinstance(node, ast.Name) and node.id == "Model" and isinstance(node.ctx, ast.Load):
            return "ModelNew uses the reference Model"
    return None


@STATIC_CHECKS.register("torch_fallback")
def torch_fallback(ctx: StaticContext) -> str | None:
    if ctx.problem is None:
        return None
    ref_ops = ctx.problem.forward_ops("Model")
    if not ref_ops:
        return None
    cand_ops = ctx.src.forward_ops("ModelNew")
    if ref_ops <= cand_ops:
        return f"ModelNew's forward calls every operator it should replace ({', '.join(sorted(ref_ops))}) in torch"
    return None


def _handler_falls_back(ctx: StaticContext, handler: ast.ExceptHandler) -> str | None:
    for node in ast.walk(handler):
        if isinstance(node, ast.Call):
            q = ctx.src.qualname(node.func) or ""
            if q.startswith("torch.") or q in {"Model", "super"}:
                return q
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return "@"
    return None


@STATIC_CHECKS.register("try_fallback")
def try_fallback(ctx: StaticContext) -> str | None:
    for node in ast.walk(ctx.src.tree):
        if isinstance(node, ast.Try):
            for h in node.handlers:
                q = _handler_falls_back(ctx, h)
                if q:
                    return f"an except branch computes with {q}: a failing kernel silently falls back to torch"
    return None


@STATIC_CHECKS.register("try_except_any")
def try_except_any(ctx: StaticContext) -> str | None:
    for node in ast.walk(ctx.src.tree):
        if isinstance(node, ast.Try) and node.handlers:
            imports_only = all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in node.body)
            if not imports_only:
                return f"try/except at line {node.lineno}: errors must surface, not be swallowed"
    return None


@STATIC_CHECKS.register("no_custom_kernel")
def no_custom_kernel(ctx: StaticContext) -> str | None:
    if ctx.backend.backend == "torch":
        return "defines no Triton kernel (@triton.jit) and no CUDA kernel (load_inline / __global__)"
    return None


_HALF = ("float16", "bfloat16", "half")


@STATIC_CHECKS.register("precision_downgrade")
def precision_downgrade(ctx: StaticContext) -> str | None:
    if ctx.problem is not None and any(h in ctx.problem.code for h in _HALF):
        return None  # the problem itself is in reduced precision
    for node in ast.walk(ctx.src.tree):
        if isinstance(node, ast.Attribute) and node.attr in {"half", "bfloat16", "float16", "float8_e4m3fn"}:
            return f"uses .{node.attr} in an fp32 problem"
        if isinstance(node, ast.keyword) and node.arg in {"input_precision", "allow_tf32"}:
            value = node.value.value if isinstance(node.value, ast.Constant) else None
            if value not in ("ieee", False):
                return f"sets {node.arg}={value!r} (reduced-precision dot products)"
    for s in ctx.src.strings():
        for needle in ("__half", "__float2half", "__nv_bfloat16", "half2", "tf32", "wmma::precision"):
            if needle in s:
                return f"CUDA source uses {needle} in an fp32 problem"
    return None
