"""Static analysis: operator signatures resolved through modules, canonical tokens, interface checks."""

from __future__ import annotations

from data_prep.source_ast import (
    canonical_op,
    canonical_tokens,
    check_interface,
    operator_signature,
    signature_family,
)

NESTED = """import math
import torch
import torch.nn as nn
import torch.nn.functional as F

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
    def forward(self, x):
        return F.gelu(self.fc(x)) + x

class Model(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        layers = []
        for _ in range(n):
            layers.append(nn.Linear(d, d))
            layers.append(nn.ReLU())
        self.mlp = nn.Sequential(*layers)
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
        self.norm = nn.LayerNorm(d)
    def forward(self, x):
        x = self.mlp(x).view(x.size(0), -1)
        for block in self.blocks:
            x = block(x)
        x = x * math.sqrt(2.0 / math.pi)
        return torch.softmax(self.norm(x), dim=-1).sum(dim=1)

def get_inputs():
    return [torch.rand(8, 16)]

def get_init_inputs():
    return [16, 2]
"""


def test_signature_resolves_modules_lists_user_classes_and_methods():
    assert operator_signature(NESTED) == ("linear", "relu", "linear", "gelu", "add", "mul", "layernorm", "softmax", "sum")


def test_signature_aliases_and_static_arithmetic():
    code = NESTED.replace("torch.softmax", "F.softmax").replace(".sum(dim=1)", ".amax(dim=1)")
    assert operator_signature(code)[-2:] == ("softmax", "max")
    assert canonical_op("CrossEntropyLoss") == canonical_op("cross_entropy") == "crossentropy"
    assert canonical_op("BatchNorm2d") == canonical_op("batch_norm") == "batchnorm"
    assert canonical_op("bmm") == "matmul"
    # `math.sqrt(2.0 / math.pi)` is Python arithmetic: neither sqrt nor div is a tensor operator.
    assert "sqrt" not in operator_signature(NESTED) and "div" not in operator_signature(NESTED)


def test_canonical_tokens_ignore_names_sizes_comments_and_docstrings():
    renamed = (
        NESTED.replace("layers", "stack").replace("self.norm", "self.ln").replace("Block", "Unit")
        .replace("(8, 16)", "(1024, 4096)").replace("[16, 2]", "[4096, 3]")
        .replace("def forward(self, x):\n        x =", 'def forward(self, x):\n        """doc"""  # note\n        x =')
    )
    assert renamed != NESTED
    assert canonical_tokens(renamed) == canonical_tokens(NESTED)
    assert canonical_tokens(NESTED.replace("torch.softmax", "torch.log_softmax")) != canonical_tokens(NESTED)
    assert "ID" in canonical_tokens(NESTED) and "NUM" in canonical_tokens(NESTED)


def test_interface_check():
    assert check_interface(NESTED).ok
    missing = check_interface(NESTED.replace("def get_init_inputs", "def init_inputs"))
    assert not missing.ok and missing.missing == ("get_init_inputs",)
    broken = check_interface("class Model(:\n")
    assert not broken.ok and "syntax error" in broken.error


def test_signature_family_drops_layout():
    assert signature_family(("linear", "relu", "transpose")) == "activation+matmul"
    assert signature_family(("conv2d", "maxpool2d")) == "conv+pool"
    assert signature_family(()) == "empty"
