import torch
import torch.nn as nn


class Model(nn.Module):
    """Averages over one dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.dim)


batch_size = 32
dim1 = 64
dim2 = 32
reduce_dim = 2


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2) + 0.5
    return [x]


def get_init_inputs():
    return [reduce_dim]
