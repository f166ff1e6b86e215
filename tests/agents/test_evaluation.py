"""The engine's eval loop: resumes by problem, one record per problem from the one best-turn rule, and the
paired bootstrap CI of a before/after comparison by hand."""

from __future__ import annotations

import doctest

import pytest

import davinci.agents.evaluation as evaluation_mod
from davinci.agents.evaluation import (eval_profile, paired_bootstrap_ci, problem_record, run_eval,
                                       stratified_paired_bootstrap_ci)
from davinci.llm.types import GenOutput


class Answers:
    """Answers every policy prompt with a ModelNew carrying `marker` (canned_evaluate reads it); counts prompts."""

    def __init__(self, marker: str) -> None:
        self.marker, self.prompts = marker, 0

    def generate(self, prompts, sampling):
        self.prompts += len(prompts)
        code = f"import torch\n\nclass ModelNew(torch.nn.Module):\n    pass  # {self.marker}\n"
        return [GenOutput(f"```python\n{code}```", (), (), (), "stop") for _ in prompts]


def test_doctests():
    assert doctest.testmod(evaluation_mod).failed == 0


def test_eval_resumes_and_records_the_best_turn(problems, profile, canned_evaluate, tmp_path):
    prof = eval_profile(profile)
    path = tmp_path / "episodes.jsonl"
    fast = Answers("CORRECT-FAST")
    run_eval(prof, problems[:1], fast, (), canned_evaluate, path)
    assert fast.prompts == 1  # correct at turn 0 (stop_when: correct): one prompt
    slow = Answers("CORRECT")
    episodes = run_eval(prof, problems, slow, (), canned_evaluate, path)
    assert slow.prompts == 1  # only the problem not yet in the file was run
    first, second = (problem_record(p, episodes.get(p.id)) for p in problems)
    assert (first["correct"], first["speedup"], first["turn"]) == (True, 2.0, 0)
    assert (second["correct"], second["speedup"]) == (True, 0.5)
    missing = problem_record(problems[0], None)
    assert missing["error_kind"] == "no_code" and missing["correct"] is False and missing["turn"] is None


def test_paired_bootstrap_ci_by_hand():
    # every problem flips 0 -> 1: the difference is 1 in every resample
    assert paired_bootstrap_ci([0.0] * 5, [1.0] * 5) == (1.0, 1.0, 1.0)
    # the pairing matters: after is before shifted by one problem -> mean 0, CI straddles 0
    d, lo, hi = paired_bootstrap_ci([1, 0, 1, 0, 1, 0, 1, 0], [0, 1, 0, 1, 0, 1, 0, 1], n_boot=2000)
    assert d == 0.0 and lo < 0.0 < hi
    with pytest.raises(ValueError, match="equal"):
        paired_bootstrap_ci([1.0], [1.0, 0.0])


def test_stratified_bootstrap_keeps_each_run_its_own_problems():
    # run A's 4 problems all gained 1, run B's 4 none: every resample within runs has mean 0.5 exactly ...
    a, b = ([0.0] * 4, [1.0] * 4), ([1.0] * 4, [1.0] * 4)
    assert stratified_paired_bootstrap_ci([a, b]) == (0.5, 0.5, 0.5)
    # ... while resampling the 8 pooled problems as one sample lets a resample draw more of one run than the other
    d, lo, hi = paired_bootstrap_ci(a[0] + b[0], a[1] + b[1], n_boot=2000)
    assert d == 0.5 and lo < 0.5 < hi


def test_stratified_bootstrap_of_one_run_is_the_paired_bootstrap():
    before, after = [0, 1, 0, 1, 0, 0, 1], [1, 1, 0, 1, 1, 0, 0]
    assert stratified_paired_bootstrap_ci([(before, after)], seed=3) == paired_bootstrap_ci(before, after, seed=3)
    with pytest.raises(ValueError, match="run 1: paired scores need equal"):
        stratified_paired_bootstrap_ci([(before, after), ([1.0], [1.0, 0.0])])
    with pytest.raises(ValueError, match="one \\(before, after\\) pair of score lists per run"):
        stratified_paired_bootstrap_ci([])

