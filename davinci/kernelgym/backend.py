"""Which kind of custom kernel a candidate source holds, and the names its kernels will run under.

Detection reads the source (the `ast` module plus the string constants that hold CUDA code); it never
imports the candidate:
- "triton": a function decorated with `triton.jit` / `triton.autotune` / `triton.heuristics` (any alias);
- "cuda":   `torch.utils.cpp_extension.load_inline` / `load` / `CUDAExtension`, or `__global__` in a string;
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


def detect_backend(code: str, declared: str | None = None) -> BackendInfo:
    """Backend and kernel names of `code`; a syntax error gives backend "torch" with no kernels."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return BackendInfo("torch", (), (), False)
    triton = tuple(
        n.name for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and any(_decorator_name(d) in _TRITON_DECORATORS for d in n.decorator_list)
    )
    cuda = tuple(dict.fromkeys(m.group(1) for s in _string_constants(tree) for m in _GLOBAL_FN.finditer(s)))
    loads = any(
        (isinstance(n, ast.Attribute) and n.attr in _CUDA_LOADERS)
        or (isinstance(n, ast.Name) and n.id in _CUDA_LOADERS)
        or (isinstance(n, ast.alias) and n.name.split(".")[-1] in _CUDA_LOADERS)
        for n in ast.walk(tree)
    )
    if triton and (cuda or loads):
        backend: DetectedBackend = "cuda" if declared == "cuda" else "triton"
    elif triton:
        backend = "triton"
    elif cuda or loads:
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
