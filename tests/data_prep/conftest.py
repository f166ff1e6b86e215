"""Test doubles for the data_prep tests: the agents' `sft_examples_for` and a BM25-like retriever.

Doubles stand in for `davinci.agents.sft_examples_for` (being built in parallel) and, where a test must
not depend on the skills package's data files, for `BM25Retriever`. Tests of the real default path live
next to the tests that use these (`test_real_*`, `test_default_path`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from davinci.llm.types import ChatExample


@dataclass(frozen=True)
class FakeSkill:
    id: str
    title: str


class KeywordRetriever:
    """Double of BM25Retriever: scores a skill by how often the words of its id occur in the problem."""

    def __init__(self, skills):
        self.skills = list(skills)

    def search(self, problem_code: str, k: int):
        scored = [(s, float(sum(problem_code.count(w) for w in s.id.split("-")))) for s in self.skills]
        return sorted((x for x in scored if x[1] > 0), key=lambda x: -x[1])[:k]


@dataclass
class SFTDoubles:
    calls: list[dict[str, Any]] = field(default_factory=list)
    skills: tuple[FakeSkill, ...] = tuple(
        FakeSkill(f"{w}-skill", f"Skill about {w}") for w in ("torch", "relu", "sum", "softmax", "x", "dim", "self")
    )

    def example_fn(self, problem, solution_code, skills, *, candidates=()):
        """Double of sft_examples_for: one example per agent, prompts built from the problem only."""
        self.calls.append({"problem": problem.id, "skills": [s.id for s in skills], "candidates": [c.id for c in candidates]})
        titles = "\n".join(getattr(s, "title", s.id) for s in skills)
        prompt = ({"role": "system", "content": "You write Triton kernels."},
                  {"role": "user", "content": f"{titles}\n{problem.code}"})
        return [
            ChatExample("selection", ({"role": "user", "content": "choose"},
                                      {"role": "assistant", "content": json.dumps([s.id for s in skills])}), problem.id),
            ChatExample("policy", (*prompt, {"role": "assistant", "content": f"```python\n{solution_code}\n```"}), problem.id),
            ChatExample("summary", ({"role": "user", "content": "summarize"}, {"role": "assistant", "content": "{}"}), problem.id),
        ]

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for build_sft_examples / run_data_stage that swap in every double."""
        return {"skills": list(self.skills), "example_fn": self.example_fn, "retriever_factory": KeywordRetriever}


@pytest.fixture
def sft_doubles() -> SFTDoubles:
    return SFTDoubles()
