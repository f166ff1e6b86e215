"""Lineage skills: the reverse step's ratio CI (hand-computed), step keeping, every field of a candidate filled,
bad input; and one real run (kernelgym on CPU) from a seed skill's expert kernel through the admission gate."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from davinci.errors import DavinciError, InputNotFound, MalformedInput
from davinci.skills.lineage import Expert, Timed, derive_lineage, ratio_ci, read_replay_simplifications
from davinci.skills.rewrites import SIMPLIFICATIONS
from davinci.types import Problem

PROBLEM = Problem("builtin/toy", "builtin", 1, "toy", "import torch\nclass Model:\n    def forward(self, x):\n        return torch.relu(x)\n"
                  "rows = 8\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n")
EXPERT = "BLOCK = 1024\nk[g](x, BLOCK=BLOCK, num_warps=8)\nclass ModelNew: pass\n"


def test_ratio_ci_is_conservative() -> None:
    slow = Timed(True, 0.5, 2.0, 1.8, 2.4)
    fast = Timed(True, 1.0, 1.0, 0.9, 1.2)
    # speedup 2.0 / 1.0; CI [1.8 / 1.2, 2.4 / 0.9]
    assert ratio_ci(slow, fast) == pytest.approx((2.0, 1.5, 2.6666667))
    assert ratio_ci(Timed(True, None, None, None, None), fast) is None


def _result(ms: float, correct: bool = True) -> SimpleNamespace:
    runtime = SimpleNamespace(median_ms=ms, ci_low_ms=ms * 0.95, ci_high_ms=ms * 1.05)
    return SimpleNamespace(correct=correct, flags=(), speedup=1.0 / ms, runtime=runtime, device="fake-gpu",
                           timing_label="cuda", error_kind=None if correct else "mismatch", error="")


def test_steps_kept_only_when_correct_and_candidates_fully_filled() -> None:
    # each rule on the expert itself: tiles shrunk: correct but 4x slower; one warp: incorrect (dropped)
    def evaluate(problem, cand, config, seed=None, shape_overrides=None):
        if "num_warps=1" in cand.code:
            return _result(1.0, correct=False)
        return _result(4.0 if "BLOCK = 16" in cand.code else 1.0)

    simps = [SIMPLIFICATIONS.get("shrink_tiles"), SIMPLIFICATIONS.get("single_warp"), SIMPLIFICATIONS.get("single_stage")]
    result = derive_lineage(Expert(PROBLEM, EXPERT, "builtin"), simps, evaluate, SimpleNamespace(device="cuda"))
    assert [(s.name, s.kept) for s in result.steps] == [("shrink_tiles", True), ("single_warp", False), ("single_stage", False)]
    assert result.steps[2].reason == "does not apply to this kernel"
    (skill,) = result.candidates
    assert skill.provenance.kind == "lineage" and skill.status == "candidate"
    assert skill.example.after == EXPERT and "relu" in skill.applies_to.ops and "tiling" in skill.applies_to.patterns
    pre = skill.preconditions
    assert all([skill.intent, skill.guidance, skill.failure_modes, pre.dtypes, pre.shapes, pre.layout, pre.hardware])
    (m,) = skill.effect.measurements
    assert m.speedup == pytest.approx(4.0) and m.ci_low == pytest.approx(4 * 0.95 / 1.05) and m.timing_label == "cuda"
    assert "-BLOCK = 16" in skill.guidance and "+BLOCK = 1024" in skill.guidance


def test_incorrect_expert_is_an_error() -> None:
    with pytest.raises(DavinciError, match="not correct"):
        derive_lineage(Expert(PROBLEM, EXPERT, "builtin"), [], lambda *a, **k: _result(1.0, False), SimpleNamespace(device="cpu"))


def test_replay_simplifications(tmp_path) -> None:
    row = {"problem_id": PROBLEM.id, "name": "unfuse", "description": "d", "reverse_intent": "fuse", "pattern": "fusion",
           "find": "num_warps=8", "replace": "num_warps=2"}
    (tmp_path / "r.jsonl").write_text(json.dumps(row) + "\n" + json.dumps({**row, "problem_id": "other"}) + "\n")
    (simp,) = read_replay_simplifications(tmp_path / "r.jsonl", PROBLEM.id)
    assert simp.name == "replay:unfuse" and simp.apply(EXPERT) == EXPERT.replace("num_warps=8", "num_warps=2")
    (tmp_path / "bad.jsonl").write_text('{"problem_id": "x"}\n')
    with pytest.raises(MalformedInput, match="bad.jsonl:1"):
        read_replay_simplifications(tmp_path / "bad.jsonl", "x")
    with pytest.raises(InputNotFound, match="--replay"):
        read_replay_simplifications(tmp_path / "none.jsonl", "x")


@pytest.mark.slow
def test_seed_kernel_lineage_through_admission_on_cpu(gym) -> None:
    """Real kernelgym (Triton interpreter): the seed skill's expert kernel, `single_warp` kept, its candidate
    admitted by the existing gate (the tiny profile's bar: correctness and reproducibility)."""
    if not gym.real:
        pytest.skip("needs davinci.kernelgym.evaluate")
    from dataclasses import replace

    from davinci.skills import admit, seed_skills
    from davinci.skills.config import SkillsConfig

    seed = {s.id: s for s in seed_skills()}["triton-fuse-elementwise-chain"]
    prob = Problem(f"skill-example/{seed.id}", "synthetic", 0, seed.id, seed.example.before)
    expert = Expert(prob, seed.example.after, f"seed:{seed.id}", seed.example.cpu_shapes)
    result = derive_lineage(expert, [SIMPLIFICATIONS.get("single_warp")], gym.evaluate, gym.config)
    (cand,) = result.candidates
    assert cand.effect.measurements[0].timing_label == "cpu" and cand.effect.measurements[0].speedup > 0
    cfg = replace(SkillsConfig(), min_speedup_lower=0.0, admission_reruns=1, admission_shape_variants=1)
    (decision,) = admit([cand], (), [], gym.config, cfg)
    assert decision.outcome == "admitted", decision.reasons
    assert decision.skill.provenance.kind == "lineage" and decision.skill.evidence[-1].decision == "admitted"


@pytest.mark.parametrize("device,skills", [("cuda", 0), ("cpu", 1)])
def test_a_reverse_step_without_a_measured_gain_is_no_skill_on_a_gpu(device: str, skills: int) -> None:
    # shrunk tiles: correct and exactly as fast as the expert (CI [0.90, 1.11] holds 1). On a GPU that step taught
    # nothing (found on an H200: a 0.95x [0.77, 1.10] step was admitted as an optimisation skill); on the CPU the
    # interpreter's timing says nothing about speed, so the step still yields a candidate for the CPU gate.
    simps = [SIMPLIFICATIONS.get("shrink_tiles")]
    result = derive_lineage(Expert(PROBLEM, EXPERT, "builtin"), simps, lambda *a, **k: _result(1.0), SimpleNamespace(device=device))
    (step,) = result.steps
    assert step.kept and len(result.candidates) == skills
    if device == "cuda":
        assert "no gain beyond noise" in step.reason
