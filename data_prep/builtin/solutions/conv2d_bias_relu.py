"""Reference Triton solution for builtin/conv2d_bias_relu: direct convolution with a fused bias + ReLU epilogue.

One program per (sample, block of BLOCK_P output pixels) computes all output channels at once: for each
input channel and kernel tap it loads a pixel vector and a channel vector and accumulates their outer
product. Parameters keep nn.Conv2d's names (`conv.weight`, `conv.bias`) and initialisation (same RNG draws).
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv2d_bias_relu_kernel(x_ptr, w_ptr, conv_b_ptr, b_ptr, out_ptr, C_IN, H, W, C_OUT, OH, OW,
                            KS: tl.constexpr, BLOCK_OC: tl.constexpr, BLOCK_P: tl.constexpr):
    n = tl.program_id(0)
    pid_p = tl.program_id(1)
    p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    oc = tl.arange(0, BLOCK_OC)
    # masks: the last pixel block runs past OH * OW; the channel block is padded to a power of two
    p_mask = p < OH * OW
    oc_mask = oc < C_OUT
    # top-left input pixel of each output pixel's window, and each output channel's filter
    x_base = x_ptr + n * C_IN * H * W + (p // OW) * W + p % OW
    w_base = w_ptr + oc * C_IN * KS * KS
    acc = tl.zeros((BLOCK_OC, BLOCK_P), dtype=tl.float32)
    for ic in range(0, C_IN):
        for kh in tl.static_range(KS):
            for kw in tl.static_range(KS):
                xv = tl.load(x_base + (ic * H + kh) * W + kw, mask=p_mask, other=0.0)
                wv = tl.load(w_base + (ic * KS + kh) * KS + kw, mask=oc_mask, other=0.0)
                acc += wv[:, None] * xv[None, :]
    bias = tl.load(conv_b_ptr + oc, mask=oc_mask, other=0.0) + tl.load(b_ptr + oc, mask=oc_mask, other=0.0)
    acc = tl.maximum(acc + bias[:, None], 0.0)
    out_offsets = (n * C_OUT + oc[:, None]) * (OH * OW) + p[None, :]
    tl.store(out_ptr + out_offsets, acc, mask=oc_mask[:, None] & p_mask[None, :])


class _ConvParams(nn.Module):
    """nn.Conv2d's parameters under the same names, initialised with the same RNG draws."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1.0 / math.sqrt(in_channels * kernel_size * kernel_size)
        nn.init.uniform_(self.bias, -bound, bound)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias_shape: tuple):
        super().__init__()
        self.conv = _ConvParams(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)
        self.kernel_size = kernel_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c_in, h, w = x.shape
        c_out = self.conv.weight.shape[0]
        oh, ow = h - self.kernel_size + 1, w - self.kernel_size + 1
        out = torch.empty((n, c_out, oh, ow), device=x.device, dtype=x.dtype)
        BLOCK_P = 256
        grid = (n, triton.cdiv(oh * ow, BLOCK_P))
        conv2d_bias_relu_kernel[grid](
            x, self.conv.weight, self.conv.bias, self.bias, out, c_in, h, w, c_out, oh, ow,
            KS=self.kernel_size, BLOCK_OC=triton.next_power_of_2(c_out), BLOCK_P=BLOCK_P,
        )
        return out
