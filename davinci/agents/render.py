"""Prompt rendering for the three agents, from the template files in `davinci/agents/prompts/`.

The same functions build the RL rollouts' prompts (episode runner) and the SFT examples (data_prep calls
`sft_examples_for`, which calls these), so the model is trained on exactly the prompts it later sees.

Choices:
- Templates are `string.Template` files (`${name}` placeholders): problem code, skills and feedback are
  inserted verbatim, with no brace escaping and no re-parsing of inserted text.
- Policy, turn 1: system + one user message (selected skills first, then the problem, then the
  instruction, KernelBench-style). Turn t > 1 appends, for the last `history_window` attempts, the attempt
  as an assistant message (its extracted code in a ```python block) and a user message with the evaluator's
  feedback and what to do next (fix it, or make it faster when it was already correct). The prompt puts the
  instruction and problem last, so left-truncation (SFT `max_len`) drops skills text before the problem.
- The problem's reference solution is never rendered (only `Problem.code`).
- Selection uses the skills package's rerank prompt (`rerank_messages`); summary shows the problem, the
  successful kernel and its evaluation and asks for one skill as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Sequence

from davinci.agents.config import AgentsConfig
from davinci.kernelgym.result import EvalResult
from davinci.llm.types import Message
from davinci.skills import SUMMARY_SCHEMA, Skill, rerank_messages
from davinci.types import Backend, Problem

DEFAULTS = AgentsConfig()

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
BACKEND_NAMES: dict[str, str] = {"triton": "Triton", "cuda": "CUDA"}
# Longest raw answer shown back to the policy when it had no parseable code (characters).
MAX_RAW_ANSWER_CHARS = 2000


@lru_cache(maxsize=None)
def template(name: str) -> Template:
    """The template file `prompts/<name>.txt` (final newline stripped)."""
    return Template((PROMPT_DIR / f"{name}.txt").read_text().rstrip("\n"))


def template_corpus(repeat: int = 8) -> list[str]:
    """Every fixed prompt text (these templates, the skills package's rerank templates and summary schema),
    each `repeat` times: part of the tiny tokenizer's corpus, repeated so that BPE spends merges on them and
    the fixed parts of every prompt become a handful of tokens."""
    texts = [p.read_text() for p in sorted(PROMPT_DIR.glob("*.txt"))]
    texts += [m["content"] for m in rerank_messages("", [])] + [SUMMARY_SCHEMA]
    return texts * repeat


@dataclass(frozen=True)
class Attempt:
    """One earlier policy turn, as the next prompt shows it."""

    code: str | None  # extracted ModelNew source; None when the answer had no parseable code
    response: str  # the raw answer (shown, trimmed, only when `code` is None)
    feedback: str  # the evaluator's feedback on it (or why it could not be evaluated)
    correct: bool = False


def code_block(code: str) -> str:
    return f"```python\n{code.strip(chr(10))}\n```"


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters at a line or word boundary when possible (0 = no limit)."""
    if limit <= 0 or len(text) <= limit:
        return text
    cut = text[:limit]
    boundary = max(cut.rfind("\n"), cut.rfind(" "))
    return (cut[:boundary] if boundary > limit // 2 else cut).rstrip() + " ..."


def skill_text(skill: Skill, skill_chars: int = 0) -> str:
    """One skill as the policy reads it: title, then intent and guidance (clipped to `skill_chars`)."""
    body = "\n".join(part.strip() for part in (skill.intent, skill.guidance) if part.strip())
    return template("skill_block").substitute(title=skill.title, body=clip(body, skill_chars))


def skills_section(skills: Sequence[Skill], skill_chars: int = 0) -> str:
    if not skills:
        return ""
    blocks = "\n\n".join(skill_text(s, skill_chars) for s in skills)
    return template("policy_skills").substitute(skill_blocks=blocks) + "\n\n"


def policy_system(backend: Backend = "triton") -> Message:
    return {"role": "system", "content": template("policy_system").substitute(backend_name=BACKEND_NAMES[backend])}


def policy_first_user(problem: Problem, skills: Sequence[Skill], backend: Backend = "triton", skill_chars: int = 0) -> Message:
    text = template("policy_first").substitute(
        skills=skills_section(skills, skill_chars),
        problem_code=problem.code.strip("\n"),
        backend_name=BACKEND_NAMES[backend],
    )
    return {"role": "user", "content": text}


def attempt_messages(attempt: Attempt) -> list[Message]:
    """An earlier attempt (assistant) and the evaluator's verdict on it plus the next instruction (user)."""
    if attempt.code is not None:
        shown = code_block(attempt.code)
    else:
        shown = attempt.response[:MAX_RAW_ANSWER_CHARS]
    instruction = template("policy_faster" if attempt.correct else "policy_fix").template
    feedback = attempt.feedback.strip() or "(no feedback)"
    user = template("policy_feedback").substitute(feedback=feedback, instruction=instruction)
    return [{"role": "assistant", "content": shown}, {"role": "user", "content": user}]


def policy_messages(
    problem: Problem,
    skills: Sequence[Skill],
    history: Sequence[Attempt] = (),
    *,
    backend: Backend = "triton",
    history_window: int = 1,
    skill_chars: int = DEFAULTS.skill_chars,
) -> list[Message]:
    """The policy's prompt for turn len(history) + 1 (the problem's reference solution is never shown)."""
    messages: list[Message] = [policy_system(backend), policy_first_user(problem, skills, backend, skill_chars)]
    shown = history[-history_window:] if history_window > 0 else ()
    for attempt in shown:
        messages.extend(attempt_messages(attempt))
    return messages


# ---------------------------------------------------------------------- selection and summary
def selection_messages(
    problem: Problem,
    candidates: Sequence[Skill],
    *,
    guidance_chars: int = DEFAULTS.rerank_guidance_chars,
    code_chars: int = DEFAULTS.rerank_code_chars,
) -> list[Message]:
    """The selection agent's prompt: rerank BM25's candidates for the problem (the skills package's prompt)."""
    msgs = rerank_messages(problem.code, candidates, max_code_chars=code_chars, guidance_chars=guidance_chars)
    return [{"role": m["role"], "content": m["content"]} for m in msgs]  # type: ignore[misc]


def result_line(result: EvalResult | None) -> str:
    """One sentence on the measured speed of a correct kernel (empty when nothing was timed)."""
    speedup = result.speedup if result is not None else None
    if speedup is None:
        return ""
    label = "GPU" if result.timing_label == "cuda" else "CPU"
    return f"Measured speedup over PyTorch eager: {float(speedup):.2f}x ({label} timing)."


def summary_messages(
    problem: Problem,
    kernel_code: str,
    skills_used: Sequence[Skill] = (),
    *,
    result: EvalResult | None = None,
    backend: Backend = "triton",
) -> list[Message]:
    """The summary agent's prompt: a correct kernel (the best turn of an episode) -> one skill as JSON."""
    used = ", ".join(s.title for s in skills_used) or "none"
    user = template("summary_user").substitute(
        backend_name=BACKEND_NAMES[backend],
        result_line=result_line(result),
        problem_code=problem.code.strip("\n"),
        kernel_code=kernel_code.strip("\n"),
        skills_used=used,
        schema=SUMMARY_SCHEMA,
    )
    return [{"role": "system", "content": template("summary_system").template}, {"role": "user", "content": user}]
