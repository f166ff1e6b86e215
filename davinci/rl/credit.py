"""Delayed credit of the summary agent: admission decisions of epoch e's skills -> rewards trained in e+1.

Timeline: epoch e rolls out, summarizes successful episodes into candidate skills and stores each summary
generation (ids + behaviour log-probs) in `pending_summaries.jsonl`. The skills stage then verifies the
candidates (`skills.admit`) and the lead's task writes the decisions with `write_admissions`. Epoch e+1
reads both, rolls out with the new library, and rewards each stored summary:

    r = w_summary_admit * 1[admitted] + w_summary_use * (share of epoch e+1's episodes that selected it)

(`rewards.summary_reward`). "merged" (a near-duplicate of a better library skill) and "rejected" both
count as not admitted. A summary is matched to its decision by the summarized episode's id (the skill's
provenance), else by the candidate skill's id. Admission rows are plain dicts, read defensively:
`{"skill_id": str, "outcome": "admitted" | "rejected" | "merged", "episode_id": str}`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from davinci.errors import MalformedInput
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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(admission_row(d)) + "\n" for d in decisions))
    tmp.replace(path)
    return path


def read_admissions(path: str | Path) -> list[dict[str, str]]:
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(admission_row(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise MalformedInput(f"{path}:{n} is not JSON ({exc})", "rewrite the file with rl.credit.write_admissions") from None
    return rows


def _admitted_id(p: PendingSummary, by_episode: Mapping[str, Mapping], by_skill: Mapping[str, Mapping]) -> str | None:
    row = by_episode.get(p.episode_id) or (by_skill.get(p.skill_id) if p.skill_id else None)
    if row is None or row["outcome"] != "admitted":
        return None
    return row["skill_id"] or p.skill_id


def delayed_summary_rewards(
    pending: Sequence[PendingSummary], admissions: Sequence[Mapping[str, str]], episodes: Sequence[Any], cfg: RLConfig
) -> list[float]:
    """Rewards of the stored summaries, in order; `episodes` are the current epoch's (for later use).

    >>> p = [PendingSummary("e1", "p", 0, "s1", (1, 2), 1, (-0.5,)), PendingSummary("e2", "p", 0, "s2", (1, 2), 1, (-0.5,))]
    >>> class Ep: selected_ids = ("s1",)
    >>> delayed_summary_rewards(p, [{"skill_id": "s1", "outcome": "admitted", "episode_id": "e1"}], [Ep(), Ep()], RLConfig())
    [2.0, 0.0]
    """
    by_episode = {r["episode_id"]: r for r in admissions if r.get("episode_id")}
    by_skill = {r["skill_id"]: r for r in admissions if r.get("skill_id")}
    n = max(len(episodes), 1)
    out = []
    for p in pending:
        skill_id = _admitted_id(p, by_episode, by_skill)
        uses = sum(skill_id in tuple(getattr(ep, "selected_ids", ())) for ep in episodes) if skill_id else 0
        out.append(summary_reward(skill_id is not None, uses / n, cfg))
    return out
