"""Feed RL rollouts back into the skill library: admit candidates, update usage, retire, commit a version.

Used between RL epochs (the library evolves during training) and by the skills stage. From the rollouts:
- transfer cases: every episode with a correct turn gives (problem, its correct candidate, the skill ids it
  selected); admission reruns a candidate skill on such problems other than the one it came from;
- usage observations: per episode, the skills retrieved and selected, the best turn score and success;
  they update each skill's usage statistics, and retirement reads those (use lowering reward -> retired);
- candidates: the summary agent's parsed skills (`candidates.jsonl` of each epoch).

The result is a new immutable library version (committing identical content is idempotent, so a retried
task gets the same version back) plus the decisions as files: `admissions.jsonl` (read by the next RL
epoch for the summary agent's delayed credit) and `library_update.json` (every decision with evidence).

    update = update_library(store_root, 3, [cands], [rollouts], problems, profile.gym, profile.skills, out_dir)
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from davinci.jsonl import read_jsonl
from davinci.rl.credit import write_admissions
from davinci.rl.records import RolloutRecord, read_rollouts
from davinci.types import Problem


@dataclass(frozen=True)
class LibraryUpdate:
    version: int
    parent_version: int
    admitted: int
    rejected: int
    merged: int
    pending: int
    retired: int
    admissions_path: str
    report_path: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def transfer_cases(records: Sequence[RolloutRecord], problems: Mapping[str, Problem]) -> list[Any]:
    """(problem, its first correct candidate, selected skill ids) for every from-scratch episode that solved its problem."""
    from davinci.skills import TransferCase

    cases = []
    for rec in records:
        ep = rec.episode
        if ep.start_state is not None:  # it began from a correct parent: "solved" says nothing about its skills
            continue
        problem = problems.get(ep.problem_id)
        solved = [t for t in ep.turns if t.correct and t.candidate is not None]
        if problem is None or not solved or not ep.selected_ids:
            continue
        cases.append(TransferCase(problem, solved[0].candidate, tuple(ep.selected_ids)))
    return cases


def usage_observations(records: Sequence[RolloutRecord]) -> list[Any]:
    """One observation per from-scratch episode: retrieved and selected skills, best turn score, success."""
    from davinci.skills import UsageObservation

    return [
        UsageObservation(tuple(r.episode.bm25_ids), tuple(r.episode.selected_ids), float(max(r.rewards.turn_scores or (0.0,))),
                         r.episode.solved, r.episode.problem_id)
        for r in records
        if r.episode.start_state is None  # a revision began from a correct parent: its success is not the skills'
    ]


def update_library(store_root: str | Path, version: int | str, candidates_paths: Sequence[str | Path],
                   rollouts_paths: Sequence[str | Path], problems: Sequence[Problem], gym_config: Any,
                   skills_config: Any, out_dir: str | Path, *, retire_skills: bool = True, note: str = "",
                   progress: bool = False) -> LibraryUpdate:
    """Admission, usage and retirement over the given rollouts; commits and returns the new version."""
    from davinci.skills import (SkillStore, admit, apply_decisions, apply_retirements, retire, update_usage,
                                with_usage)
    from davinci.skills.schema import Skill

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    store = SkillStore(Path(store_root))
    library = store.load(version)
    rollouts = read_rollouts(rollouts_paths)
    candidates = [Skill.from_dict(r["skill"]) for p in candidates_paths for r in read_jsonl(p)]
    cases = transfer_cases(rollouts, {p.id: p for p in problems})
    decisions = admit(candidates, library, cases, gym_config, skills_config, progress=progress) if candidates else []
    skills = apply_decisions(library.skills, decisions)
    stats = update_usage({s.id: s.usage for s in skills}, usage_observations(rollouts))
    skills = with_usage(skills, stats)
    retirements = retire(skills, stats, skills_config) if retire_skills else []
    skills = apply_retirements(skills, retirements)
    new = store.commit(skills, parent=library.version, note=note or f"update from {len(rollouts)} episodes")
    admissions = write_admissions(out / "admissions.jsonl", decisions)
    report = {
        "parent_version": library.version,
        "version": new.version,
        "decisions": [_decision_row(d) for d in decisions],
        "retirements": [{"skill_id": r.skill_id, "retired": r.retired, "reasons": list(r.reasons)} for r in retirements],
        "transfer_cases": len(cases),
        "episodes": len(rollouts),
    }
    (out / "library_update.json").write_text(json.dumps(report, indent=2, default=str))
    outcome = [d.outcome for d in decisions]
    return LibraryUpdate(
        version=new.version, parent_version=library.version, admitted=outcome.count("admitted"),
        rejected=sum(1 for d in decisions if d.outcome == "rejected" and not d.pending),
        merged=outcome.count("merged"), pending=sum(1 for d in decisions if d.pending),
        retired=sum(1 for r in retirements if r.retired), admissions_path=str(admissions),
        report_path=str(out / "library_update.json"),
    )


def _decision_row(decision: Any) -> dict[str, Any]:
    evidence = dataclasses.asdict(decision.evidence) if decision.evidence is not None else None
    return {"skill_id": decision.skill_id, "outcome": decision.outcome, "pending": bool(decision.pending),
            "reasons": list(decision.reasons), "evidence": evidence}
