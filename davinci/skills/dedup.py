"""Near-duplicate detection over the skills' text fields, and merging of a duplicate into its keeper.

Choices:
- Similarity is the Jaccard index of the two skills' token sets (code-aware tokens of title, intent,
  guidance, failure modes, operators and patterns; stopwords removed), plus the backend must match:
  the same idea in Triton and in CUDA is two skills, since the policy writes one or the other.
- The better of two near-duplicates is the one with the higher conservative measured effect (smallest
  GPU CI lower bound, `Effect.best_lower`); on a tie the one already admitted stays.
- Merging keeps the keeper's text and example, adds the other's operators, patterns and failure modes
  that are new, appends guidance sentences it lacks (marked as merged), adds usage counts and keeps
  both evidence trails plus a `merge` evidence record.

    dupes = near_duplicates(candidate, library.admitted(), threshold=0.6)
    keeper = merge_skills(keep=dupes[0][0], other=candidate)
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone
from typing import Sequence

from davinci.skills.schema import MAX_GUIDANCE, MAX_LIST, EvidenceRecord, Skill, UsageStats
from davinci.skills.tokens import code_tokens


def text_tokens(skill: Skill) -> frozenset[str]:
    text = " ".join((skill.title, skill.intent, skill.guidance, *skill.failure_modes, *skill.applies_to.ops, *skill.applies_to.patterns))
    return frozenset(code_tokens(text))


def similarity(a: Skill, b: Skill) -> float:
    """Jaccard index of the text-token sets; 0 across backends."""
    if a.backend != b.backend:
        return 0.0
    ta, tb = text_tokens(a), text_tokens(b)
    union = ta | tb
    return len(ta & tb) / len(union) if union else 0.0


def near_duplicates(skill: Skill, others: Sequence[Skill], threshold: float) -> list[tuple[Skill, float]]:
    """Skills in `others` (not `skill` itself) at or above `threshold`, most similar first."""
    scored = [(o, similarity(skill, o)) for o in others if o.id != skill.id]
    return sorted([(o, s) for o, s in scored if s >= threshold], key=lambda p: -p[1])


def is_better(a: Skill, b: Skill) -> bool:
    """True when `a` has strictly stronger measured evidence than `b`."""
    return a.effect.best_lower > b.effect.best_lower


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def _new_sentences(keep: str, other: str, threshold: float = 0.6) -> list[str]:
    have = [frozenset(code_tokens(s)) for s in _sentences(keep)]
    out = []
    for sentence in _sentences(other):
        tokens = frozenset(code_tokens(sentence))
        if not tokens:
            continue
        overlap = max((len(tokens & h) / len(tokens | h) for h in have), default=0.0)
        if overlap < threshold:
            out.append(sentence)
            have.append(tokens)
    return out


def _add_usage(a: UsageStats, b: UsageStats) -> UsageStats:
    return UsageStats(*(x + y for x, y in zip(_usage_tuple(a), _usage_tuple(b))))


def _usage_tuple(u: UsageStats) -> tuple:
    return (u.times_selected, u.times_succeeded, u.reward_sum, u.reward_sq_sum, u.times_without, u.reward_sum_without, u.reward_sq_sum_without)


def _union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(a + b))[:MAX_LIST]


def merge_skills(keep: Skill, other: Skill, reason: str = "") -> Skill:
    """`keep` enriched with what `other` adds; its id, example and status are unchanged."""
    extra = _new_sentences(keep.guidance, other.guidance)
    guidance = keep.guidance if not extra else keep.guidance + f"\n\nMerged from {other.id}: " + " ".join(extra)
    record = EvidenceRecord(
        kind="merge",
        decision=f"absorbed {other.id}",
        reasons=(reason or f"near-duplicate of {keep.id} (similarity {similarity(keep, other):.2f}); {keep.id} has the stronger evidence",),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        stats=(("similarity", similarity(keep, other)), ("keep_best_lower", keep.effect.best_lower), ("other_best_lower", other.effect.best_lower)),
    )
    return replace(
        keep,
        applies_to=replace(keep.applies_to, ops=_union(keep.applies_to.ops, other.applies_to.ops), patterns=_union(keep.applies_to.patterns, other.applies_to.patterns)),
        failure_modes=_union(keep.failure_modes, other.failure_modes),
        guidance=guidance[:MAX_GUIDANCE],
        usage=_add_usage(keep.usage, other.usage),
        evidence=keep.evidence + other.evidence + (record,),
    )
