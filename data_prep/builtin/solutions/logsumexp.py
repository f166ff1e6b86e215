"""Reference Triton solution for builtin/logsumexp: one program per row, max-shifted for stability.

The reduced dimension is moved last (a copy only when it is not already last); each program holds one row
of up to BLOCK_SIZE elements in registers.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def logsumexp_row_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    # mask: the row is padded up to a power of two; padding reads -inf so exp() gives 0
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    row_max = tl.max(x, axis=0)
    total = tl.sum(tl.exp(x - row_max), axis=0)
    tl.store(out_ptr + row, row_max + tl.log(total))


def triton_logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    dim = dim % x.dim()
    if dim != x.dim() - 1:
        x = x.transpose(dim, -1)
    x = x.contiguous()
    n_cols = x.shape[-1]
    out = torch.empty(x.shape[:-1], device=x.device, dtype=x.dtype)
    n_rows = out.numel()
    logsumexp_row_kernel[(n_rows,)](x, out, n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return out


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_logsumexp(x, self.dim)
