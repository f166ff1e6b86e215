"""Reference Triton solution for builtin/scale_bias_tanh_mul: tanh(x * scale + shift) * gate in one kernel.

tanh is computed as 2 * sigmoid(2z) - 1 (Triton has no portable tanh across versions). The per-feature
scale and shift are gathered by column index (offset % dim).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_bias_tanh_mul_kernel(x_ptr, gate_ptr, scale_ptr, shift_ptr, out_ptr, n_elements, dim,
                               BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # mask: the last block runs past the end of the tensor
    mask = offsets < n_elements
    col = offsets % dim
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    g = tl.load(gate_ptr + offsets, mask=mask, other=0.0)
    s = tl.load(scale_ptr + col, mask=mask, other=0.0)
    b = tl.load(shift_ptr + col, mask=mask, other=0.0)
    z = x * s + b
    t = 2.0 * tl.sigmoid(2.0 * z) - 1.0
    tl.store(out_ptr + offsets, t * g, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        # Same RNG draws in the same order as the reference, so the parameters match under the same seed.
        self.scale = nn.Parameter(torch.randn(dim))
        self.shift = nn.Parameter(torch.randn(dim) * 0.5)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        gate = gate.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        BLOCK_SIZE = 1024
        grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
        scale_bias_tanh_mul_kernel[grid](
            x, gate, self.scale, self.shift, out, n_elements, x.shape[-1], BLOCK_SIZE=BLOCK_SIZE
        )
        return out
