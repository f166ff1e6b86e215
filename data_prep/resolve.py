"""Problems and kernels named on the command line: a built-in id or a KernelBench-format file; a kernel file.

    resolve_problem("builtin/relu") / resolve_problem("relu") / resolve_problem("path/to/19_ReLU.py")
    read_kernel("my_kernel.py")

Bad input is a `DavinciError` naming the fix: an unknown id lists the built-in ids, a missing file says so.
"""

from __future__ import annotations

from pathlib import Path

from data_prep.builtin import builtin_problems
from davinci.errors import InputNotFound, MalformedInput
from davinci.types import Problem


def resolve_problem(spec: str) -> Problem:
    builtin = {p.id: p for p in builtin_problems()}
    key = spec if spec.startswith("builtin/") else f"builtin/{spec}"
    if key in builtin:
        return builtin[key]
    if spec.endswith(".py") and Path(spec).is_file():
        from davinci.kernelgym import load_problem_file

        return load_problem_file(spec)
    raise InputNotFound(f"unknown problem {spec!r} (not a built-in id, not an existing .py file)",
                        f"use a built-in id ({', '.join(sorted(builtin))}) or the path of a KernelBench-format file")


def read_kernel(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise InputNotFound(f"kernel file {path} does not exist", "pass the path of a .py file that defines ModelNew")
    code = p.read_text()
    if "ModelNew" not in code:
        raise MalformedInput(f"kernel file {path} defines no ModelNew", "a kernel is a KernelBench solution: class ModelNew(nn.Module)")
    return code
