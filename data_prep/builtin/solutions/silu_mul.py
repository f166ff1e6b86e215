"""Reference Triton solution for builtin/silu_mul: silu(a) * b where a, b are the two halves of the last dim.

One elementwise kernel over the (rows, half) output: output element (row, col) reads x[row, col] and
x[row, half + col]; the split is pure indexing, no copies.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def silu_mul_kernel(x_ptr, out_ptr, n_out, half, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # mask: the last block runs past the end of the output
    mask = offsets < n_out
    row = offsets // half
    col = offsets % half
    a = tl.load(x_ptr + row * (2 * half) + col, mask=mask, other=0.0)
    b = tl.load(x_ptr + row * (2 * half) + half + col, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, a * tl.sigmoid(a) * b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        half = x.shape[-1] // 2
        out = torch.empty(x.shape[:-1] + (half,), device=x.device, dtype=x.dtype)
        n_out = out.numel()
        BLOCK_SIZE = 1024
        grid = (triton.cdiv(n_out, BLOCK_SIZE),)
        silu_mul_kernel[grid](x, out, n_out, half, BLOCK_SIZE=BLOCK_SIZE)
        return out
