import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-feature scale and shift, tanh, then an elementwise product with a gate tensor."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))
        self.shift = nn.Parameter(torch.randn(dim) * 0.5)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * self.scale + self.shift) * gate


batch_size = 64
dim = 512


def get_inputs():
    x = torch.randn(batch_size, dim)
    gate = torch.randn(batch_size, dim) * 2.0
    return [x, gate]


def get_init_inputs():
    return [dim]
