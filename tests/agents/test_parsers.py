"""Code extraction from model output: the ModelNew block wins, fences may be unclosed, garbage never raises."""

from __future__ import annotations

import random

import pytest

from davinci.agents.parsers import detect_backend_hint, extract_code

NEW = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
HELPER = "def helper():\n    return 1\n"


def test_single_python_block():
    r = extract_code(f"Here you go:\n```python\n{NEW}```\nDone.")
    assert r.ok and r.reason == "ok" and r.code == NEW and r.blocks == 1 and not r.unclosed


def test_the_block_defining_modelnew_wins_over_helpers_and_the_last_one_over_earlier_drafts():
    draft = NEW.replace("return x", "return x * 0")
    text = f"```python\n{HELPER}```\n```python\n{draft}```\nBetter:\n```py\n{NEW}```\n```cpp\n__global__ void k() {{}}\n```"
    r = extract_code(text)
    assert r.ok and r.code == NEW and r.blocks == 4


def test_unclosed_fence_runs_to_the_end():
    r = extract_code(f"```python\n{NEW}    # generation stopped here")
    assert r.ok and r.unclosed and r.code.startswith("import torch") and "stopped here" in r.code


def test_fence_without_language_tag():
    assert extract_code(f"```\n{NEW}```").code == NEW


def test_unfenced_valid_code_is_accepted_but_prose_is_not():
    assert extract_code(NEW).reason == "unfenced"
    assert extract_code("I would write class ModelNew with a kernel.").reason == "no_code_block"


@pytest.mark.parametrize(
    "text,reason",
    [("", "empty"), ("   \n", "empty"), (None, "empty"), (42, "empty"), ("no code here", "no_code_block"),
     (f"```python\n{HELPER}```", "no_model_new"), ("```python\nclass Model(nn.Module):\n    pass\n```", "no_model_new")],
)
def test_failures_are_typed(text, reason):
    r = extract_code(text)
    assert not r.ok and r.code is None and r.reason == reason


def test_syntax_errors_inside_the_block_are_left_to_the_evaluator():
    r = extract_code("```python\nclass ModelNew(:\n    pass\n```")
    assert r.ok and "class ModelNew(:" in r.code


@pytest.mark.parametrize("seed", range(20))
def test_garbage_never_raises_and_ok_implies_modelnew(seed):
    rng = random.Random(seed)
    pieces = ["```", "```python\n", "```cuda\n", "\n", "class ModelNew", "class ModelNew(nn.Module):\n", "`", "``", "x = 1\n",
              "\x00", "ü", "'''", '"""', "{", "}", " " * 7, "```\n```", "import triton\n", "load_inline(", "__global__"]
    text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))
    r = extract_code(text)
    assert r.ok == (r.code is not None)
    if r.ok:
        assert "class ModelNew" in r.code and r.reason in ("ok", "unfenced")
    else:
        assert r.reason in ("empty", "no_code_block", "no_model_new")


def test_huge_output_is_scanned_in_linear_time():
    import time

    text = "```python\n" + "x = 1\n" * 200_000 + "``" * 50_000
    start = time.perf_counter()
    r = extract_code(text)
    assert time.perf_counter() - start < 2.0 and r.reason == "no_model_new"


def test_backend_hint():
    assert detect_backend_hint("import triton\n@triton.jit\ndef k(): pass") == "triton"
    assert detect_backend_hint("src = '__global__ void k() {}'\nmod = load_inline(name='m')") == "cuda"
    assert detect_backend_hint("import torch") is None
    assert extract_code(f"```python\nimport triton\n{NEW}```").backend == "triton"
