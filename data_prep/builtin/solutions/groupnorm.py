"""Reference Triton solution for builtin/groupnorm.

One program per (sample, group): in NCHW the group's (C/G) * H * W elements are contiguous, so the program
walks them in BLOCK_SIZE chunks three times (mean, variance, normalize + per-channel affine).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def groupnorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, group_size, HW, CHANNELS_PER_GROUP, num_groups, eps,
                     BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    group = pid % num_groups
    base = pid * group_size
    offs = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, group_size, BLOCK_SIZE):
        # mask: the last chunk runs past the group; padding reads 0 and adds nothing
        mask = start + offs < group_size
        acc += tl.load(x_ptr + base + start + offs, mask=mask, other=0.0)
    mean = tl.sum(acc, axis=0) / group_size
    acc_sq = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, group_size, BLOCK_SIZE):
        # mask: the last chunk runs past the group; padding must not enter the variance
        mask = start + offs < group_size
        x = tl.load(x_ptr + base + start + offs, mask=mask, other=0.0)
        d = tl.where(mask, x - mean, 0.0)
        acc_sq += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc_sq, axis=0) / group_size + eps)
    for start in range(0, group_size, BLOCK_SIZE):
        # mask: the last chunk runs past the group
        mask = start + offs < group_size
        x = tl.load(x_ptr + base + start + offs, mask=mask, other=0.0)
        channel = group * CHANNELS_PER_GROUP + (start + offs) // HW
        w = tl.load(w_ptr + channel, mask=mask, other=0.0)
        b = tl.load(b_ptr + channel, mask=mask, other=0.0)
        tl.store(out_ptr + base + start + offs, (x - mean) * rstd * w + b, mask=mask)


class _NormParams(nn.Module):
    """The parameters of nn.GroupNorm under the same names, initialised the same way (ones and zeros)."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))


class ModelNew(nn.Module):
    def __init__(self, num_groups: int, num_features: int):
        super().__init__()
        self.num_groups = num_groups
        self.gn = _NormParams(num_features)
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c = x.shape[0], x.shape[1]
        hw = x.numel() // (n * c)
        channels_per_group = c // self.num_groups
        out = torch.empty_like(x)
        grid = (n * self.num_groups,)
        groupnorm_kernel[grid](
            x, self.gn.weight, self.gn.bias, out, channels_per_group * hw, hw, channels_per_group,
            self.num_groups, self.eps, BLOCK_SIZE=1024,
        )
        return out
