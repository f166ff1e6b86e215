"""Reference Triton solution for builtin/layernorm: one program per normalized slice (two-pass mean/variance).

The trailing `normalized_shape` dimensions are flattened into one row of n_cols elements; weight and bias
(same names and initial values as nn.LayerNorm: ones and zeros) are applied in the same kernel.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_row_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    # mask: the row is padded up to a power of two; padding must not enter the statistics
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centered * centered, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, centered * rstd * w + b, mask=mask)


class _NormParams(nn.Module):
    """The parameters of nn.LayerNorm under the same names, initialised the same way (ones and zeros)."""

    def __init__(self, shape: tuple):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.ln = _NormParams(self.normalized_shape)
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = math.prod(self.normalized_shape)
        out = torch.empty_like(x)
        grid = (x.numel() // n_cols,)
        layernorm_row_kernel[grid](
            x, self.ln.weight, self.ln.bias, out, n_cols, self.eps, BLOCK_SIZE=triton.next_power_of_2(n_cols)
        )
        return out
