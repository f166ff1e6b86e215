"""Reference Triton solution for builtin/add_layernorm: (x + residual) and LayerNorm fused, one program per row.

The sum never goes to memory. Parameters keep nn.LayerNorm's names (`norm.weight`, `norm.bias`) and the
reference's initialisation (ones/zeros, then the same normal_ draws in the same order).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_layernorm_kernel(x_ptr, r_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    # mask: the row is padded up to a power of two; padding must not enter the statistics
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    r = tl.load(r_ptr + row * n_cols + cols, mask=mask, other=0.0)
    h = x + r
    mean = tl.sum(h, axis=0) / n_cols
    centered = tl.where(mask, h - mean, 0.0)
    var = tl.sum(centered * centered, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, centered * rstd * w + b, mask=mask)


class _NormParams(nn.Module):
    """nn.LayerNorm's parameters under the same names."""

    def __init__(self, hidden: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = _NormParams(hidden)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)
        self.eps = 1e-5

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        residual = residual.contiguous()
        n_cols = x.shape[-1]
        out = torch.empty_like(x)
        grid = (x.numel() // n_cols,)
        add_layernorm_kernel[grid](
            x, residual, self.norm.weight, self.norm.bias, out, n_cols, self.eps,
            BLOCK_SIZE=triton.next_power_of_2(n_cols),
        )
        return out
