"""Reference Triton solution for builtin/mse_loss: a two-stage reduction.

Stage 1: each program sums (p - t)^2 over BLOCK_SIZE elements into one partial. Stage 2: one program sums
the partials and divides by n. Two stages keep the result deterministic (no atomics).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def squared_error_partial_kernel(p_ptr, t_ptr, partial_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # mask: the last block runs past the end; padding reads 0 - 0 and adds nothing
    mask = offsets < n_elements
    p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
    t = tl.load(t_ptr + offsets, mask=mask, other=0.0)
    d = p - t
    tl.store(partial_ptr + pid, tl.sum(d * d, axis=0))


@triton.jit
def mean_of_partials_kernel(partial_ptr, out_ptr, n_partials, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n_partials, BLOCK_SIZE):
        # mask: the last chunk runs past the partials
        mask = start + offs < n_partials
        acc += tl.load(partial_ptr + start + offs, mask=mask, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n_elements)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        p = predictions.contiguous()
        t = targets.contiguous()
        n_elements = p.numel()
        BLOCK_SIZE = 1024
        n_partials = triton.cdiv(n_elements, BLOCK_SIZE)
        partials = torch.empty(n_partials, device=p.device, dtype=torch.float32)
        squared_error_partial_kernel[(n_partials,)](p, t, partials, n_elements, BLOCK_SIZE=BLOCK_SIZE)
        out = torch.empty(1, device=p.device, dtype=p.dtype)
        mean_of_partials_kernel[(1,)](partials, out, n_partials, n_elements, BLOCK_SIZE=256)
        return out.reshape(())
