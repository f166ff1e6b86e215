"""Reference Triton solution for builtin/cross_entropy.

Stage 1: one program per row computes logsumexp(row) - row[target] (max-shifted). Stage 2: one program
averages the per-row losses. Targets are int64 class indices, as F.cross_entropy expects.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cross_entropy_row_kernel(logits_ptr, targets_ptr, loss_ptr, n_classes, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    # mask: the row is padded up to a power of two; padding reads -inf so exp() gives 0
    mask = cols < n_classes
    logits = tl.load(logits_ptr + row * n_classes + cols, mask=mask, other=float("-inf"))
    row_max = tl.max(logits, axis=0)
    lse = row_max + tl.log(tl.sum(tl.exp(logits - row_max), axis=0))
    target = tl.load(targets_ptr + row)
    target_logit = tl.load(logits_ptr + row * n_classes + target)
    tl.store(loss_ptr + row, lse - target_logit)


@triton.jit
def mean_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n, BLOCK_SIZE):
        # mask: the last chunk runs past n; padding reads 0
        mask = start + offs < n
        acc += tl.load(x_ptr + start + offs, mask=mask, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = logits.contiguous()
        targets = targets.contiguous()
        n_rows, n_classes = logits.shape
        losses = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
        cross_entropy_row_kernel[(n_rows,)](
            logits, targets, losses, n_classes, BLOCK_SIZE=triton.next_power_of_2(n_classes)
        )
        out = torch.empty(1, device=logits.device, dtype=logits.dtype)
        mean_kernel[(1,)](losses, out, n_rows, BLOCK_SIZE=128)
        return out.reshape(())
