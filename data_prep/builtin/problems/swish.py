import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies Swish (x * sigmoid(x)) elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


batch_size = 32
dim = 2000


def get_inputs():
    x = torch.randn(batch_size, dim) * 3.0
    return [x]


def get_init_inputs():
    return []
