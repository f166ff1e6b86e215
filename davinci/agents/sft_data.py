"""SFT examples for the three agents from one problem and its known-correct solution.

`sft_examples_for(problem, solution_code, skills, candidates=...)` renders, with the very prompt functions
the episode runner uses (so SFT prompts equal RL-time prompts):
- selection: the rerank prompt over the BM25 `candidates` -> `{"order": [ids of `skills`]}` (only when
  there are candidates);
- policy: problem + selected `skills` -> the solution in one ```python block. `policy_variants` > 1 adds
  copies whose skill lists are other slices of the candidates (deterministic), so the policy learns to
  answer the same problem whatever the selection agent picks;
- summary: the problem and the solution as a successful kernel -> a skill JSON derived from the problem
  (`reference_skill`): title from the problem name, intent from the solution's module docstring, operators
  from the problem's AST, guidance from the solution's comments. It parses with `parse_skill_json`.

data_prep's `build_sft_examples` calls this for every training problem with a reference solution.
"""

from __future__ import annotations

import ast
import json
from typing import Any, Sequence

from davinci.agents.config import AgentsConfig
from davinci.agents.parsers import detect_backend_hint
from davinci.agents.render import BACKEND_NAMES, code_block, policy_messages, selection_messages, summary_messages
from davinci.llm.types import ChatExample, Message
from davinci.skills import Skill, extract_ops
from davinci.types import Backend, Problem

DEFAULTS = AgentsConfig()
# Longest guidance (characters) of a derived reference skill.
MAX_GUIDANCE_CHARS = 600


def _docstring(code: str) -> str:
    try:
        return ast.get_docstring(ast.parse(code)) or ""
    except (SyntaxError, ValueError):
        return ""


def _comments(code: str) -> list[str]:
    seen: list[str] = []
    for line in code.splitlines():
        text = line.strip()
        if text.startswith("#") and not text.startswith("#!"):
            comment = text.lstrip("#").strip()
            if comment and comment not in seen:
                seen.append(comment)
    return seen


def reference_skill(problem: Problem, solution_code: str, backend: Backend) -> dict[str, Any]:
    """A skill JSON object describing how `solution_code` solves `problem` (the summary agent's SFT target)."""
    name = BACKEND_NAMES[backend]
    ops = list(extract_ops(problem.code).ops) or [problem.name]
    doc = _docstring(solution_code)
    technique = doc.split(":", 1)[1].strip() if ":" in doc.split("\n", 1)[0] else " ".join(doc.split("\n")[1:]).strip()
    intent = technique or f"Compute {', '.join(ops)} in one {name} kernel instead of separate PyTorch ops."
    steps = _comments(solution_code) or [f"Write one {name} kernel that computes {', '.join(ops)} and launch it from ModelNew.forward."]
    guidance = ""
    for i, step in enumerate(steps, start=1):
        line = f"{i}. {step}\n"
        if len(guidance) + len(line) > MAX_GUIDANCE_CHARS:
            break
        guidance += line
    return {
        "title": f"{name} kernel for {problem.name.replace('_', ' ')}",
        "intent": " ".join(intent.split()),
        "applies_to": {"ops": ops, "patterns": [t for t in problem.tags if t not in ops]},
        "guidance": guidance.strip() or steps[0],
        "backend": backend,
    }


def _policy_variants(skills: Sequence[Skill], candidates: Sequence[Skill], n: int) -> list[list[Skill]]:
    """The selected skills first, then up to n - 1 other slices of the candidates (each len(skills) long)."""
    variants = [list(skills)]
    k = max(1, len(skills))
    others = [c for c in candidates if c.id not in {s.id for s in skills}]
    for v in range(1, n):
        chunk = others[(v - 1) * k : v * k]
        if not chunk:
            break
        variants.append(list(chunk))
    return variants


def _example(agent: str, prompt: Sequence[Message], answer: str, problem_id: str) -> ChatExample:
    messages = tuple(prompt) + ({"role": "assistant", "content": answer},)
    return ChatExample(agent=agent, messages=messages, problem_id=problem_id)  # type: ignore[arg-type]


def sft_examples_for(
    problem: Problem,
    solution_code: str,
    skills: Sequence[Skill],
    *,
    candidates: Sequence[Skill] = (),
    backend: Backend | None = None,
    policy_variants: int = 2,
    agents: AgentsConfig | None = None,
) -> list[ChatExample]:
    """One selection (when there are candidates), `policy_variants` policy and one summary example.

    Pass the profile's `agents` section so prompt budgets (skill text, rerank text) match the RL prompts.
    """
    cfg = agents or DEFAULTS
    kind: Backend = backend or detect_backend_hint(solution_code) or cfg.backend
    examples: list[ChatExample] = []
    if candidates:
        order = json.dumps({"order": [s.id for s in skills]})
        prompt = selection_messages(problem, candidates, guidance_chars=cfg.rerank_guidance_chars, code_chars=cfg.rerank_code_chars)
        examples.append(_example("selection", prompt, order, problem.id))
    for chosen in _policy_variants(skills, candidates, policy_variants):
        prompt = policy_messages(problem, chosen, backend=kind, skill_chars=cfg.skill_chars)
        examples.append(_example("policy", prompt, code_block(solution_code), problem.id))
    summary = json.dumps(reference_skill(problem, solution_code, kind), indent=2)
    prompt = summary_messages(problem, solution_code, skills, backend=kind)
    examples.append(_example("summary", prompt, summary, problem.id))
    return examples
