"""Fixtures of the agents tests: two KernelBench-format problems with Triton solutions, three skills, a
profile, and two evaluator doubles standing in for kernelgym's `evaluate_batch`:

- `interpret_evaluate`: runs the candidate in this process under the Triton interpreter (TRITON_INTERPRET=1)
  and compares ModelNew with Model on seeded inputs. A test double: no sandbox, no timing (speedup None),
  trusted test code only; the real evaluator is kernelgym's (tested in tests/kernelgym).
- `canned_evaluate`: returns fixed verdicts keyed on a marker in the code (for runner logic tests).
"""

from __future__ import annotations

import importlib.util
import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import torch

from davinci.config import Profile
from davinci.kernelgym.result import EvalResult
from davinci.rl.rewards import minimal_result
from davinci.skills import AppliesTo, Example, Preconditions, Skill
from davinci.types import Candidate, Problem

RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 4
dim = 300


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

RELU_SOLUTION = '''"""Reference Triton solution for test/relu: one elementwise kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # mask: the last block runs past the end
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 256),)](x, out, n, BLOCK_SIZE=256)
        return out
'''

ADD = RELU.replace('"""Applies ReLU."""', '"""Adds two tensors."""').replace("def forward(self, x):\n        return torch.relu(x)", "def forward(self, a, b):\n        return a + b").replace(
    "return [torch.randn(batch_size, dim)]", "return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]"
)

ADD_SOLUTION = '''"""Reference Triton solution for test/add: one elementwise kernel over both inputs."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        out = torch.empty_like(a)
        n = a.numel()
        add_kernel[(triton.cdiv(n, 256),)](a.contiguous(), b.contiguous(), out, n, BLOCK_SIZE=256)
        return out
'''

def make_skill(sid: str, title: str, ops: tuple[str, ...]) -> Skill:
    return Skill(
        id=sid,
        title=title,
        intent=f"Fuse {', '.join(ops)} into one pass over memory.",
        applies_to=AppliesTo(ops=ops, patterns=("elementwise",)),
        preconditions=Preconditions(dtypes=("fp32",)),
        guidance="1. Flatten the tensor.\n2. One program per BLOCK_SIZE elements, masked tail.\n3. Launch with triton.cdiv.",
        backend="triton",
        example=Example(RELU, RELU_SOLUTION),
        status="admitted",
    )


@pytest.fixture(scope="session")
def problems() -> list[Problem]:
    return [
        Problem("test/relu", "builtin", 1, "relu", RELU, RELU_SOLUTION, ("elementwise", "relu")),
        Problem("test/add", "builtin", 1, "add", ADD, ADD_SOLUTION, ("elementwise", "add")),
    ]


@pytest.fixture(scope="session")
def skills() -> list[Skill]:
    """Three small skills (used directly by the prompt tests)."""
    return [
        make_skill("flat-elementwise-relu", "Flat elementwise ReLU kernel", ("relu",)),
        make_skill("flat-elementwise-add", "Flat elementwise add kernel", ("add",)),
        make_skill("masked-tail-blocks", "Masked tail blocks for any size", ("relu", "add", "mul")),
    ]


@pytest.fixture(scope="session")
def library(skills) -> list[Skill]:
    """The skills package's seed skills plus the three above: enough documents for BM25 to rank."""
    from davinci.skills import seed_skills

    return seed_skills() + skills


@pytest.fixture
def profile() -> Profile:
    p = Profile()
    return replace(
        p,
        agents=replace(p.agents, turns=2, max_new_tokens=64, selection_max_new_tokens=16, summary_max_new_tokens=32),
        skills=replace(p.skills, bm25_top_k=3, select_k=2),
    )


def LocalResult(correct: bool, compiled: bool, feedback: str, speedup: float | None = None, error_kind: str | None = None) -> EvalResult:  # noqa: N802
    """A real EvalResult from the in-process double (the fields the runner reads; the rest empty)."""
    return minimal_result(correct, speedup, compiled=compiled, feedback=feedback, error_kind=error_kind)


_counter = itertools.count()


def _interpret_one(problem: Problem, cand: Candidate, tmp_dir) -> LocalResult:
    path = tmp_dir / f"cand_{next(_counter)}.py"
    path.write_text(cand.code)
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        ns: dict[str, Any] = {}
        exec(problem.code, ns)
        torch.manual_seed(0)
        inputs, init = ns["get_inputs"](), ns["get_init_inputs"]()
        torch.manual_seed(1)
        ref = ns["Model"](*init)
        torch.manual_seed(1)
        new = module.ModelNew(*init)
    except Exception as exc:  # noqa: BLE001 - a test double reports, never raises
        return LocalResult(False, False, f"compile error: {type(exc).__name__}: {exc}", error_kind="compile")
    try:
        with torch.no_grad():
            want, got = ref(*inputs), new(*inputs)
    except Exception as exc:  # noqa: BLE001
        return LocalResult(False, True, f"runtime error: {type(exc).__name__}: {exc}", error_kind="runtime")
    if got.shape != want.shape or not torch.allclose(got, want, atol=1e-4, rtol=1e-4):
        err = float((got - want).abs().max()) if got.shape == want.shape else float("inf")
        return LocalResult(False, True, f"verdict: wrong output (max abs error {err:.3g})", error_kind="mismatch")
    return LocalResult(True, True, "verdict: correct")


@pytest.fixture
def interpret_evaluate(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    calls: list[int] = []

    def evaluate(items):
        calls.append(len(items))
        return [_interpret_one(p, c, tmp_path) for p, c in items]

    evaluate.calls = calls  # type: ignore[attr-defined]
    return evaluate


@pytest.fixture
def canned_evaluate():
    """CORRECT-FAST -> correct, speedup 2.0; CORRECT -> correct, speedup 0.5; else a mismatch."""

    def evaluate(items):
        out = []
        for _, cand in items:
            if "CORRECT-FAST" in cand.code:
                out.append(LocalResult(True, True, "verdict: correct, 2.0x", speedup=2.0))
            elif "CORRECT" in cand.code:
                out.append(LocalResult(True, True, "verdict: correct, 0.5x", speedup=0.5))
            else:
                out.append(LocalResult(False, True, "verdict: wrong output (max abs error 1.0)", error_kind="mismatch"))
        return out

    return evaluate
