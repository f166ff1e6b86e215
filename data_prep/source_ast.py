"""Static analysis of KernelBench-format sources with `ast`: never executed (KernelBench files allocate
gigabytes at their real sizes).

What it gives:
- `check_interface(code)`: does the file define `Model`, `get_inputs` and `get_init_inputs` (and parse)?
- `operator_signature(code)`: the ordered torch operators that `Model.forward` runs, e.g.
  `("conv2d", "add", "relu")`, with modules resolved through `__init__` (`self.conv = nn.Conv2d(...)`),
  `nn.Sequential`/`nn.ModuleList` contents, list variables built with `append`, user classes' `forward`
  and module-level helper functions (depth-limited). Tensor methods (`x.sum()`), `torch.*`, `F.*` and
  arithmetic operators on tensors (`+ - * / @ **`) count; pure layout calls (`view`, `reshape`,
  `contiguous`, ...) and Python builtins do not. Names are canonical: lower case, no underscores, no
  `Loss` suffix, aliases merged (`mm`/`bmm`/`@` -> `matmul`, `amax` -> `max`, `BatchNorm2d` -> `batchnorm`).
- `canonical_tokens(code)`: the token stream with docstrings, comments and formatting removed, names the
  file defines (variables, parameters, attributes, size constants, helper functions) replaced by `ID`,
  numbers by `NUM` and strings by `STR`; torch API names and keywords are kept. A renamed or resized copy
  therefore gives the same tokens.
- `op_category(op)` / `signature_family(sig)`: coarse families (`activation+matmul`) for cluster caps.

    from data_prep.source_ast import operator_signature
    operator_signature(open("KernelBench/level2/1_Conv2D_ReLU_BiasAdd.py").read())  # ('conv2d', 'relu', 'add')
"""

from __future__ import annotations

import ast
import io
import keyword
import re
import tokenize
from dataclasses import dataclass

INTERFACE_NAMES = ("Model", "get_inputs", "get_init_inputs")
# Names kept verbatim by `canonical_tokens` even when the file defines them: the KernelBench interface.
_INTERFACE_KEEP = frozenset({"Model", "ModelNew", "forward", "__init__", "get_inputs", "get_init_inputs", "self"})
_TORCH_ROOTS = frozenset({"torch", "nn", "F", "functional"})
# Calls that move or describe data without computing: left out of operator signatures.
_LAYOUT_CALLS = frozenset(
    "view reshape contiguous size dim numel flatten unflatten unsqueeze squeeze expand expandas to float double "
    "half bfloat16 int long bool cuda cpu clone detach type item tolist viewas newzeros newones newempty "
    "newfull emptylike zeroslike oneslike fulllike empty zeros ones full arange tensor astensor parameter "
    "requiresgrad dataptr stride isfinite shape identity getattr rand randn randint randlike randnlike "
    "randintlike normal uniform bernoulli manualseed".split()
)
_PY_BUILTINS = frozenset(
    "len range int float bool str tuple list dict set print isinstance super enumerate zip min max sum abs any all "
    "getattr setattr hasattr reversed sorted map filter round iter next".split()
)
_ALIASES = {
    "mm": "matmul", "bmm": "matmul", "amax": "max", "amin": "min", "clip": "clamp", "swish": "silu",
    "multiply": "mul", "subtract": "sub", "divide": "div", "truediv": "div", "negative": "neg",
    "addmm": "linear", "true_divide": "div", "absolute": "abs", "greater": "gt", "less": "lt",
}
_SCALAR_MODULES = frozenset({"math", "np", "numpy", "random", "os", "sys"})
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul", ast.Pow: "pow"}
_MAX_DEPTH = 4

# --------------------------------------------------------------------------------------------- interface


@dataclass(frozen=True)
class InterfaceCheck:
    ok: bool
    missing: tuple[str, ...]
    error: str = ""


def check_interface(code: str) -> InterfaceCheck:
    """Whether `code` parses and defines `Model`, `get_inputs` and `get_init_inputs` at module level."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return InterfaceCheck(False, INTERFACE_NAMES, f"syntax error at line {exc.lineno}: {exc.msg}")
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    missing = tuple(name for name in INTERFACE_NAMES if name not in defined)
    return InterfaceCheck(not missing, missing)


# ------------------------------------------------------------------------------------ operator signature


def canonical_op(name: str) -> str:
    """`LayerNorm`, `layer_norm` -> `layernorm`; `CrossEntropyLoss` -> `crossentropy`; `bmm` -> `matmul`."""
    raw = name.strip("_")
    if raw in _ALIASES:
        return _ALIASES[raw]
    op = raw.lower().replace("_", "")
    if op.endswith("loss") and len(op) > 4:
        op = op[:-4]
    op = re.sub(r"^(batchnorm|instancenorm)[123]d$", r"\1", op)
    return _ALIASES.get(op, op)


def _dotted(node: ast.AST) -> list[str]:
    """`torch.nn.functional.relu` -> ["torch", "nn", "functional", "relu"]; [] when not a plain dotted name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return []


@dataclass
class _Scope:
    """What the analysis knows about one file: its classes, helper functions and torch imports."""

    classes: dict[str, ast.ClassDef]
    functions: dict[str, ast.FunctionDef]
    torch_names: dict[str, str]  # local name -> imported torch object name (`from torch.nn import Conv2d`)


def _scope(tree: ast.Module) -> _Scope:
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    torch_names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            for alias in node.names:
                torch_names[alias.asname or alias.name] = alias.name
    return _Scope(classes, functions, torch_names)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _is_module_class(name: str) -> bool:
    return name[:1].isupper()


class _ForwardOps(ast.NodeVisitor):
    """Post-order walk of a function body: operands before their operator, in evaluation order."""

    def __init__(self, scope: _Scope, attrs: dict[str, list[str]], depth: int) -> None:
        self.scope = scope
        self.attrs = attrs  # self.<attr> -> ops it runs when called
        self.depth = depth
        self.bound: dict[str, list[str]] = {}  # loop variables bound to module lists
        self.ops: list[str] = []

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        parts = _dotted(node.iter)
        if isinstance(node.target, ast.Name) and len(parts) == 2 and parts[0] == "self" and parts[1] in self.attrs:
            self.bound[node.target.id] = self.attrs[parts[1]]
        for stmt in node.body + node.orelse:
            self.visit(stmt)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self.visit(node.left)
        self.visit(node.right)
        op = _BINOPS.get(type(node.op))
        if op and not (_static(node.left) and _static(node.right)):
            self.ops.append(op)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        op = _BINOPS.get(type(node.op))
        if op and not _static(node.value) or op and not _static(node.target):
            self.ops.append(op)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and not _dotted(func):
            self.visit(func.value)  # a method on a computed value: x.sum().relu()
        if isinstance(func, ast.Subscript):
            self.visit(func.slice)
        for arg in node.args:
            self.visit(arg)
        for kw in node.keywords:
            self.visit(kw.value)
        self.ops.extend(self._resolve_call(func))

    def _resolve_call(self, func: ast.AST) -> list[str]:
        if isinstance(func, ast.Subscript):
            parts = _dotted(func.value)
            if len(parts) == 2 and parts[0] == "self":
                return list(self.attrs.get(parts[1], []))
            return []
        parts = _dotted(func)
        if not parts:
            return _method_op(func)
        if parts[0] == "self":
            if len(parts) == 2 and parts[1] in self.attrs:
                return list(self.attrs[parts[1]])
            return self._self_method(parts)
        if len(parts) == 1:
            return self._name_call(parts[0])
        if parts[0] in _SCALAR_MODULES:
            return []  # math.sqrt(2.0) is arithmetic on Python numbers, not a tensor operator
        return _op_list(parts[-1])  # torch.relu, F.gelu, or a method on a named tensor: x.sum(dim=1)

    def _self_method(self, parts: list[str]) -> list[str]:
        if len(parts) != 2 or self.depth >= _MAX_DEPTH:
            return _op_list(parts[-1]) if len(parts) > 2 else []
        for cls in self.scope.classes.values():
            method = _method(cls, parts[1])
            if method is not None and parts[1] not in ("forward", "__init__"):
                return _function_ops(method, self.scope, self.attrs, self.depth + 1)
        return []

    def _name_call(self, name: str) -> list[str]:
        if name in self.bound:
            return list(self.bound[name])
        if name in self.scope.torch_names:
            return _op_list(self.scope.torch_names[name])
        if name in self.scope.functions and self.depth < _MAX_DEPTH:
            return _function_ops(self.scope.functions[name], self.scope, self.attrs, self.depth + 1)
        if name in self.scope.classes and self.depth < _MAX_DEPTH:
            return _class_forward_ops(self.scope.classes[name], self.scope, self.depth + 1)
        return []


def _method_op(func: ast.AST) -> list[str]:
    return _op_list(func.attr) if isinstance(func, ast.Attribute) else []


def _op_list(name: str) -> list[str]:
    op = canonical_op(name)
    if not op or op in _LAYOUT_CALLS or name in _PY_BUILTINS and name not in ("abs", "max", "min", "sum"):
        return []
    return [op]


def _static(node: ast.AST) -> bool:
    """True for expressions that are plain numbers or shapes, so `batch * 2` is not counted as an operator."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _static(node.operand)
    if isinstance(node, ast.BinOp):
        return _static(node.left) and _static(node.right)
    if isinstance(node, ast.Attribute) and (node.attr in ("shape", "ndim") or _dotted(node)[:1] == ["math"]):
        return True
    if isinstance(node, ast.Subscript):
        return _static(node.value)
    if isinstance(node, ast.Call):
        if _dotted(node.func)[:1] == ["math"]:
            return all(_static(arg) for arg in node.args)
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        return name in ("size", "dim", "len", "numel", "int", "float")
    return False


def _constructor_ops(node: ast.AST, scope: _Scope, lists: dict[str, list[str]], depth: int) -> list[str]:
    """Operators of the modules constructed anywhere inside `node`, in source order."""
    ops: list[str] = []
    for sub in _walk_in_order(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id in lists:
            ops.extend(lists[sub.id])  # a list variable built earlier: nn.Sequential(*layers)
        if not isinstance(sub, ast.Call):
            continue
        parts = _dotted(sub.func)
        if not parts:
            continue
        name = parts[-1]
        if name in scope.classes and depth < _MAX_DEPTH:
            ops.extend(_class_forward_ops(scope.classes[name], scope, depth + 1))
        elif _is_module_class(name) and (parts[0] in _TORCH_ROOTS or name in scope.torch_names):
            if name not in ("Sequential", "ModuleList", "ModuleDict", "Parameter", "ParameterList", "Identity"):
                ops.extend(_op_list(name))
    return ops


def _walk_in_order(node: ast.AST):
    """Pre-order walk in source order (`ast.walk` is breadth-first, which reorders nested statements)."""
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _walk_in_order(child)


def _init_attrs(cls: ast.ClassDef, scope: _Scope, depth: int) -> dict[str, list[str]]:
    """`self.<attr>` -> operators it runs, from the class's `__init__` (lists built by append included)."""
    init = _method(cls, "__init__")
    attrs: dict[str, list[str]] = {}
    lists: dict[str, list[str]] = {}
    if init is None:
        return attrs
    for stmt in _walk_in_order(init):
        if isinstance(stmt, ast.Assign):
            ops = _constructor_ops(stmt.value, scope, lists, depth)
            for target in stmt.targets:
                parts = _dotted(target)
                if len(parts) == 2 and parts[0] == "self":
                    attrs[parts[1]] = ops
                elif isinstance(target, ast.Name):
                    lists[target.id] = ops
        elif isinstance(stmt, ast.Call) and isinstance(stmt.func, ast.Attribute):
            owner = _dotted(stmt.func.value)
            if stmt.func.attr in ("append", "extend", "add_module") and len(owner) == 1:
                lists.setdefault(owner[0], []).extend(
                    op for arg in stmt.args for op in _constructor_ops(arg, scope, lists, depth)
                )
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            lists.setdefault(stmt.target.id, []).extend(_constructor_ops(stmt.value, scope, lists, depth))
    return attrs


def _function_ops(fn: ast.FunctionDef, scope: _Scope, attrs: dict[str, list[str]], depth: int) -> list[str]:
    visitor = _ForwardOps(scope, attrs, depth)
    for stmt in fn.body:
        visitor.visit(stmt)
    return visitor.ops


def _class_forward_ops(cls: ast.ClassDef, scope: _Scope, depth: int) -> list[str]:
    forward = _method(cls, "forward")
    if forward is None:
        return []
    return _function_ops(forward, scope, _init_attrs(cls, scope, depth), depth)


def operator_signature(code: str) -> tuple[str, ...]:
    """The ordered canonical operators of `Model.forward` (empty when the file does not parse or has no Model)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ()
    scope = _scope(tree)
    model = scope.classes.get("Model")
    return tuple(_class_forward_ops(model, scope, 0)) if model is not None else ()


# ------------------------------------------------------------------------------------- canonical tokens


def _strip_docstrings(tree: ast.Module) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]


def _defined_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _dotted(node.value) == ["self"]:
            names.add(node.attr)
    return names - _INTERFACE_KEEP


def canonical_tokens(code: str) -> list[str]:
    """Tokens of `code` with docstrings/comments/layout removed and file-defined names, numbers, strings
    canonicalized (see module docstring). Empty when the file does not parse."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    _strip_docstrings(tree)
    defined = _defined_names(tree)
    out: list[str] = []
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(ast.unparse(tree)).readline):
        if tok.type in skip:
            continue
        if tok.type == tokenize.NAME:
            out.append("ID" if tok.string in defined and not keyword.iskeyword(tok.string) else tok.string)
        elif tok.type == tokenize.NUMBER:
            out.append("NUM")
        elif tok.type == tokenize.OP:
            out.append(tok.string)
        else:
            out.append("STR")
    return out


# ----------------------------------------------------------------------------------------- categories

_CATEGORY_SETS: dict[str, frozenset[str]] = {
    "elementwise": frozenset(
        "add sub mul div pow neg abs exp exp2 log log2 log10 log1p expm1 sqrt rsqrt square clamp maximum minimum "
        "where reciprocal sign round floor ceil erf erfc lerp addcmul addcdiv fmod remainder gt lt ge le eq ne "
        "sin cos masked_fill maskedfill".split()
    ),
    "activation": frozenset(
        "relu relu6 gelu silu sigmoid tanh softplus softsign leakyrelu elu selu celu hardtanh hardswish "
        "hardsigmoid mish logsigmoid prelu glu threshold tanhshrink softshrink hardshrink rrelu".split()
    ),
    "reduction": frozenset("sum mean max min argmax argmin prod logsumexp std var norm all any median mode".split()),
    "softmax": frozenset("softmax logsoftmax softmin".split()),
    "matmul": frozenset("matmul linear einsum baddbmm bilinear outer dot tensordot".split()),
    "scan": frozenset("cumsum cumprod cummax cummin".split()),
    "attention": frozenset("scaleddotproductattention multiheadattention".split()),
    "recurrent": frozenset("lstm gru rnn lstmcell grucell rnncell".split()),
    "layout": frozenset(
        "transpose permute chunk split cat stack t flip roll gather scatter indexselect pad repeat tril triu "
        "diag diagembed unfold fold pixelshuffle narrow select".split()
    ),
    "loss": frozenset(
        "crossentropy mse l1 smoothl1 huber kldiv nll bce bcewithlogits hinge hingeembedding tripletmargin "
        "cosineembedding marginranking cosinesimilarity multimargin".split()
    ),
}


def op_category(op: str) -> str:
    """Coarse family of one canonical operator: conv, pool, norm, matmul, activation, ... or `other`."""
    if op.startswith("conv"):
        return "conv"
    if "pool" in op:
        return "pool"
    if op.endswith("norm") and op != "norm":
        return "norm"
    for category, members in _CATEGORY_SETS.items():
        if op in members:
            return category
    return "other"


def signature_family(signature: tuple[str, ...]) -> str:
    """The cluster key of a signature: its sorted set of categories without `layout`, e.g. `activation+matmul`."""
    cats = sorted({op_category(op) for op in signature} - {"layout"})
    return "+".join(cats) if cats else "empty"


__all__ = [
    "INTERFACE_NAMES",
    "InterfaceCheck",
    "check_interface",
    "canonical_op",
    "operator_signature",
    "canonical_tokens",
    "op_category",
    "signature_family",
]
