import torch
import torch.nn as nn


class Model(nn.Module):
    """Computes log(sum(exp(x))) over one dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(x, dim=self.dim)


batch_size = 64
dim = 1000
reduce_dim = 1


def get_inputs():
    x = torch.randn(batch_size, dim) * 3.0
    return [x]


def get_init_inputs():
    return [reduce_dim]
