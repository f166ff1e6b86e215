"""Reference Triton solution for builtin/softmax: one program per row, max-shifted for stability."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    # mask: the row is padded up to a power of two; padding reads -inf so exp() gives 0
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    numerator = tl.exp(x - tl.max(x, axis=0))
    denominator = tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * n_cols + cols, numerator / denominator, mask=mask)


def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    out = torch.empty_like(x)
    softmax_row_kernel[(n_rows,)](x, out, n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_softmax(x)
