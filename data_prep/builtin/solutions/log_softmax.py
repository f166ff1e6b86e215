"""Reference Triton solution for builtin/log_softmax: one program per row, x - max - log(sum(exp(x - max))).

The normalized dimension is moved last (a copy only when it is not already last) and moved back after.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_row_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    # mask: the row is padded up to a power of two; padding reads -inf so exp() gives 0
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    shifted = x - tl.max(x, axis=0)
    log_denominator = tl.log(tl.sum(tl.exp(shifted), axis=0))
    tl.store(out_ptr + row * n_cols + cols, shifted - log_denominator, mask=mask)


def triton_log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    dim = dim % x.dim()
    moved = dim != x.dim() - 1
    xt = (x.transpose(dim, -1) if moved else x).contiguous()
    n_cols = xt.shape[-1]
    out = torch.empty_like(xt)
    log_softmax_row_kernel[(xt.numel() // n_cols,)](xt, out, n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return out.transpose(dim, -1) if moved else out


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_log_softmax(x, self.dim)
