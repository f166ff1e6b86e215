"""Rerank of BM25 candidates by the backbone: the prompt (template files) and a parser that never fails.

Choices:
- The prompt is two template files in `prompts/` (`rerank_system.txt`, `rerank_user.txt`, filled with
  `string.Template`, so braces in code need no escaping). Each candidate is shown by id, title, intent,
  operators, patterns and a clipped guidance excerpt; the problem code is clipped to a character budget.
- The model must answer `{"order": [ids...]}`. `parse_rerank` accepts that object, or a bare JSON list,
  anywhere in the text (code fences and prose around it are fine). Unknown ids and repeats are dropped;
  candidates the model left out keep their BM25 order after the ones it ranked. When no valid id can be
  read, the order is the BM25 order and `ok=False` (the caller counts these; nothing is raised).
- Messages are plain `{"role", "content"}` dicts (the `davinci.llm.types.Message` shape); this package
  does not import `davinci.llm`.

    msgs = rerank_messages(problem.code, [s for s, _ in hits])
    result = parse_rerank(generated_text, [s.id for s, _ in hits])
    ordered = result.order          # always a permutation of the candidate ids
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from string import Template
from typing import Any, Sequence

from davinci.skills.schema import Skill

Message = dict[str, str]
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)
_MAX_SCAN = 200_000  # characters of model output examined; the rest is ignored
_MAX_ATTEMPTS = 2_000  # JSON decode attempts per source (bounds the time spent on hostile output)


@dataclass(frozen=True)
class RerankResult:
    """The candidate ids in reranked order (always a permutation of the input ids).

    `ok` is False when the output could not be parsed and `order` is the BM25 order; `ranked` is how
    many ids the model itself placed; `reason` says what went wrong when not ok.
    """

    order: tuple[str, ...]
    ok: bool
    ranked: int = 0
    reason: str = ""


def _template(name: str) -> Template:
    return Template(resources.files("davinci.skills").joinpath("prompts", name).read_text())


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def describe_candidate(index: int, skill: Skill, guidance_chars: int) -> str:
    return (
        f"{index}. id: {skill.id}\n"
        f"   title: {skill.title}\n"
        f"   intent: {_clip(skill.intent, 300)}\n"
        f"   applies to: ops {', '.join(skill.applies_to.ops)}; patterns {', '.join(skill.applies_to.patterns) or '-'}\n"
        f"   backend: {skill.backend}; dtypes: {', '.join(skill.preconditions.dtypes) or 'any'}\n"
        f"   guidance: {_clip(skill.guidance, guidance_chars)}"
    )


def rerank_messages(problem_code: str, skills: Sequence[Skill], *, max_code_chars: int = 6000, guidance_chars: int = 400) -> list[Message]:
    """System + user messages asking the backbone to order `skills` for `problem_code`."""
    code = problem_code if len(problem_code) <= max_code_chars else problem_code[:max_code_chars] + "\n# ... (truncated)"
    candidates = "\n".join(describe_candidate(i + 1, s, guidance_chars) for i, s in enumerate(skills))
    user = _template("rerank_user.txt").substitute(problem_code=code, candidates=candidates, ids=", ".join(s.id for s in skills))
    return [{"role": "system", "content": _template("rerank_system.txt").template.strip()}, {"role": "user", "content": user}]


def _json_values(text: str) -> list[Any]:
    """Every JSON object or array that decodes at some `{` / `[` in `text` (fenced blocks first)."""
    decoder = json.JSONDecoder()
    sources = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    values: list[Any] = []
    for source in sources:
        for attempt, match in enumerate(re.finditer(r"[\[{]", source)):
            if attempt >= _MAX_ATTEMPTS:
                break
            try:
                value, _ = decoder.raw_decode(source, match.start())
            except (ValueError, RecursionError):
                continue
            values.append(value)
            if len(values) >= 64:
                return values
    return values


def _ids_in(value: Any) -> list[str] | None:
    """The id list a decoded value carries: {"order": [...]} (or ranking/ids keys) or a bare list."""
    if isinstance(value, dict):
        for key in ("order", "ranking", "ranked", "ids", "skills"):
            if isinstance(value.get(key), list):
                value = value[key]
                break
        else:
            return None
    if not isinstance(value, list):
        return None
    out = []
    for item in value:
        if isinstance(item, dict):
            item = item.get("id")
        if isinstance(item, str):
            out.append(item.strip())
    return out


def parse_rerank(text: Any, candidate_ids: Sequence[str]) -> RerankResult:
    """Read the model's order; fall back to the given (BM25) order with ok=False. Never raises."""
    ids = list(dict.fromkeys(str(i) for i in candidate_ids))
    if not isinstance(text, str):
        return RerankResult(tuple(ids), False, 0, f"output is {type(text).__name__}, not text")
    valid = set(ids)
    for value in _json_values(text[:_MAX_SCAN]):
        listed = _ids_in(value)
        if not listed:
            continue
        ranked = [i for i in dict.fromkeys(listed) if i in valid]
        if ranked:
            rest = [i for i in ids if i not in set(ranked)]
            return RerankResult(tuple(ranked + rest), True, len(ranked))
    return RerankResult(tuple(ids), False, 0, "no JSON order with a known id found")


def apply_order(skills: Sequence[Skill], result: RerankResult) -> list[Skill]:
    """`skills` rearranged into `result.order` (skills whose id is not in the order keep their place last)."""
    by_id = {s.id: s for s in skills}
    ordered = [by_id[i] for i in result.order if i in by_id]
    return ordered + [s for s in skills if s.id not in set(result.order)]
