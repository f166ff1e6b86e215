"""AST helpers for the static checks: import aliases, qualified names, the ops a forward path calls.

`Source(code)` parses once and resolves names through the file's imports, so `import torch.nn.functional as F`
makes `F.conv2d` read as `torch.nn.functional.conv2d`, and `from time import perf_counter as pc` makes
`pc` read as `time.perf_counter`. `forward_ops(cls_name)` collects the canonical op names a model's
forward path calls (its own methods and the module-level helpers it reaches, transitively; Triton
kernels excluded): torch-qualified calls, tensor method calls, `@`, and `self.<m>(...)` where `<m>` was
built from an `nn` module in `__init__`. Canonical names are lower-case without `_` or a trailing
1d/2d/3d, with matmul-like calls folded into "matmul" (mm, bmm, addmm, linear, einsum, ...).
"""

from __future__ import annotations

import ast
import re
from functools import cached_property

# Names that move or allocate data rather than compute (never counted as a replaced op).
NOT_COMPUTE = {
    "view", "reshape", "permute", "contiguous", "transpose", "t", "flatten", "unflatten", "squeeze", "unsqueeze",
    "expand", "expandas", "viewas", "size", "shape", "numel", "dim", "ndimension", "to", "cuda", "cpu", "float",
    "half", "double", "bfloat16", "int", "long", "bool", "type", "typeas", "empty", "emptylike", "emptystrided",
    "zeros", "zeroslike", "ones", "oneslike", "full", "fulllike", "arange", "tensor", "astensor", "fromnumpy",
    "clone", "detach", "item", "tolist", "stride", "dataptr", "iscontiguous", "newempty", "newzeros", "newones",
    "newfull", "newtensor", "copy", "fill", "zero", "split", "chunk", "cat", "concat", "stack", "narrow", "select",
    "index", "getitem", "len", "range", "super", "print", "isinstance", "storageoffset", "elementsize", "device",
    "dtype", "nextpowerof2", "cdiv", "manualseed", "synchronize", "currentstream", "getdevice", "setdevice",
    "requiresgrad", "nograd", "inferencemode", "parameter", "buffer", "registerbuffer", "randn", "rand", "randint",
    "loadinline", "load",
}
MATMUL = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "einsum", "tensordot", "dot", "mv", "addmv",
          "bilinear"}
TORCH_ROOTS = ("torch.",)


def canonical(name: str) -> str:
    base = re.sub(r"_", "", name.split(".")[-1].lower())
    base = re.sub(r"(?<=[a-z])[123]d$", "", base)
    return "matmul" if base in MATMUL else base


class Source:
    def __init__(self, code: str) -> None:
        self.code = code
        self.tree = ast.parse(code)
        self.aliases: dict[str, str] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    @cached_property
    def imported_modules(self) -> set[str]:
        mods: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                mods.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods.add(node.module)
                mods.update(f"{node.module}.{a.name}" for a in node.names)
        return mods

    def qualname(self, node: ast.AST) -> str | None:
        """Dotted name with its import alias resolved (`F.relu` -> `torch.nn.functional.relu`), else None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            return self.qualname(node.func)
        return None

    def is_imported(self, node: ast.AST) -> bool:
        """Whether the root name of `node` is bound by an import (a module or an imported object)."""
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            node = node.value if not isinstance(node, ast.Call) else node.func
        return isinstance(node, ast.Name) and node.id in self.aliases

    def strings(self) -> list[str]:
        return [n.value for n in ast.walk(self.tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]

    def classes(self) -> dict[str, ast.ClassDef]:
        return {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}

    def functions(self) -> dict[str, ast.FunctionDef]:
        return {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}

    def _module_attrs(self, cls: ast.ClassDef) -> dict[str, str]:
        """self.<attr> -> canonical op of the nn module assigned to it in any method."""
        out: dict[str, str] = {}
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                q = self.qualname(node.value.func) or ""
                if q.startswith("torch.nn.") and q.split(".")[-1][:1].isupper():
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            out[t.attr] = canonical(q)
        return out

    def forward_ops(self, cls_name: str) -> set[str]:
        """Canonical compute ops called on the forward path of class `cls_name` (empty if absent)."""
        cls = self.classes().get(cls_name)
        if cls is None:
            return set()
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        helpers = {k: v for k, v in self.functions().items() if not v.decorator_list}
        module_attrs = self._module_attrs(cls)
        ops: set[str] = set()
        todo, seen = [methods.get("forward")], set()
        while todo:
            fn = todo.pop()
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            for node in ast.walk(fn):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                    ops.add("matmul")
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                    if f.attr in module_attrs:
                        ops.add(module_attrs[f.attr])
                    todo.append(methods.get(f.attr))
                    continue
                if isinstance(f, ast.Name) and f.id in helpers:
                    todo.append(helpers[f.id])
                    continue
                q = self.qualname(f) or ""
                if q.startswith(TORCH_ROOTS) or (isinstance(f, ast.Attribute) and not self.is_imported(f)):
                    ops.add(canonical(q or f.attr))  # torch call, or a method call on a value (x.relu())
        return {op for op in ops if op and op not in NOT_COMPUTE}
