"""The SFT-vs-RL held-out comparison: pairing by problem, the means and the CI by hand, fast_1 only with GPU
timings, and the flat MLflow metrics."""

from __future__ import annotations

import doctest

import pytest

import davinci.agents.comparison as comparison_mod
from davinci.agents.comparison import compare_records, format_comparison, paired_score


def _record(pid: str, correct: bool, speedup: float | None = None, timing: str | None = "cpu") -> dict:
    return {"problem_id": pid, "name": pid.split("/")[-1], "correct": correct, "speedup": speedup, "timing_label": timing}


def test_doctests():
    assert doctest.testmod(comparison_mod).failed == 0


def test_pairs_by_problem_id_not_by_position():
    before = [_record("p/a", True), _record("p/b", False), _record("p/c", False), _record("p/d", False)]
    after = [_record("p/d", False), _record("p/c", True), _record("p/b", True), _record("p/a", True)]  # reversed
    c = compare_records(before, after, n_boot=2000)
    s = c.score("correct")
    # before 1/4, after 3/4; per-problem differences 0, +1, +1, 0 -> mean 0.5
    assert (s.n, s.before, s.after, s.diff) == (4, 0.25, 0.75, 0.5)
    # no problem got worse: no resample can have a negative mean; two of four improved, so a resample can be all 0
    assert s.ci95_low >= 0.0 and s.ci95_high <= 1.0 and s.ci95_low <= s.diff <= s.ci95_high
    assert [(p.problem_id, p.before_correct, p.after_correct) for p in c.problems] == [
        ("p/a", True, True), ("p/b", False, True), ("p/c", False, True), ("p/d", False, False)]


def test_all_flip_gives_a_degenerate_ci():
    s = paired_score("correct", [True, True, True], [False, False, False])
    assert (s.before, s.after, s.diff, s.ci95_low, s.ci95_high) == (1.0, 0.0, -1.0, -1.0, -1.0)


def test_fast_1_only_with_gpu_timings():
    cpu = compare_records([_record("p/a", True, 0.01)], [_record("p/a", True, 0.02)])
    assert cpu.score("fast_1") is None and cpu.timing_label == "cpu"
    assert "fast_1 not compared" in format_comparison(cpu)
    before = [_record("p/a", True, 1.5, "cuda"), _record("p/b", True, 0.9, "cuda")]
    after = [_record("p/a", True, 0.8, "cuda"), _record("p/b", True, 1.1, "cuda")]
    gpu = compare_records(before, after, n_boot=500)
    f1 = gpu.score("fast_1")
    assert (f1.before, f1.after, f1.diff) == (0.5, 0.5, 0.0)  # a lost its speedup, b gained one


def test_metrics_and_rows_for_mlflow():
    c = compare_records([_record("p/a", False), _record("p/b", True)], [_record("p/a", True), _record("p/b", True)], n_boot=500)
    m = c.metrics()
    assert (m["heldout/correct_sft"], m["heldout/correct_rl"], m["heldout/correct_diff"], m["heldout/n"]) == (0.5, 1.0, 0.5, 2.0)
    assert {"heldout/correct_diff_ci95_low", "heldout/correct_diff_ci95_high"} <= set(m)
    assert c.rows()[0] == {"problem_id": "p/a", "name": "a", "before_correct": False, "after_correct": True,
                           "before_fast_1": False, "after_fast_1": False}
    assert "| correct | 0.500 (1/2) | 1.000 (2/2) | +0.500 |" in format_comparison(c)


def test_unpaired_records_are_refused():
    with pytest.raises(ValueError, match="same non-empty problems"):
        compare_records([_record("p/a", True)], [_record("p/b", True)])
    with pytest.raises(ValueError, match="same non-empty problems"):
        compare_records([], [])
