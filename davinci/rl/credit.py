"""Delayed credit of the summary agent: admission decisions of epoch e's skills -> rewards trained in e+1.

Timeline: epoch e rolls out, summarizes successful episodes into candidate skills and stores each summary
generation (ids + behaviour log-probs) in `pending_summaries.jsonl`. The skills stage then verifies the
candidates (`skills.admit`) and the lead's task writes the decisions with `write_admissions`. Epoch e+1
reads both, rolls out with the new library, and rewards each stored summary:

    r = w_summary_admit * 1[admitted] + w_summary_use * effect
    effect = solve rate of epoch e+1's episodes that selected the skill
             - solve rate of the episodes of the same problems that did not select it

(`rewards.summary_reward`; the effect is in [-1, 1]). Credit comes from the difference the skill made,
not from being selected: a skill picked often but useless earns nothing for use, a harmful one loses.
Without a comparison (no episode used the skill, or every episode of those problems did) the effect is 0. "merged" (a near-duplicate of a better library skill) and "rejected" both
count as not admitted. A summary is matched to its decision by the summarized episode's id (the skill's
provenance), else by the candidate skill's id. Admission rows are plain dicts, read defensively:
`{"skill_id": str, "outcome": "admitted" | "rejected" | "merged", "episode_id": str}`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from davinci.errors import InputNotFound
from davinci.jsonl import read_jsonl, write_jsonl
from davinci.rl.config import RLConfig
from davinci.rl.rewards import summary_reward
from davinci.rl.samples import PendingSummary


def admission_row(decision: Any) -> dict[str, str]:
    """An `AdmissionDecision` (or a dict of one) -> {"skill_id", "outcome", "episode_id"}."""
    get = decision.get if isinstance(decision, Mapping) else (lambda k, d=None: getattr(decision, k, d))
    skill = get("skill")
    if isinstance(skill, Mapping):
        prov = skill.get("provenance") or {}
        episode_id = prov.get("episode_id", "") if isinstance(prov, Mapping) else ""
    else:
        episode_id = getattr(getattr(skill, "provenance", None), "episode_id", "")
    outcome = get("outcome") or ("admitted" if get("admitted") is True else "rejected")
    return {"skill_id": str(get("skill_id") or ""), "outcome": str(outcome), "episode_id": str(get("episode_id") or episode_id or "")}


def write_admissions(path: str | Path, decisions: Iterable[Any]) -> Path:
    """Write the skills stage's decisions as JSONL rows for the next RL epoch (`EpochInputs.admissions_path`)."""
    write_jsonl(path, [admission_row(d) for d in decisions])
    return Path(path)


def read_admissions(path: str | Path) -> list[dict[str, str]]:
    if not Path(path).exists():
        raise InputNotFound(f"no admissions file {path}", "write it with rl.credit.write_admissions")
    return [admission_row(row) for row in read_jsonl(path)]


def _admitted_id(p: PendingSummary, by_episode: Mapping[str, Mapping], by_skill: Mapping[str, Mapping]) -> str | None:
    row = by_episode.get(p.episode_id) or (by_skill.get(p.skill_id) if p.skill_id else None)
    if row is None or row["outcome"] != "admitted":
        return None
    return row["skill_id"] or p.skill_id


def use_effect(skill_id: str, episodes: Sequence[Any]) -> float:
    """Solve rate of the episodes that selected `skill_id` minus that of the others of the same problems.

    >>> class Ep:
    ...     def __init__(self, pid, sel, solved): self.problem_id, self.selected_ids, self.solved = pid, sel, solved
    >>> use_effect("s1", [Ep("p", ("s1",), True), Ep("p", (), False), Ep("p", (), True), Ep("q", (), False)])
    0.5
    """
    users = [ep for ep in episodes if skill_id in tuple(ep.selected_ids)]
    problems = {ep.problem_id for ep in users}
    others = [ep for ep in episodes if ep.problem_id in problems and skill_id not in tuple(ep.selected_ids)]
    if not users or not others:
        return 0.0  # no comparison: the skill's effect is unknown, not good
    rate = lambda eps: sum(bool(ep.solved) for ep in eps) / len(eps)  # noqa: E731
    return rate(users) - rate(others)


def delayed_summary_rewards(
    pending: Sequence[PendingSummary], admissions: Sequence[Mapping[str, str]], episodes: Sequence[Any], cfg: RLConfig
) -> list[float]:
    """Rewards of the stored summaries, in order; `episodes` are the current epoch's (the use effect)."""
    by_episode = {r["episode_id"]: r for r in admissions if r.get("episode_id")}
    by_skill = {r["skill_id"]: r for r in admissions if r.get("skill_id")}
    out = []
    for p in pending:
        skill_id = _admitted_id(p, by_episode, by_skill)
        effect = use_effect(skill_id, episodes) if skill_id else 0.0
        out.append(summary_reward(skill_id is not None, effect, cfg))
    return out
