"""`evaluate_batch` evaluates each distinct (problem, source, backend) once (`gym.dedup_batch`).

An RL group repeats a completion often (a small policy at temperature 1 writes the same kernel for most of a
group); each copy used to be a full evaluation, and the copies took turns on one build folder. Tests: which
items count as the same (hand-computed), and on the CPU evaluator (Triton interpreter, real lanes) that copies
get the evaluated item's verdict, marked `copy_of`, while `dedup_batch=False` evaluates every copy.
"""

from __future__ import annotations

import dataclasses

import pytest

from davinci.kernelgym import batch as batch_module
from davinci.kernelgym import evaluate_batch
from davinci.kernelgym.batch import unique_items
from davinci.types import Candidate


def test_same_problem_source_and_backend_is_one_evaluation(problem, candidate):
    relu, row_sum = problem("relu"), problem("row_sum")
    honest = candidate("honest_relu", relu)
    again = Candidate(problem_id=relu.id, code=honest.code, backend=honest.backend)  # another object, same text
    other_backend = dataclasses.replace(honest, backend="cuda")
    moved = dataclasses.replace(relu, code=relu.code + "\n# the same id, another program\n")
    items = [(relu, honest), (row_sum, honest), (relu, again), (relu, other_backend), (moved, honest), (relu, honest)]
    firsts, slot = unique_items(items)
    assert firsts == [0, 1, 3, 4]
    assert slot == [0, 1, 0, 2, 3, 0]


def test_items_that_are_not_problem_and_candidate_are_never_merged():
    # the evaluator reports each bad item itself (test_cluster's unreachable-scheduler test passes (None, None))
    assert unique_items([(None, None), (None, None), ("relu", "code")]) == ([0, 1, 2], [0, 1, 2])


@pytest.mark.slow
def test_copies_share_the_first_evaluation_and_off_evaluates_each(problem, candidate, make_config, tmp_path):
    relu = problem("relu")
    honest, wrong = candidate("honest_relu", relu), candidate("cheat_wrong_dtype", relu)
    items = [(relu, honest), (relu, wrong), (relu, honest), (relu, honest)]
    config = make_config(tmp_path)
    try:
        results = evaluate_batch(items, config, seed=3)
        assert [r.correct for r in results] == [True, False, True, True]
        assert [r.details.get("copy_of") for r in results] == [None, None, 0, 0]
        assert results[2].wall_s == results[0].wall_s == results[3].wall_s  # one evaluation, not three

        each = evaluate_batch(items, dataclasses.replace(config, dedup_batch=False), seed=3)
        assert [r.correct for r in each] == [True, False, True, True]
        assert all("copy_of" not in r.details for r in each)
        assert len({r.wall_s for r in (each[0], each[2], each[3])}) == 3  # three evaluations of the same code
    finally:
        batch_module.close_shared()
