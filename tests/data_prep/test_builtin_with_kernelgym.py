"""Every built-in reference solution through the real evaluator (`davinci.kernelgym.evaluate_batch`).

Written against the contract in docs/ARCHITECTURE.md (evaluate_batch(items, config, progress=, seed=) ->
list[EvalResult] with `compiled`, `correct`, `flags`, `error_kind`, `error`). Skipped until kernelgym
exports `evaluate_batch`. CPU: Triton interpreter in kernelgym's sandbox; CUDA: on the GPU machine.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from data_prep.builtin import builtin_problems
from davinci.kernelgym.config import GymConfig
from davinci.types import Candidate

pytestmark = pytest.mark.slow


def _evaluate_batch():
    import davinci.kernelgym as kernelgym

    fn = getattr(kernelgym, "evaluate_batch", None)
    if fn is None:
        pytest.skip("davinci.kernelgym.evaluate_batch is not built yet")
    return fn


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_every_reference_solution_passes_the_evaluator(device):
    evaluate_batch = _evaluate_batch()
    problems = builtin_problems()
    items = [(p, Candidate(problem_id=p.id, code=p.reference_solution, backend="triton")) for p in problems]
    config = replace(GymConfig(), device=device, measure_performance=False)
    results = evaluate_batch(items, config, progress=False, seed=0)
    assert len(results) == len(items)
    failures = [
        f"{p.id}: compiled={r.compiled} correct={r.correct} flags={r.flags} {r.error_kind}: {str(r.error)[:300]}"
        for p, r in zip(problems, results)
        if not (r.compiled and r.correct) or r.flags
    ]
    assert not failures, "\n".join(failures)
