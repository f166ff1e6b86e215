"""Fixtures of the skills tests: the evaluator (real kernelgym when importable, else the local double),
a CPU gym config, and small skills built from literal sources.

The switch to the real evaluator goes only through the contract: `davinci.kernelgym.evaluate` and
`davinci.kernelgym.shape_variants`. Until kernelgym exports them, `gym_double.py` (a real subprocess
runner on the Triton interpreter, without hack checks) stands in.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from davinci.skills.schema import AppliesTo, Example, Preconditions, Skill, SkillProvenance

HERE = Path(__file__).resolve().parent


def _load_double():
    spec = importlib.util.spec_from_file_location("skills_gym_double", HERE / "gym_double.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture(scope="session")
def gym_double():
    return _load_double()


@pytest.fixture(scope="session")
def gym(gym_double):
    """evaluate / shape_variants / a CPU GymConfig, from kernelgym when it offers them."""
    from davinci.kernelgym.config import GymConfig

    try:
        from davinci.kernelgym import evaluate, shape_variants  # type: ignore[attr-defined]

        return SimpleNamespace(evaluate=evaluate, shape_variants=shape_variants, config=GymConfig(device="cpu"), real=True)
    except ImportError:
        return SimpleNamespace(evaluate=gym_double.evaluate, shape_variants=gym_double.shape_variants, config=GymConfig(device="cpu"), real=False)


PROBLEM_ADD_RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.relu(x + y)


rows = 64
cols = 4096


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

SOLUTION_ADD_RELU = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_relu(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(x_ptr + offs, mask=mask, other=0.0) + tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(s, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        _add_relu[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
'''

# Correct only when rows * cols == 8 * 300 (the CPU example size): the element count is hard-coded.
SOLUTION_ADD_RELU_HARDCODED = SOLUTION_ADD_RELU.replace("n = x.numel()", "n = 2400")


def make_skill(
    skill_id: str = "test-add-relu",
    *,
    title: str = "Fuse add and relu into one Triton kernel",
    intent: str = "Add two tensors and apply relu in one pass instead of two eager kernels.",
    guidance: str = "Load both inputs with a tail mask, add, clamp at zero, store once.",
    ops: tuple[str, ...] = ("add", "relu"),
    patterns: tuple[str, ...] = ("elementwise chain",),
    before: str = PROBLEM_ADD_RELU,
    after: str = SOLUTION_ADD_RELU,
    cpu_shapes: tuple[tuple[str, int], ...] = (("rows", 8), ("cols", 300)),
    backend: str = "triton",
    status: str = "candidate",
    failure_modes: tuple[str, ...] = ("missing tail mask",),
    provenance: SkillProvenance | None = None,
) -> Skill:
    return Skill(
        id=skill_id,
        title=title,
        intent=intent,
        applies_to=AppliesTo(ops, patterns),
        preconditions=Preconditions(("fp32",), "any", "contiguous", "any GPU"),
        guidance=guidance,
        backend=backend,  # type: ignore[arg-type]
        example=Example(before, after, cpu_shapes),
        failure_modes=failure_modes,
        provenance=provenance or SkillProvenance(kind="summary", episode_id="ep-1", epoch=1, problem_id="builtin/add_relu"),
        status=status,  # type: ignore[arg-type]
    )


@pytest.fixture
def skill_factory():
    return make_skill


@pytest.fixture(scope="session")
def sources():
    return SimpleNamespace(problem=PROBLEM_ADD_RELU, solution=SOLUTION_ADD_RELU, hardcoded=SOLUTION_ADD_RELU_HARDCODED)
