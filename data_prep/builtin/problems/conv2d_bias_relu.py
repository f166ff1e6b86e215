import torch
import torch.nn as nn


class Model(nn.Module):
    """2D convolution (no padding, stride 1), plus a per-channel bias, then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias_shape: tuple):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = x + self.bias
        return torch.relu(x)


batch_size = 4
in_channels = 4
out_channels = 16
height = width = 18
kernel_size = 3
bias_shape = (out_channels, 1, 1)


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
