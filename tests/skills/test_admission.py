"""Verified admission.

The first three tests run real code through the evaluator (`gym` fixture: kernelgym when it exports
`evaluate`, else the local double in gym_double.py, a subprocess on the Triton interpreter). The rest
drive the gate with a scripted evaluator (fixed verdicts) to pin down its arithmetic: CI bar, flags,
near-duplicates, transfer cases, budgets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from davinci.kernelgym.config import GymConfig
from davinci.skills.admission import TransferCase, admit, apply_decisions, example_problem
from davinci.skills.config import SkillsConfig
from davinci.skills.schema import Effect, Measurement
from davinci.types import Candidate, Problem

CPU_GATE = SkillsConfig(min_speedup_lower=0.0, admission_reruns=2, admission_shape_variants=1, admission_workers=2)


def test_admits_an_honest_skill_with_cpu_evidence(gym, skill_factory):
    skill = skill_factory()
    [d] = admit([skill], [], [], gym.config, CPU_GATE, evaluate_fn=gym.evaluate, shape_variants_fn=gym.shape_variants)
    assert d.admitted and d.skill.status == "admitted", d.reasons
    kinds = [c.kind for c in d.evidence.checks]
    assert kinds.count("rerun") == 2 and kinds.count("shape") == 1
    assert all(c.passed and c.correct for c in d.evidence.checks)
    assert len({c.seed for c in d.evidence.checks}) == 3  # every run has its own unseen seed
    shape = next(c for c in d.evidence.checks if c.kind == "shape")
    assert dict(shape.shape_overrides) != {"rows": 8, "cols": 300}
    assert any("CPU" in r for r in d.evidence.reasons)
    assert dict(d.evidence.environment)["timing_label"] == "cpu"
    assert d.skill.evidence[-1] == d.evidence


def test_rejects_a_claimed_speedup_that_does_not_reproduce(gym, skill_factory):
    """The skill claims 3x; measured under the evaluator (interpreted Triton vs eager on a CPU) it is
    far below the 1.05 bar, so it is rejected with the measured CI in the evidence."""
    skill = replace(skill_factory(), effect=Effect("claims 3x", 3.0))
    gate = replace(CPU_GATE, min_speedup_lower=1.05, admission_shape_variants=0, admission_reruns=1)
    [d] = admit([skill], [], [], gym.config, gate, evaluate_fn=gym.evaluate, shape_variants_fn=gym.shape_variants)
    assert not d.admitted and d.skill.status == "candidate"
    [check] = d.evidence.checks
    assert check.correct and not check.passed
    assert "does not clear the bar 1.05" in check.note
    assert any("rerun check" in r for r in d.reasons)


def test_rejects_a_skill_that_is_wrong_on_an_unseen_shape(gym, skill_factory, sources):
    """Correct at its own example size (the element count is hard-coded), wrong at any other."""
    skill = skill_factory(after=sources.hardcoded)
    [d] = admit([skill], [], [], gym.config, CPU_GATE, evaluate_fn=gym.evaluate, shape_variants_fn=gym.shape_variants)
    assert not d.admitted
    shape = [c for c in d.evidence.checks if c.kind == "shape"]
    assert shape and not shape[0].correct
    assert not [c for c in d.evidence.checks if c.kind == "rerun"]  # timed reruns skipped after the failure
    assert any("shape check" in r and "incorrect" in r for r in d.reasons)


# --- the gate's logic with a scripted evaluator ----------------------------------------------


@dataclass(frozen=True)
class Verdict:
    correct: bool = True
    flags: tuple[str, ...] = ()
    speedup: float | None = 1.5
    speedup_ci: tuple[float, float] | None = (1.4, 1.6)
    device: str = "NVIDIA H100 80GB HBM3"
    timing_label: str = "cuda"
    error: str = ""
    error_kind: str = ""


def scripted(by_problem: dict[str, Verdict] | None = None, default: Verdict = Verdict()):
    calls = []

    def evaluate(problem, candidate, config, *, seed=None, shape_overrides=None):
        calls.append((problem.id, seed, dict(shape_overrides or {}), config.measure_performance))
        return (by_problem or {}).get(problem.id, default)

    evaluate.calls = calls  # type: ignore[attr-defined]
    return evaluate


GPU = GymConfig(device="cuda")
GPU_GATE = SkillsConfig(min_speedup_lower=1.05, admission_reruns=3, admission_shape_variants=2)


def variants(code, n, seed):
    return [{"rows": 16 + i} for i in range(n)]


def test_ci_lower_bound_must_clear_the_bar(skill_factory):
    for ci, admitted in (((1.04, 1.3), False), ((1.05, 1.3), False), ((1.06, 1.3), True)):
        ev = scripted(default=Verdict(speedup_ci=ci))
        [d] = admit([skill_factory()], [], [], GPU, GPU_GATE, evaluate_fn=ev, shape_variants_fn=variants)
        assert d.admitted is admitted, ci
    # 3 timed reruns at the example's own (GPU) sizes + 2 untimed unseen shapes
    assert sorted((sorted(o.items()), t) for _, _, o, t in ev.calls) == [([], True)] * 3 + [([("rows", 16)], False), ([("rows", 17)], False)]
    assert [m.ci_low for m in d.skill.effect.measurements] == [1.06] * 3
    assert d.skill.effect.best_lower == 1.06


def test_flags_errors_and_budget_reject(skill_factory):
    [flagged] = admit([skill_factory()], [], [], GPU, GPU_GATE, evaluate_fn=scripted(default=Verdict(flags=("no_kernel_launched",))), shape_variants_fn=variants)
    assert not flagged.admitted and any("hack flags: no_kernel_launched" in r for r in flagged.reasons)

    def raising(*args, **kwargs):
        raise RuntimeError("worker died")

    [broken] = admit([skill_factory()], [], [], GPU, GPU_GATE, evaluate_fn=raising, shape_variants_fn=variants)
    assert not broken.admitted and "evaluator raised RuntimeError" in broken.evidence.checks[0].error
    [late] = admit([skill_factory()], [], [], GPU, GPU_GATE, evaluate_fn=scripted(), shape_variants_fn=variants, deadline=time.monotonic() - 1)
    assert not late.admitted and all(c.note == "not run: time budget spent" for c in late.evidence.checks)


def _admitted(skill, best_lower):
    m = Measurement("p", best_lower + 0.1, best_lower, best_lower + 0.2, "H100", "cuda")
    return replace(skill, status="admitted", effect=replace(skill.effect, measurements=(m,)))


def test_near_duplicate_of_a_better_admitted_skill_is_merged_into_it(skill_factory):
    existing = _admitted(skill_factory("existing-add-relu"), 1.8)
    cand = skill_factory("cand-add-relu", failure_modes=("missing tail mask", "int32 overflow of offsets"), ops=("add", "relu", "clamp_min"))
    [d] = admit([cand], [existing], [], GPU, GPU_GATE, evaluate_fn=scripted(default=Verdict(speedup_ci=(1.2, 1.4))), shape_variants_fn=variants)
    assert d.outcome == "merged" and d.skill.status == "candidate"
    [keeper] = d.updated
    assert keeper.id == "existing-add-relu" and keeper.status == "admitted"
    assert "int32 overflow of offsets" in keeper.failure_modes and "clamp_min" in keeper.applies_to.ops
    assert keeper.evidence[-1].kind == "merge" and keeper.evidence[-1].decision == "absorbed cand-add-relu"
    lib = apply_decisions([existing], [d])
    assert [s.id for s in lib] == ["existing-add-relu"] and lib[0] == keeper


def test_better_near_duplicate_supersedes_the_admitted_one(skill_factory):
    existing = _admitted(skill_factory("existing-add-relu"), 1.1)
    cand = skill_factory("cand-add-relu")
    [d] = admit([cand], [existing], [], GPU, GPU_GATE, evaluate_fn=scripted(default=Verdict(speedup_ci=(1.9, 2.1))), shape_variants_fn=variants)
    assert d.admitted
    [old] = d.updated
    assert old.id == "existing-add-relu" and old.status == "retired"
    assert old.evidence[-1].kind == "retirement" and "superseded by cand-add-relu" in old.evidence[-1].decision
    lib = {s.id: s.status for s in apply_decisions([existing], [d])}
    assert lib == {"existing-add-relu": "retired", "cand-add-relu": "admitted"}


def test_transfer_cases_are_checked_and_can_be_required(skill_factory):
    skill = skill_factory("xfer-skill")
    origin = Problem("builtin/add_relu", "builtin", 1, "add_relu", skill.example.before)
    other = Problem("builtin/add_relu_big", "builtin", 1, "add_relu_big", skill.example.before)
    cases = [
        TransferCase(origin, Candidate(origin.id, skill.example.after, "triton"), ("xfer-skill",)),  # its own origin: not transfer
        TransferCase(other, Candidate(other.id, skill.example.after, "triton"), ("another-skill",)),  # did not use it
    ]
    needs_one = replace(GPU_GATE, min_transfer_cases=1)
    [pending] = admit([skill], [], cases, GPU, needs_one, evaluate_fn=scripted(), shape_variants_fn=variants)
    assert not pending.admitted and pending.pending
    assert "needs 1 transfer case(s) on other problems, has 0" in pending.reasons[-1]
    assert apply_decisions([], [pending])[0].id == "xfer-skill"  # kept as a candidate on probation

    cases.append(TransferCase(other, Candidate(other.id, skill.example.after, "triton"), ("xfer-skill",)))
    ev = scripted({other.id: Verdict(speedup_ci=(0.7, 0.9))})
    [failed] = admit([skill], [], cases, GPU, needs_one, evaluate_fn=ev, shape_variants_fn=variants)
    transfer = [c for c in failed.evidence.checks if c.kind == "transfer"]
    assert [c.problem_id for c in transfer] == [other.id] and not transfer[0].passed
    assert not failed.admitted and not failed.pending
    [ok] = admit([skill], [], cases, GPU, needs_one, evaluate_fn=scripted(), shape_variants_fn=variants)
    assert ok.admitted


def test_cpu_admission_runs_the_example_at_its_cpu_shapes(skill_factory):
    ev = scripted(default=Verdict(timing_label="cpu", device="cpu", speedup=0.01, speedup_ci=(0.01, 0.02)))
    [d] = admit([skill_factory()], [], [], GymConfig(device="cpu"), CPU_GATE, evaluate_fn=ev, shape_variants_fn=variants)
    assert d.admitted  # bar 0: correctness and reproducibility only
    reruns = [o for _, _, o, timed in ev.calls if timed]
    assert reruns == [{"rows": 8, "cols": 300}] * 2
    shapes = [o for _, _, o, timed in ev.calls if not timed]
    assert shapes == [{"rows": 16, "cols": 300}]  # proposed around the CPU sizes, merged with them
    problem, candidate = example_problem(d.skill)
    assert problem.code == d.skill.example.before and candidate.backend == "triton"
