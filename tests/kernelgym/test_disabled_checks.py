"""A check left out of `gym.checks` changes nothing: its evidence neither flags the candidate nor skips its timing.

The self-speedup benchmark's `--production` mode times the torch-only reference as the candidate with every
runtime check but `torch_compute` and `no_kernel_launched` (which flag it by design). The accounting call still
runs there (`host_compute` wants it) and records that PyTorch did the work; that evidence must stay evidence:
a candidate with no enabled finding against it is timed. Found on an H200, where every production row came back
correct with no timing and no reason.
"""

from __future__ import annotations

import re

import pytest

from davinci.kernelgym import Evaluator
from davinci.kernelgym.checks import RUNTIME_CHECKS
from davinci.types import Candidate


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_evidence_of_a_disabled_check_does_not_skip_timing(tmp_path, make_config, problem):
    checks = ",".join(n for n in RUNTIME_CHECKS.names() if n not in ("torch_compute", "no_kernel_launched"))
    relu = problem("relu")
    torch_only = Candidate(problem_id=relu.id, code=re.sub(r"\bModel\b", "ModelNew", relu.code), backend="triton")
    with Evaluator(make_config(tmp_path, checks=checks)) as ev:
        r = ev.evaluate(relu, torch_only, seed=0)
    # Either verdict can be right here (on the CPU the interpreter's store record makes a torch-only forward
    # `host_compute` once it is timed; a GPU has no such record and times it): what must never happen is a
    # correct, unflagged result that was silently not timed.
    if r.correct:
        assert r.details["timing_rounds"] > 0 and r.speedup is not None, r.details
    else:
        assert r.flags and r.error_kind == "hack", (r.error_kind, r.error)
