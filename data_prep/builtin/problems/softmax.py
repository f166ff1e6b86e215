import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies softmax over the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 64
dim = 500


def get_inputs():
    x = torch.randn(batch_size, dim) * 2.0
    return [x]


def get_init_inputs():
    return []
