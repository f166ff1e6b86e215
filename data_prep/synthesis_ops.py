"""Operator templates for problem synthesis, and the code generators for a chain of them.

Every template has a PyTorch expression (the problem's `Model.forward` line, on `x`) and a Triton fragment
(on `v`, a [BLOCK_R, BLOCK_D] fp32 tile of rows; `col_mask` marks real columns). Kinds:
- `unary`: elementwise, shape-preserving (relu, gelu, tanh, scale, ...);
- `affine`: `x * self.weight + self.bias` with per-feature parameters (at most once per chain);
- `row`: row-wise over the last dim, shape-preserving (softmax, layer_norm, rms_norm, ...);
- `reduce`: over the last dim, dropping it; only as the last op of a chain.

The generated Triton solution fuses the whole chain into one kernel: each program loads BLOCK_R rows of
BLOCK_D (>= D) columns, applies every op in registers and stores once. Row statistics only read real
columns (`tl.where(col_mask, ...)`), so padding never leaks into a result. tanh is 2*sigmoid(2z)-1 (no
portable tanh across Triton versions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OpKind = Literal["unary", "affine", "row", "reduce"]


@dataclass(frozen=True)
class OpTemplate:
    name: str
    kind: OpKind
    torch: str  # expression in `x`
    triton: tuple[str, ...]  # statements updating `v` (or setting `r` for a reduction)


_MAX = 'tl.max(tl.where(col_mask, v, float("-inf")), axis=1)[:, None]'
_SUM = "tl.sum(tl.where(col_mask, {e}, 0.0), axis=1)[:, None]"

OPS: dict[str, OpTemplate] = {
    t.name: t
    for t in (
        OpTemplate("relu", "unary", "torch.relu(x)", ("v = tl.maximum(v, 0.0)",)),
        OpTemplate("gelu", "unary", 'F.gelu(x, approximate="tanh")',
                   ("v = v * tl.sigmoid(1.5957691216057308 * (v + 0.044715 * v * v * v))",)),
        OpTemplate("silu", "unary", "F.silu(x)", ("v = v * tl.sigmoid(v)",)),
        OpTemplate("sigmoid", "unary", "torch.sigmoid(x)", ("v = tl.sigmoid(v)",)),
        OpTemplate("tanh", "unary", "torch.tanh(x)", ("v = 2.0 * tl.sigmoid(2.0 * v) - 1.0",)),
        OpTemplate("softplus", "unary", "F.softplus(x)",
                   ("v = tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(tl.minimum(v, 20.0))))",)),
        OpTemplate("leaky_relu", "unary", "F.leaky_relu(x, negative_slope=0.1)",
                   ("v = tl.where(v > 0.0, v, 0.1 * v)",)),
        OpTemplate("hardtanh", "unary", "F.hardtanh(x, min_val=-1.0, max_val=1.0)",
                   ("v = tl.minimum(tl.maximum(v, -1.0), 1.0)",)),
        OpTemplate("square", "unary", "x * x", ("v = v * v",)),
        OpTemplate("abs", "unary", "torch.abs(x)", ("v = tl.abs(v)",)),
        OpTemplate("scale", "unary", "x * 1.7", ("v = v * 1.7",)),
        OpTemplate("shift", "unary", "x - 0.3", ("v = v - 0.3",)),
        OpTemplate("affine", "affine", "x * self.weight + self.bias", ("v = v * w + b",)),
        OpTemplate("softmax", "row", "torch.softmax(x, dim=-1)", (
            f"m = {_MAX}",
            "e = tl.where(col_mask, tl.exp(v - m), 0.0)",
            "v = e / tl.sum(e, axis=1)[:, None]",
        )),
        OpTemplate("log_softmax", "row", "torch.log_softmax(x, dim=-1)", (
            f"m = {_MAX}",
            "e = tl.where(col_mask, tl.exp(v - m), 0.0)",
            "v = v - m - tl.log(tl.sum(e, axis=1)[:, None])",
        )),
        OpTemplate("layer_norm", "row", "F.layer_norm(x, (x.shape[-1],))", (
            "mean = " + _SUM.format(e="v") + " / D",
            "d = tl.where(col_mask, v - mean, 0.0)",
            "v = d / tl.sqrt(tl.sum(d * d, axis=1)[:, None] / D + 1e-5)",
        )),
        OpTemplate("rms_norm", "row", "x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)", (
            "ms = " + _SUM.format(e="v * v") + " / D",
            "v = v / tl.sqrt(ms + 1e-6)",
        )),
        OpTemplate("center", "row", "x - x.mean(dim=-1, keepdim=True)", ("v = v - " + _SUM.format(e="v") + " / D",)),
        OpTemplate("sum", "reduce", "torch.sum(x, dim=-1)", ("r = tl.sum(tl.where(col_mask, v, 0.0), axis=1)",)),
        OpTemplate("mean", "reduce", "torch.mean(x, dim=-1)", ("r = tl.sum(tl.where(col_mask, v, 0.0), axis=1) / D",)),
        OpTemplate("max", "reduce", "torch.amax(x, dim=-1)",
                   ('r = tl.max(tl.where(col_mask, v, float("-inf")), axis=1)',)),
        OpTemplate("logsumexp", "reduce", "torch.logsumexp(x, dim=-1)", (
            'm1 = tl.max(tl.where(col_mask, v, float("-inf")), axis=1)',
            "r = m1 + tl.log(tl.sum(tl.where(col_mask, tl.exp(v - m1[:, None]), 0.0), axis=1))",
        )),
    )
}


@dataclass(frozen=True)
class ChainSpec:
    """One synthesized problem: the op chain, the input shape and the input scale."""

    ops: tuple[str, ...]
    batch: int
    seq: int  # 0 = no middle dimension
    dim: int
    input_scale: float

    @property
    def has_affine(self) -> bool:
        return "affine" in self.ops

    @property
    def reduces(self) -> bool:
        return OPS[self.ops[-1]].kind == "reduce"


def _shape_names(spec: ChainSpec) -> str:
    return "batch_size, seq_len, dim" if spec.seq else "batch_size, dim"


def problem_source(spec: ChainSpec) -> str:
    """KernelBench-format source of the chain: Model, size constants, get_inputs, get_init_inputs."""
    chain = " -> ".join(spec.ops)
    init_sig = "self, dim: int" if spec.has_affine else "self"
    params = (
        "        self.weight = nn.Parameter(torch.randn(dim) * 0.5 + 1.0)\n"
        "        self.bias = nn.Parameter(torch.randn(dim) * 0.1)\n"
        if spec.has_affine
        else ""
    )
    body = "".join(f"        x = {OPS[op].torch}\n" for op in spec.ops)
    sizes = f"batch_size = {spec.batch}\n" + (f"seq_len = {spec.seq}\n" if spec.seq else "") + f"dim = {spec.dim}\n"
    return (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
        "class Model(nn.Module):\n"
        f'    """Synthesized chain over the last dimension: {chain}."""\n\n'
        f"    def __init__({init_sig}):\n        super().__init__()\n{params}\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        f"{body}        return x\n\n\n{sizes}\n\n"
        "def get_inputs():\n"
        f"    x = torch.randn({_shape_names(spec)}) * {spec.input_scale}\n"
        "    return [x]\n\n\n"
        "def get_init_inputs():\n"
        f"    return {'[dim]' if spec.has_affine else '[]'}\n"
    )


def _kernel_body(spec: ChainSpec) -> str:
    lines: list[str] = []
    for op in spec.ops:
        lines.extend(OPS[op].triton)
    return "".join(f"    {line}\n" for line in lines)


def solution_source(spec: ChainSpec) -> str:
    """A `ModelNew` that runs the whole chain in one fused Triton kernel (see module docstring)."""
    chain = " -> ".join(spec.ops)
    param_args = "w_ptr, b_ptr, " if spec.has_affine else ""
    param_loads = (
        "    w = tl.load(w_ptr + cols, mask=cols < D, other=0.0)[None, :]\n"
        "    b = tl.load(b_ptr + cols, mask=cols < D, other=0.0)[None, :]\n"
        if spec.has_affine
        else ""
    )
    if spec.reduces:
        store = "    tl.store(out_ptr + rows, r, mask=rows < n_rows)\n"
        out_shape = "x.shape[:-1]"
    else:
        store = "    tl.store(out_ptr + offsets, v, mask=mask)\n"
        out_shape = "x.shape"
    init_sig = "self, dim: int" if spec.has_affine else "self"
    params = (
        "        # Same RNG draws in the same order as the reference, so the parameters match under one seed.\n"
        "        self.weight = nn.Parameter(torch.randn(dim) * 0.5 + 1.0)\n"
        "        self.bias = nn.Parameter(torch.randn(dim) * 0.1)\n"
        if spec.has_affine
        else ""
    )
    launch_params = "self.weight, self.bias, " if spec.has_affine else ""
    return (
        f'"""Generated Triton solution: the chain {chain} fused in one kernel over rows of the last dim."""\n'
        "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n"
        "@triton.jit\n"
        f"def fused_chain_kernel(x_ptr, {param_args}out_ptr, n_rows, D,\n"
        "                       BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):\n"
        "    pid = tl.program_id(0)\n"
        "    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)\n"
        "    cols = tl.arange(0, BLOCK_D)\n"
        "    # col_mask: columns are padded up to a power of two; row statistics must only read real columns\n"
        "    col_mask = cols[None, :] < D\n"
        "    # mask: the last row block runs past n_rows; padded rows and columns are never loaded or stored\n"
        "    mask = (rows[:, None] < n_rows) & col_mask\n"
        "    offsets = rows[:, None] * D + cols[None, :]\n"
        "    v = tl.load(x_ptr + offsets, mask=mask, other=0.0)\n"
        f"{param_loads}{_kernel_body(spec)}{store}\n\n"
        "class ModelNew(nn.Module):\n"
        f"    def __init__({init_sig}):\n        super().__init__()\n{params}\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        x = x.contiguous()\n"
        "        D = x.shape[-1]\n"
        "        n_rows = x.numel() // D\n"
        f"        out = torch.empty({out_shape}, device=x.device, dtype=x.dtype)\n"
        "        BLOCK_D = triton.next_power_of_2(D)\n"
        "        BLOCK_R = max(1, min(16, 4096 // BLOCK_D))\n"
        "        grid = (triton.cdiv(n_rows, BLOCK_R),)\n"
        f"        fused_chain_kernel[grid](x, {launch_params}out, n_rows, D, BLOCK_R=BLOCK_R, BLOCK_D=BLOCK_D)\n"
        "        return out\n"
    )


__all__ = ["OPS", "OpTemplate", "ChainSpec", "problem_source", "solution_source"]
