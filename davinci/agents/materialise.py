"""Materialisation: the policy applies one given skill (a lineage skill, say) to a problem, judged by the
admission gate's own check, and the skill's usage statistics record where it helped and where it did not.

`materialise(problem, skill, backend, evaluate_fn, gym, skills_cfg)`:
1. the policy's first-turn prompt with exactly this skill in it (`policy_messages(problem, [skill])`);
2. the answer's code evaluated timed vs eager and judged by `skills.admission._judge` as a `transfer` check
   (correct, no hack flags, CI lower bound above `skills.min_speedup_lower`): the same gate as admission;
3. the skill comes back with `usage` updated (`update_usage`: selected once, success = the check passed,
   reward = the speedup when it passed, else 0) and one `usage` evidence record naming the problem and
   holding the check, so "where it helped" is data. A pass also yields a `TransferCase` for later admission.
A verdict that is the machine's, the evaluator's or the problem's (`needs_gpu`, `internal`, `reference`)
raises instead: it says nothing about the skill, and counting it would retire skills for infrastructure.

    outcome, skill = materialise(problem, skill, backend, kernelgym.evaluate, profile.gym, profile.skills)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from davinci.skills.admission import PlannedCheck, TransferCase, _judge, _now, with_config_fields
from davinci.skills.schema import CheckRecord, EvidenceRecord, Skill
from davinci.skills.usage import UsageObservation, update_usage
from davinci.types import Candidate, Problem, Provenance


@dataclass(frozen=True)
class Materialisation:
    problem_id: str
    skill_id: str
    code: str | None
    check: CheckRecord
    transfer: TransferCase | None
    compiled: bool = False  # the answer had code and the evaluator built it (a runtime or numerics failure still applied it)

    @property
    def helped(self) -> bool:
        return self.check.passed


def _generate(problem: Problem, skill: Skill, backend: Any, max_new_tokens: int, seed: int) -> str | None:
    from davinci.agents.parsers import extract_code
    from davinci.agents.render import policy_messages
    from davinci.llm.types import Sampling

    (out,) = backend.generate([policy_messages(problem, [skill], backend=skill.backend)],
                              Sampling(max_new_tokens, greedy=True, seed=seed))
    return extract_code(out.text).code


def materialise(problem: Problem, skill: Skill, backend: Any, evaluate_fn: Callable[..., Any], gym: Any, skills_cfg: Any,
                *, max_new_tokens: int = 2048, seed: int = 0) -> tuple[Materialisation, Skill]:
    """See the module docstring. Returns the outcome and the skill with its usage and evidence updated."""
    code = _generate(problem, skill, backend, max_new_tokens, seed)
    cand = Candidate(problem.id, code or "", skill.backend, Provenance(agent="materialise"))
    compiled = False
    if code is None:
        check = CheckRecord("transfer", problem.id, False, False, seed, note="the policy's answer had no code")
    else:
        config = with_config_fields(gym, measure_performance=True, baselines=("eager",))
        result = evaluate_fn(problem, cand, config, seed=seed)
        _judgeable(result)
        compiled = bool(result.compiled)
        check = _judge(PlannedCheck("transfer", problem, cand, seed, (), True), result, skills_cfg.min_speedup_lower)
    reward = float(check.speedup or 0.0) if check.passed else 0.0
    obs = UsageObservation((skill.id,), (skill.id,), reward, check.passed, problem.id)
    usage = update_usage({skill.id: skill.usage}, [obs])[skill.id]
    verdict = f"helped on {problem.id}" if check.passed else f"did not help on {problem.id}"
    evidence = EvidenceRecord("usage", verdict, (check.note or "check passed",), (check,), _now())
    updated = replace(skill, usage=usage, evidence=skill.evidence + (evidence,))
    transfer = TransferCase(problem, cand, (skill.id,)) if check.passed else None
    return Materialisation(problem.id, skill.id, code, check, transfer, compiled), updated


# Verdicts that say nothing about the skill: the machine, the evaluator or the problem failed, not the answer.
UNJUDGEABLE = {"needs_gpu": "run it where the skill's backend runs (a GPU machine for a CUDA or GPU-timed skill)",
               "internal": "the evaluator failed: see its error, fix the machine or file an issue, and run again",
               "reference": "the problem's own reference program failed: check the problem file, then run again"}


def _judgeable(result: Any) -> None:
    """Raise (recording no usage) when the verdict is the evaluator's or the problem's, not the skill's."""
    from davinci.errors import DavinciError

    fix = UNJUDGEABLE.get(result.error_kind or "")
    if fix is not None:
        raise DavinciError(f"the evaluator could not judge the answer ({result.error_kind}: {str(result.error)[-300:]}); "
                           "the skill's usage was not recorded", fix)
