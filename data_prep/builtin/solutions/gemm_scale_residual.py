"""Reference Triton solution for builtin/gemm_scale_residual: (x @ W^T + b) * scale + x in one kernel.

The residual is read from the output tile's own coordinates of x (features == in_features), so the
epilogue costs one extra tile load. Parameters keep nn.Linear's names and initialisation.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_scale_residual_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, scale,
                               stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        # masks: rows past M, output features past N and the K tail read 0 (no contribution)
        x = tl.load(x_ptr + rm[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + k[:, None] * stride_wk + rn[None, :] * stride_wn,
                    mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    # mask: the bias vector ends at N
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    # mask: edge tiles run past M and N
    out_mask = (rm[:, None] < M) & (rn[None, :] < N)
    residual = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :] * stride_xk, mask=out_mask, other=0.0)
    acc = (acc + bias[None, :]) * scale + residual
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :] * stride_on, acc, mask=out_mask)


class _LinearParams(nn.Module):
    """nn.Linear's parameters under the same names, initialised with the same RNG draws."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.linear = _LinearParams(features, features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight
        M, K = x.shape
        N = w.shape[0]
        out = torch.empty((M, N), device=x.device, dtype=x.dtype)
        BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 32
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        gemm_scale_residual_kernel[grid](
            x, w, self.linear.bias, out, M, N, K, float(self.scale),
            x.stride(0), x.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        )
        return out
