"""Reference Triton solution for builtin/cumsum: one program per row, chunked scan with a running carry.

The scanned dimension is moved last (a copy only when it is not already last) and moved back after.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cumsum_row_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    carry = tl.zeros((), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        # mask: the last chunk runs past the row; padding reads 0 and does not change the prefix sums
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
        scanned = tl.cumsum(x, axis=0) + carry
        tl.store(out_ptr + row * n_cols + cols, scanned, mask=mask)
        carry += tl.sum(x, axis=0)


def triton_cumsum(x: torch.Tensor, dim: int) -> torch.Tensor:
    dim = dim % x.dim()
    moved = dim != x.dim() - 1
    xt = (x.transpose(dim, -1) if moved else x).contiguous()
    n_cols = xt.shape[-1]
    out = torch.empty_like(xt)
    BLOCK_SIZE = min(triton.next_power_of_2(n_cols), 1024)
    cumsum_row_kernel[(xt.numel() // n_cols,)](xt, out, n_cols, BLOCK_SIZE=BLOCK_SIZE)
    return out.transpose(dim, -1) if moved else out


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_cumsum(x, self.dim)
