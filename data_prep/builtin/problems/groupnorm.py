import torch
import torch.nn as nn


class Model(nn.Module):
    """Group normalization of an NCHW tensor."""

    def __init__(self, num_groups: int, num_features: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


batch_size = 4
features = 32
num_groups = 8
height = 16
width = 16


def get_inputs():
    x = torch.randn(batch_size, features, height, width) * 2.0 + 0.5
    return [x]


def get_init_inputs():
    return [num_groups, features]
