import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Applies GELU with the tanh approximation elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


batch_size = 64
dim = 1000


def get_inputs():
    x = torch.randn(batch_size, dim) * 2.0
    return [x]


def get_init_inputs():
    return []
