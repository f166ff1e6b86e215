"""Fixtures of the llm tests: a small code corpus and tiny backbones (hidden 64, 2 layers) built from it."""

from __future__ import annotations

import copy

import pytest

from davinci.llm.config import ModelConfig
from davinci.llm.tiny import create_tiny_backbone

RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(16, 256)]


def get_init_inputs():
    return []
'''

RELU_TRITON = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        return out
'''

CORPUS = [RELU, RELU_TRITON, RELU.replace("relu", "sigmoid"), RELU_TRITON.replace("relu", "sigmoid"),
          "You are an expert GPU kernel engineer. Write fast kernels.\nSkills that may help:\n"] * 2

TINY = ModelConfig(tiny_hidden=64, tiny_layers=2, tiny_heads=4, tiny_vocab=1024, max_seq_len=1024)


@pytest.fixture(scope="session")
def tiny_backbone_session():
    return create_tiny_backbone(CORPUS, TINY, seed=0, device="cpu")


@pytest.fixture
def tiny_backbone(tiny_backbone_session):
    """A private copy (tests may train it)."""
    return copy.deepcopy(tiny_backbone_session)


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return list(CORPUS)


@pytest.fixture(scope="session")
def tiny_cfg() -> ModelConfig:
    return TINY
