"""Which kind of custom kernel a candidate source holds, and the names its kernels will run under.

Detection reads the source (the `ast` module plus the string constants that hold CUDA code); it never
imports the candidate:
- "triton": a function decorated with `triton.jit` / `triton.autotune` / `triton.heuristics` (any alias), or
            wrapped by a call of one (`kernel = triton.jit(fn)`);
- "cuda":   a call of `torch.utils.cpp_extension.load_inline` / `load` / `CUDAExtension`, however imported
            (the import statements decide; the word "load" alone, as in `tl.load`, does not), with the
            `__global__` names of its string constants as kernel names;
- "torch":  neither (no custom kernel at all).
A source with both is "cuda" when it declares CUDA kernels and launches no Triton one, else "triton"
(the declared `Candidate.backend` only breaks ties). Kernel names feed the runtime decoy check: profiler
kernel names and launch-hook names are matched against them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

DetectedBackend = Literal["triton", "cuda", "torch"]
_GLOBAL_FN = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:\w+\s+)*?void\s+(\w+)")
_TRITON_DECORATORS = {"jit", "autotune", "heuristics"}
_CUDA_LOADERS = {"load_inline", "load", "CUDAExtension", "cpp_extension"}


@dataclass(frozen=True)
class BackendInfo:
    backend: DetectedBackend
    triton_kernels: tuple[str, ...]      # names of @triton.jit functions
    cuda_kernels: tuple[str, ...]        # names of __global__ functions found in string constants
    uses_load_inline: bool

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return self.triton_kernels + self.cuda_kernels


def _decorator_name(dec: ast.expr) -> str:
    node = dec.func if isinstance(dec, ast.Call) else dec
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _string_constants(tree: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _cpp_extension_names(tree: ast.AST) -> set[str]:
    """Local names bound to torch.utils.cpp_extension or to one of its loaders, read from the imports."""
    names = {"cpp_extension"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("cpp_extension"):
            names.update(a.asname or a.name for a in node.names if a.name in _CUDA_LOADERS)
        elif isinstance(node, ast.ImportFrom) and (node.module or "") == "torch.utils":
            names.update(a.asname or a.name for a in node.names if a.name == "cpp_extension")
        elif isinstance(node, ast.Import):
            names.update(a.asname for a in node.names if a.name.endswith("cpp_extension") and a.asname)
    return names


def _dotted(node: ast.expr) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _loads_extension(tree: ast.AST) -> bool:
    """A call of torch.utils.cpp_extension.load_inline / load / CUDAExtension, however imported: structure,
    not the word "load" (every `tl.load` would match that)."""
    bound = _cpp_extension_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        head, _, last = name.rpartition(".")
        if last in _CUDA_LOADERS - {"cpp_extension"} and head.split(".")[-1] in bound:
            return True
        if not head and last in bound and last != "cpp_extension":
            return True
    return False


def _triton_kernels(tree: ast.AST) -> tuple[str, ...]:
    """Functions decorated with triton.jit / autotune / heuristics, or wrapped by a call of one
    (`kernel = triton.jit(fn)`)."""
    found = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and any(_decorator_name(d) in _TRITON_DECORATORS for d in n.decorator_list)]
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _decorator_name(node.func) in _TRITON_DECORATORS:
            found += [a.id for a in node.args if isinstance(a, ast.Name) and a.id in defined]
    return tuple(dict.fromkeys(found))


def detect_backend(code: str, declared: str | None = None) -> BackendInfo:
    """Backend and kernel names of `code`; a syntax error gives backend "torch" with no kernels."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return BackendInfo("torch", (), (), False)
    triton = _triton_kernels(tree)
    loads = _loads_extension(tree)
    # __global__ functions count only in a source that builds an extension (a docstring mentioning one is text)
    cuda = tuple(dict.fromkeys(m.group(1) for s in _string_constants(tree) for m in _GLOBAL_FN.finditer(s))) if loads else ()
    if triton and loads:
        backend: DetectedBackend = "cuda" if declared == "cuda" else "triton"
    elif triton:
        backend = "triton"
    elif loads:
        backend = "cuda"
    else:
        backend = "torch"
    return BackendInfo(backend, triton, cuda, loads)


def kernel_matches(profiler_name: str, kernel_names: tuple[str, ...]) -> bool:
    """Whether a profiler / launch-hook kernel name is one of the candidate's kernels.

    Profilers report Triton kernels by function name and CUDA kernels demangled (`relu_kernel(float*, int)`)
    or mangled (`_Z11relu_kernelPfi`); match the identifier with word boundaries (or its mangled length prefix).
    """
    for name in kernel_names:
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", profiler_name):
            return True
        if f"{len(name)}{name}" in profiler_name:
            return True
    return False
