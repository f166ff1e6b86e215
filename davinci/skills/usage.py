"""Usage statistics of skills and the retirement of skills whose use lowers reward.

Usage is accumulated from plain observations, one per episode: which skills were retrieved (BM25
candidates), which were selected, the episode's reward and whether it succeeded. A skill's "with"
sample is the episodes that selected it; its "without" sample is the episodes where it was retrieved
but not selected, i.e. the same kind of problem without the skill, which is the comparison that
isolates the skill's effect better than "all other episodes" would.

Retirement (`retire`): an admitted skill is retired when both samples have at least
`retire_min_samples` episodes, the mean reward with it is below the mean without it by more than
`retire_margin`, and the one-sided upper confidence bound of the difference (Welch standard error,
`retire_z`) is below zero. The decision carries the numbers as evidence.

    stats = update_usage(current_usage(library.skills), observations)
    decisions = retire(library, stats, profile.skills)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

from davinci.skills.config import SkillsConfig
from davinci.skills.schema import EvidenceRecord, Skill, UsageStats


@dataclass(frozen=True)
class UsageObservation:
    """One episode's use of the library: retrieved ids, selected ids, reward, success."""

    retrieved_ids: tuple[str, ...]
    selected_ids: tuple[str, ...]
    reward: float
    success: bool
    problem_id: str = ""


@dataclass(frozen=True)
class RetirementDecision:
    skill_id: str
    retired: bool
    skill: Skill
    reasons: tuple[str, ...]
    evidence: EvidenceRecord | None


def current_usage(skills: Iterable[Skill]) -> dict[str, UsageStats]:
    return {s.id: s.usage for s in skills}


def _observe(stats: UsageStats, obs: UsageObservation, selected: bool) -> UsageStats:
    r = float(obs.reward)
    if selected:
        return replace(
            stats,
            times_selected=stats.times_selected + 1,
            times_succeeded=stats.times_succeeded + int(bool(obs.success)),
            reward_sum=stats.reward_sum + r,
            reward_sq_sum=stats.reward_sq_sum + r * r,
        )
    return replace(stats, times_without=stats.times_without + 1, reward_sum_without=stats.reward_sum_without + r, reward_sq_sum_without=stats.reward_sq_sum_without + r * r)


def update_usage(stats: Mapping[str, UsageStats], observations: Iterable[UsageObservation]) -> dict[str, UsageStats]:
    """New statistics with `observations` added (the input mapping is not changed)."""
    out = dict(stats)
    for obs in observations:
        if not math.isfinite(float(obs.reward)):
            continue  # a NaN reward would poison every mean it touches
        selected = set(obs.selected_ids)
        for sid in selected:
            out[sid] = _observe(out.get(sid, UsageStats()), obs, True)
        for sid in set(obs.retrieved_ids) - selected:
            out[sid] = _observe(out.get(sid, UsageStats()), obs, False)
    return out


def with_usage(skills: Sequence[Skill], stats: Mapping[str, UsageStats]) -> list[Skill]:
    """`skills` with their `usage` replaced from `stats` (skills without an entry unchanged)."""
    return [replace(s, usage=stats[s.id]) if s.id in stats else s for s in skills]


def reward_gap(u: UsageStats, z: float) -> tuple[float, float, float]:
    """(mean_with - mean_without, its standard error, the one-sided upper bound at `z`)."""
    diff = (u.mean_with or 0.0) - (u.mean_without or 0.0)
    se = math.sqrt(u.var_with() / max(u.times_selected, 1) + u.var_without() / max(u.times_without, 1))
    return diff, se, diff + z * se


def _judge(skill: Skill, u: UsageStats, cfg: SkillsConfig) -> RetirementDecision:
    n_with, n_without = u.times_selected, u.times_without
    if min(n_with, n_without) < cfg.retire_min_samples:
        why = f"kept: {n_with} episodes with and {n_without} without; {cfg.retire_min_samples} of each needed to judge"
        return RetirementDecision(skill.id, False, skill, (why,), None)
    diff, se, upper = reward_gap(u, cfg.retire_z)
    stats = (("mean_with", u.mean_with or 0.0), ("mean_without", u.mean_without or 0.0), ("diff", diff), ("se", se), ("upper", upper), ("n_with", float(n_with)), ("n_without", float(n_without)))
    if diff < -cfg.retire_margin and upper < 0.0:
        why = f"use lowers reward: mean {u.mean_with:.4f} with vs {u.mean_without:.4f} without (diff {diff:.4f}, upper bound {upper:.4f} < 0 at z={cfg.retire_z}; n={n_with}/{n_without})"
        evidence = EvidenceRecord("retirement", "retired", (why,), (), datetime.now(timezone.utc).isoformat(timespec="seconds"), config=(("retire_z", str(cfg.retire_z)), ("retire_margin", str(cfg.retire_margin)), ("retire_min_samples", str(cfg.retire_min_samples))), stats=stats)
        return RetirementDecision(skill.id, True, replace(skill, usage=u).with_status("retired", evidence), (why,), evidence)
    why = f"kept: diff {diff:.4f} (upper bound {upper:.4f}) does not show that use lowers reward"
    return RetirementDecision(skill.id, False, replace(skill, usage=u), (why,), None)


def retire(library: Any, usage_stats: Mapping[str, UsageStats] | None, cfg: SkillsConfig) -> list[RetirementDecision]:
    """A decision for every admitted skill of `library` (a `LibraryVersion` or a sequence of skills).

    `usage_stats` overrides the skills' own `usage` where given (None: use what the skills carry).
    """
    skills = library.skills if hasattr(library, "skills") else tuple(library)
    stats = usage_stats or {}
    return [_judge(s, stats.get(s.id, s.usage), cfg) for s in skills if s.status == "admitted"]


def apply_retirements(skills: Sequence[Skill], decisions: Sequence[RetirementDecision]) -> list[Skill]:
    by_id = {d.skill_id: d.skill for d in decisions}
    return [by_id.get(s.id, s) for s in skills]
