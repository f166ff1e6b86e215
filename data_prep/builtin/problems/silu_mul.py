import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """SwiGLU-style gate: split the last dimension in two halves a, b and return silu(a) * b."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.chunk(x, 2, dim=-1)
        return F.silu(a) * b


batch_size = 64
dim = 1024


def get_inputs():
    x = torch.randn(batch_size, dim) * 2.0
    return [x]


def get_init_inputs():
    return []
