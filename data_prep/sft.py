"""Role-tagged SFT examples for the three agents (selection, policy, summary), plus raw trajectories.

What it does: for every training problem with a reference solution, picks the skills a rollout would see
(BM25 over the skill library, `skills.BM25Retriever`, top `bm25_top_k` candidates, the first `select_k`
of them selected) and asks the agents package for the examples (`davinci.agents.sft_examples_for(problem,
solution_code, selected_skills)`, plus `candidates=` the BM25 list when the function takes it), which
renders them with the same prompt functions the RL episodes use, so SFT prompts equal RL-time prompts. Optional raw trajectories (JSONL) are validated and merged.

Choices:
- The real packages are the default: `seed_skills()` when no skills are given, `BM25Retriever`, and
  `sft_examples_for`; tests inject doubles through `example_fn` / `retriever_factory`.
- Every example is checked: a known agent tag, system/user/assistant roles, string contents, at least one
  assistant message; a policy example whose prompt contains the reference solution is an error (the
  solution must only ever be a training target).
- Problems without a reference solution give no examples (the stage counts them; they stay RL problems).
- The result is shuffled with `seed` so SFT batches mix agents and problems; same seed, same order.

Trajectory JSONL, one object per line: `{"messages": [{"role": ..., "content": ...}, ...],
"agent": "policy" | "selection" | "summary" (default policy), "problem_id": "..." (optional)}`.
Bad lines are reported with their line numbers and skipped; blank lines are ignored.

    examples = build_sft_examples(train_problems, skills=None, seed=0)
"""

from __future__ import annotations

import inspect
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from data_prep.records import DropRecord
from davinci.errors import DavinciError, InputNotFound
from davinci.llm.types import AGENT_ROLES, ChatExample, Message
from davinci.types import Problem

_ROLES = ("system", "user", "assistant")
ExampleFn = Callable[..., Sequence[ChatExample]]


class Retriever(Protocol):
    def search(self, problem_code: str, k: int) -> list[tuple[Any, float]]: ...


def _skills_api() -> tuple[Callable[[], list[Any]], Callable[[Sequence[Any]], Retriever]]:
    """`seed_skills` and `BM25Retriever` from the skills package (its public names, else its modules)."""
    import davinci.skills as skills_pkg

    seed = getattr(skills_pkg, "seed_skills", None)
    retriever = getattr(skills_pkg, "BM25Retriever", None)
    if seed is None or retriever is None:
        from davinci.skills.retrieval import BM25Retriever
        from davinci.skills.seed import seed_skills

        seed, retriever = seed_skills, BM25Retriever
    return seed, retriever


def _default_example_fn() -> ExampleFn:
    import davinci.agents as agents

    fn = getattr(agents, "sft_examples_for", None)
    if fn is None:
        raise DavinciError(
            "davinci.agents has no sft_examples_for(problem, solution_code, skills, ...)",
            "the agents package must export it (docs/ARCHITECTURE.md, agents); or pass example_fn=",
        )
    return fn


def validate_example(example: Any) -> str:
    """'' when `example` is a well-formed ChatExample, else what is wrong with it."""
    if not isinstance(example, ChatExample):
        return f"not a ChatExample but {type(example).__name__}"
    if example.agent not in AGENT_ROLES:
        return f"agent {example.agent!r} is not one of {', '.join(AGENT_ROLES)}"
    if not example.messages:
        return "no messages"
    for i, message in enumerate(example.messages):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            return f"message {i} has no valid role (system, user or assistant)"
        if not isinstance(message.get("content"), str):
            return f"message {i} content is not a string"
    if not any(m["role"] == "assistant" for m in example.messages):
        return "no assistant message to train on"
    return ""


def _check_no_leak(example: ChatExample, solution: str) -> None:
    prompt = "\n".join(m["content"] for m in example.messages if m["role"] != "assistant")
    if example.agent == "policy" and solution.strip() and solution.strip() in prompt:
        raise DavinciError(
            f"the policy SFT prompt for {example.problem_id} contains the reference solution",
            "the agents' prompt functions must render only Problem.code, never reference_solution",
        )


def _accepts_candidates(fn: ExampleFn) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "candidates" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _call(fn: ExampleFn, problem: Problem, selected: list[Any], candidates: list[Any]) -> Sequence[ChatExample]:
    """`fn(problem, solution_code, selected_skills)`, plus `candidates=` (BM25's list, for the selection
    agent's prompt) when `fn` takes it."""
    if _accepts_candidates(fn):
        return fn(problem, problem.reference_solution, selected, candidates=candidates)
    return fn(problem, problem.reference_solution, selected)


def select_skills(
    retriever: Retriever | None, problem: Problem, bm25_top_k: int, select_k: int
) -> tuple[list[Any], list[Any]]:
    """(candidates, selected): BM25's top `bm25_top_k` skills for the problem and the first `select_k`."""
    if retriever is None:
        return [], []
    candidates = [skill for skill, _ in retriever.search(problem.code, bm25_top_k)]
    return candidates, candidates[:select_k]


def build_sft_examples(
    problems: Sequence[Problem],
    skills: Sequence[Any] | None = None,
    seed: int = 0,
    *,
    select_k: int = 3,
    bm25_top_k: int = 8,
    example_fn: ExampleFn | None = None,
    retriever_factory: Callable[[Sequence[Any]], Retriever] | None = None,
) -> list[ChatExample]:
    """Role-tagged examples for every problem with a reference solution (see module docstring)."""
    if skills is None or retriever_factory is None:
        seed_fn, bm25 = _skills_api()
        skills = seed_fn() if skills is None else skills
        retriever_factory = retriever_factory or bm25
    fn = example_fn or _default_example_fn()
    retriever = retriever_factory(list(skills)) if skills else None
    examples: list[ChatExample] = []
    for problem in problems:
        if not problem.reference_solution:
            continue
        candidates, selected = select_skills(retriever, problem, bm25_top_k, select_k)
        for example in _call(fn, problem, selected, candidates):
            error = validate_example(example)
            if error:
                raise DavinciError(
                    f"sft_examples_for returned a malformed example for {problem.id}: {error}",
                    "fix the agents package's sft_examples_for",
                )
            _check_no_leak(example, problem.reference_solution)
            examples.append(example if example.problem_id else ChatExample(example.agent, example.messages, problem.id))
    random.Random(seed).shuffle(examples)
    return examples


# ----------------------------------------------------------------------------------------- trajectories


@dataclass(frozen=True)
class TrajectoryLoad:
    examples: tuple[ChatExample, ...]
    errors: tuple[DropRecord, ...]


def _parse_line(text: str) -> tuple[ChatExample | None, str]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(obj, dict):
        return None, "not a JSON object"
    agent = obj.get("agent", "policy")
    raw = obj.get("messages")
    if not isinstance(raw, list) or not raw:
        return None, "`messages` must be a non-empty list"
    messages: list[Message] = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(m.get("content"), str):
            return None, f"message {i} needs role (system, user or assistant) and string content"
        messages.append({"role": m["role"], "content": m["content"]})
    example = ChatExample(agent=agent, messages=tuple(messages), problem_id=str(obj.get("problem_id", "")))
    error = validate_example(example)
    return (None, error) if error else (example, "")


def load_trajectories(path: str | Path) -> TrajectoryLoad:
    """Validated examples from a trajectory JSONL file; each bad line becomes an error record with its number."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFound(f"SFT trajectory file {path} does not exist", "fix data.sft_trajectories or set it to ''")
    examples: list[ChatExample] = []
    errors: list[DropRecord] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        example, error = _parse_line(line)
        if example is None:
            errors.append(DropRecord("sft", f"{path.name}:{number}", "bad-trajectory", f"line {number}: {error}"))
        else:
            examples.append(example)
    return TrajectoryLoad(tuple(examples), tuple(errors))


def example_to_dict(example: ChatExample) -> dict[str, Any]:
    return {"agent": example.agent, "problem_id": example.problem_id, "messages": [dict(m) for m in example.messages]}


def example_from_dict(d: dict[str, Any]) -> ChatExample:
    messages = tuple({"role": m["role"], "content": m["content"]} for m in d["messages"])
    agent = d["agent"]
    return ChatExample(agent=agent, messages=messages, problem_id=d.get("problem_id", ""))


__all__ = [
    "build_sft_examples",
    "select_skills",
    "validate_example",
    "load_trajectories",
    "TrajectoryLoad",
    "example_to_dict",
    "example_from_dict",
]
