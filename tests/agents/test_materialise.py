"""Materialisation with a replay backend (recorded answers; no model can be loaded here) and real kernelgym on
CPU: a correct answer helps (usage success, evidence, transfer case), a wrong one does not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from data_prep.builtin import builtin_problems
from davinci.agents.materialise import materialise
from davinci.kernelgym.config import GymConfig
from davinci.llm.types import GenOutput
from davinci.skills import seed_skills
from davinci.skills.config import SkillsConfig

pytestmark = pytest.mark.slow


class ReplayBackend:
    """Returns the recorded answers in order (stands in for the policy)."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.prompts: list = []

    def generate(self, prompts, sampling):
        self.prompts.extend(prompts)
        return [GenOutput(self.answers.pop(0), (), (), (), "stop") for _ in prompts]


def test_materialise_records_where_it_helped_and_where_not() -> None:
    from davinci.kernelgym import evaluate

    relu = {p.id: p for p in builtin_problems()}["builtin/relu"]
    skill = seed_skills(evidence_path=None)[0]
    good = f"```python\n{relu.reference_solution}\n```"
    bad = "```python\n" + relu.reference_solution.replace("tl.maximum(x, 0.0)", "x") + "\n```"
    backend = ReplayBackend([good, bad])
    gym, cfg = replace(GymConfig(device="cpu"), correctness_trials=2), replace(SkillsConfig(), min_speedup_lower=0.0)
    first, skill1 = materialise(relu, skill, backend, evaluate, gym, cfg)
    second, skill2 = materialise(relu, skill1, backend, evaluate, gym, cfg)
    assert skill.title in backend.prompts[0][1]["content"]  # the skill is in the policy's prompt
    assert first.helped and first.transfer is not None and first.check.kind == "transfer"
    assert not second.helped and second.transfer is None and "incorrect" in second.check.note
    assert (skill2.usage.times_selected, skill2.usage.times_succeeded) == (skill.usage.times_selected + 2, skill.usage.times_succeeded + 1)
    assert [e.decision for e in skill2.evidence[-2:]] == ["helped on builtin/relu", "did not help on builtin/relu"]


@pytest.mark.parametrize("kind", ["needs_gpu", "internal", "reference"])
def test_a_verdict_of_the_machine_or_the_problem_records_no_usage(kind: str) -> None:
    """A CUDA skill on a CPU machine, a crashed evaluator or a broken reference says nothing about the skill: it
    raises with the fix instead of counting a failure against the skill (the evaluator is a stand-in here)."""
    from davinci.errors import DavinciError
    from davinci.rl.rewards import minimal_result

    relu = {p.id: p for p in builtin_problems()}["builtin/relu"]
    skill = seed_skills(evidence_path=None)[0]
    backend = ReplayBackend([f"```python\n{relu.reference_solution}\n```"])

    def unavailable(problem, cand, config, seed=0):
        return minimal_result(False, None, error_kind=kind, error=f"{kind} happened", compiled=False)

    with pytest.raises(DavinciError, match=f"could not judge the answer \\({kind}"):
        materialise(relu, skill, backend, unavailable, GymConfig(device="cpu"), SkillsConfig())
