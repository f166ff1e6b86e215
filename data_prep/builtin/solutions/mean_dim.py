"""Reference Triton solution for builtin/mean_dim.

The input is viewed as (outer, R, inner) with R the reduced dimension; each program owns BLOCK_J output
elements and walks R in chunks of BLOCK_R, accumulating the sum in fp32 and scaling by 1/R at the end.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_dim_kernel(x_ptr, out_ptr, n_out, R, INNER, BLOCK_R: tl.constexpr, BLOCK_J: tl.constexpr):
    pid = tl.program_id(0)
    j = pid * BLOCK_J + tl.arange(0, BLOCK_J)
    # mask: the last block of outputs runs past outer * inner
    j_mask = j < n_out
    base = (j // INNER) * R * INNER + j % INNER
    acc = tl.zeros((BLOCK_J,), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        # mask: the R tail and the output tail read 0, which adds nothing to the sum
        mask = (r[:, None] < R) & j_mask[None, :]
        tile = tl.load(x_ptr + base[None, :] + r[:, None] * INNER, mask=mask, other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(out_ptr + j, acc / R, mask=j_mask)


def triton_mean_dim(x: torch.Tensor, dim: int) -> torch.Tensor:
    x = x.contiguous()
    dim = dim % x.dim()
    shape = list(x.shape)
    R = shape[dim]
    inner = math.prod(shape[dim + 1:])
    out = torch.empty(shape[:dim] + shape[dim + 1:], device=x.device, dtype=x.dtype)
    n_out = out.numel()
    BLOCK_J = 64
    BLOCK_R = min(triton.next_power_of_2(R), 64)
    grid = (triton.cdiv(n_out, BLOCK_J),)
    mean_dim_kernel[grid](x, out, n_out, R, inner, BLOCK_R=BLOCK_R, BLOCK_J=BLOCK_J)
    return out


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_mean_dim(x, self.dim)
