"""Reference Triton solution for builtin/rmsnorm: one program per row, x * rsqrt(mean(x^2) + eps) * weight."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_row_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    # mask: the row is padded up to a power of two; padding reads 0 and adds nothing to the sum of squares
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean_sq = tl.sum(x * x, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, x * rstd * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        # Same RNG draw as the reference, so both models hold the same weight under the same seed.
        self.weight = nn.Parameter(torch.randn(dim) * 0.1 + 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        out = torch.empty_like(x)
        grid = (x.numel() // n_cols,)
        rmsnorm_row_kernel[grid](x, self.weight, out, n_cols, self.eps, BLOCK_SIZE=triton.next_power_of_2(n_cols))
        return out
