import torch
import torch.nn as nn


class Model(nn.Module):
    """Layer normalization over the trailing dimensions."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 64
features = 16
dim = 48


def get_inputs():
    x = torch.randn(batch_size, features, dim) * 2.0 + 1.0
    return [x]


def get_init_inputs():
    return [(features, dim)]
