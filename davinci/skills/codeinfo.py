"""What a KernelBench-format source says about itself, read from its AST (never executed).

- `module_constants(code)`: the module-level int size constants (`batch_size = 128`, `height = width = 64`).
- `apply_shape_overrides(code, overrides)`: the same source with some of those constants replaced, so a
  problem can be run at other sizes; constants derived from them in `get_inputs` follow automatically.
- `extract_ops(code)`: the operators the reference `Model` uses (torch ops, `nn` modules, `F.*` calls,
  tensor methods, arithmetic operators), dtype hints, and coarse categories (`elementwise`,
  `reduction`, `epilogue`, ...) from a fixed taxonomy. The BM25 query is built from these.

    ops = extract_ops(problem.code)   # OpInfo(ops=("conv2d", "relu", "add"), categories=(...), ...)
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Mapping

from davinci.errors import MalformedInput

# Operator -> categories. Names are lowercase; `nn.Conv2d` and `F.conv2d` both become `conv2d`.
_ACTIVATIONS = (
    "relu gelu sigmoid tanh silu swish mish hardswish hardtanh leaky_relu elu selu softplus softsign "
    "hardsigmoid relu6 celu logsigmoid prelu rrelu glu gelu_new"
).split()
_POINTWISE = (
    "add sub mul div pow neg abs exp log sqrt rsqrt clamp clamp_min clamp_max where sign reciprocal "
    "square maximum minimum masked_fill floor ceil round erf sin cos addcmul addcdiv lerp"
).split()
_REDUCTIONS = "sum mean max min amax amin prod norm var std argmax argmin logsumexp all any count_nonzero".split()
_NORMS = "layer_norm layernorm group_norm groupnorm batch_norm batchnorm1d batchnorm2d batchnorm3d instance_norm instancenorm1d instancenorm2d instancenorm3d rms_norm rmsnorm normalize".split()
_MATMUL = "matmul mm bmm addmm linear einsum baddbmm dot mv bilinear".split()
_CONV = "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d convtranspose1d convtranspose2d convtranspose3d".split()
_POOL = "max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d maxpool1d maxpool2d maxpool3d avgpool1d avgpool2d avgpool3d adaptive_avg_pool2d adaptiveavgpool2d adaptive_max_pool2d".split()
_LOSSES = "cross_entropy mse_loss nll_loss kl_div smooth_l1_loss huber_loss hinge_embedding_loss triplet_margin_loss l1_loss binary_cross_entropy crossentropyloss mseloss".split()
_LAYOUT = "transpose permute contiguous view reshape t flatten unsqueeze squeeze expand chunk split narrow".split()


def _build_taxonomy() -> dict[str, tuple[str, ...]]:
    groups = (
        (_ACTIVATIONS, ("elementwise", "activation")),
        (_POINTWISE, ("elementwise",)),
        (_REDUCTIONS, ("reduction",)),
        (_NORMS, ("normalization", "reduction", "rowwise")),
        (_MATMUL, ("matmul", "gemm")),
        (_CONV, ("convolution", "conv")),
        (_POOL, ("pooling", "reduction")),
        (_LOSSES, ("loss", "reduction")),
        (_LAYOUT, ("layout",)),
        (("softmax", "log_softmax", "logsoftmax"), ("softmax", "reduction", "rowwise")),
        (("cumsum", "cumprod", "cummax"), ("scan", "cumulative")),
        (("cat", "stack", "concat", "concatenate"), ("concat", "copy")),
        (("dropout", "dropout2d"), ("dropout",)),
        (("embedding", "gather", "index_select", "scatter"), ("gather", "indexing")),
    )
    out: dict[str, tuple[str, ...]] = {}
    for names, cats in groups:
        for name in names:
            have = out.get(name, ())
            out[name] = have + tuple(c for c in cats if c not in have)
    return out


TAXONOMY: dict[str, tuple[str, ...]] = _build_taxonomy()

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul", ast.Pow: "pow"}
_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float": "fp32", "float64": "fp64", "int64": "int64", "long": "int64", "int32": "int32", "bool": "bool", "int8": "int8"}
# Calls on these are plumbing, not operators.
_IGNORED = {"super", "__init__", "parameter", "tensor", "rand", "randn", "randint", "zeros", "ones", "empty", "arange", "size", "dim", "to", "cuda", "float", "item", "numel", "print", "range", "len", "int", "list", "tuple", "sequential", "modulelist", "manual_seed", "forward", "full", "zeros_like", "ones_like", "empty_like", "randn_like", "rand_like", "new_zeros", "new_empty", "detach", "clone", "type_as"}


@dataclass(frozen=True)
class OpInfo:
    """Operators (in first-use order), categories from the taxonomy, dtype hints, size constants."""

    ops: tuple[str, ...]
    categories: tuple[str, ...]
    dtypes: tuple[str, ...]
    constants: tuple[tuple[str, int], ...]


# --- size constants -----------------------------------------------------------------------------


def _int_value(node: ast.expr) -> int | None:
    """The int a constant expression evaluates to (`4096`, `2 * 1024`, `-1`), or None."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = _eval_int_arith(node)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _eval_int_arith(node: ast.expr) -> int | None:
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b if b else None}
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in ops:
        left, right = _eval_int_arith(node.left), _eval_int_arith(node.right)
        if left is None or right is None or abs(left) > 2**40 or abs(right) > 2**40:
            return None
        return ops[type(node.op)](left, right)
    return None


def _module_assigns(tree: ast.Module) -> list[ast.Assign]:
    return [n for n in tree.body if isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) for t in n.targets)]


def module_constants(code: str) -> dict[str, int]:
    """Module-level `NAME = <int expression>` constants, in source order (later assignments win)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return {}
    return _constants(tree)


def _constants(tree: ast.Module) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in _module_assigns(tree):
        value = _int_value(node.value)
        if value is not None:
            for target in node.targets:
                out[target.id] = value  # type: ignore[attr-defined]
    return out


def apply_shape_overrides(code: str, overrides: Mapping[str, int]) -> str:
    """Rewrite the module-level constants named in `overrides`; other code is left byte-identical.

    The evaluator's own rewrite (`kernelgym.problem.apply_shape_overrides`), so the shapes admission plans are
    exactly the shapes the evaluator runs. An unknown name raises `MalformedInput` listing the known constants.
    """
    from davinci.kernelgym.problem import apply_shape_overrides as rewrite  # lazy: kernelgym only when used

    return rewrite(code, overrides)


# --- operators ----------------------------------------------------------------------------------


def _dotted(node: ast.expr) -> list[str]:
    """`torch.nn.functional.gelu` -> ["torch", "nn", "functional", "gelu"]; non-name roots -> []."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    if parts:  # method on an expression: (x + y).sum() -> ["<expr>", "sum"]
        return ["<expr>"] + parts[::-1]
    return []


def _op_of_call(call: ast.Call) -> str | None:
    parts = _dotted(call.func)
    if not parts:
        return None
    name = parts[-1].lower()
    if name in _IGNORED or name.startswith("_"):
        return None
    if parts[0] == "self" and len(parts) == 2:
        return None  # self.conv(x): the module is recorded where it is constructed
    return name


def _post_order(node: ast.AST):
    """Children before parents, siblings in source order: the order operations are evaluated."""
    for child in ast.iter_child_nodes(node):
        yield from _post_order(child)
    yield node


def _visit_ops(tree: ast.AST, ops: list[str], dtypes: list[str]) -> None:
    for node in _post_order(tree):
        if isinstance(node, ast.Call):
            op = _op_of_call(node)
            if op:
                ops.append(op)
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BINOPS:
            ops.append(_BINOPS[type(node.op)])
        elif isinstance(node, ast.Attribute) and node.attr in _DTYPES and _dotted(node)[:1] == ["torch"]:
            dtypes.append(_DTYPES[node.attr])


def _categories(ops: list[str]) -> list[str]:
    cats: list[str] = []
    for op in ops:
        cats.extend(TAXONOMY.get(op, ()))
    elementwise = sum(1 for op in ops if "elementwise" in TAXONOMY.get(op, ()))
    if elementwise >= 2:
        cats.extend(["fusion", "chain"])
    heavy = any(c in cats for c in ("matmul", "convolution"))
    if heavy and elementwise:
        cats.extend(["epilogue", "fusion"])
    if "reduction" in cats and elementwise:
        cats.extend(["fusion"])
    return list(dict.fromkeys(cats))


def extract_ops(code: str) -> OpInfo:
    """Operators of the reference `Model` (whole module if there is no `Model`), with categories.

    Unparsable code gives an empty `OpInfo` (the caller then falls back to plain text tokens).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return OpInfo((), (), (), ())
    models = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"]
    ops: list[str] = []
    dtypes: list[str] = []
    for root in models or [tree]:
        _visit_ops(root, ops, dtypes)
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"):
        fn_ops: list[str] = []
        _visit_ops(fn, fn_ops, dtypes)
        if "randint" in {c.func.attr for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)}:
            dtypes.append("int64")
    unique = list(dict.fromkeys(ops))
    consts = tuple(_constants(tree).items())
    return OpInfo(tuple(unique), tuple(_categories(ops)), tuple(dict.fromkeys(dtypes)), consts)
