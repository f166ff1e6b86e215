"""Parsers of the policy's output: the ModelNew code block and a backend hint. They never raise.

Model output is untrusted text; every function here returns a typed result, and the episode runner counts
each failure in the metrics (`Generation.parse_ok`).

`extract_code(text)` rules:
- Fenced blocks (``` with any or no language tag) are read in order; a final fence that is never closed
  runs to the end of the text (generation stopped mid-block).
- The block that defines `class ModelNew` wins; among several, the last one (a model that revises itself
  ends with its final answer). Blocks without ModelNew (helpers, CUDA sources shown separately) are ignored.
- No fence at all: the whole text is taken when it is valid Python defining ModelNew ("unfenced").
- Otherwise the parse fails with a reason: "empty", "no_code_block" or "no_model_new". Syntax errors inside
  a block are *not* parse failures: the evaluator reports them as compile errors, which is better feedback.

`detect_backend_hint(code)` is a textual hint (works on code that does not parse): "cuda" for
`load_inline` / `__global__`, "triton" for triton imports or `@triton.jit`, else None.

Shapes of the text are arbitrary; scanning is linear in its length (the regexes do not backtrack).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

from davinci.types import Backend

ParseReason = Literal["ok", "unfenced", "empty", "no_code_block", "no_model_new"]

_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.S)
_MODEL_NEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.M)
_CUDA_HINT = re.compile(r"\bload_inline\b|__global__|cpp_extension")
_TRITON_HINT = re.compile(r"^\s*(?:import triton|from triton\b)|@triton\.jit|\btl\.", re.M)


@dataclass(frozen=True)
class CodeParse:
    """The extracted ModelNew source (`code`, None on failure) and why/how it was found."""

    ok: bool
    code: str | None
    reason: ParseReason
    backend: Backend | None = None
    blocks: int = 0  # fenced blocks seen
    unclosed: bool = False  # the chosen block had no closing fence


def detect_backend_hint(code: str) -> Backend | None:
    if _CUDA_HINT.search(code):
        return "cuda"
    if _TRITON_HINT.search(code):
        return "triton"
    return None


def _blocks(text: str) -> list[tuple[str, bool]]:
    """(body, closed) of every fenced block, in order."""
    out = []
    for match in _FENCE.finditer(text):
        # A lazy body stops at the first closing fence, so the match ends in ``` exactly when it was closed.
        out.append((match.group(1), match.group(0).endswith("```")))
    return out


def _unfenced(text: str) -> str | None:
    if not _MODEL_NEW.search(text):
        return None
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return text


def extract_code(text: object) -> CodeParse:
    """The ModelNew source in a model answer (see the module docstring for the rules)."""
    if not isinstance(text, str) or not text.strip():
        return CodeParse(False, None, "empty")
    blocks = _blocks(text)
    with_model = [(body, closed) for body, closed in blocks if _MODEL_NEW.search(body)]
    if with_model:
        body, closed = with_model[-1]
        code = body.strip("\n") + "\n"
        return CodeParse(True, code, "ok", detect_backend_hint(code), len(blocks), not closed)
    if not blocks:
        raw = _unfenced(text)
        if raw is not None:
            code = raw.strip("\n") + "\n"
            return CodeParse(True, code, "unfenced", detect_backend_hint(code), 0, False)
        return CodeParse(False, None, "no_code_block")
    return CodeParse(False, None, "no_model_new", None, len(blocks), False)
