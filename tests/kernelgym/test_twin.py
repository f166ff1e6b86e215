"""The reference twin and the freeze: live eager is timed in a candidate-like process of its own, and no
candidate process can run, launch or signal while a baseline is timed.

CPU runs (host clock): the properties are about processes, not kernels; the H100 figures are in
benchmarks/results/h100/kernelgym/self_speedup.
"""

from __future__ import annotations

import re
import statistics

import pytest

from davinci.kernelgym import Evaluator
from davinci.kernelgym.lane import Lane
from davinci.types import Candidate


def as_candidate(p, code: str | None = None) -> Candidate:
    """The problem's own code with Model renamed ModelNew (its true speedup is 1), or `code`."""
    return Candidate(problem_id=p.id, code=code or re.sub(r"\bModel\b", "ModelNew", p.code), backend="triton")


@pytest.fixture(scope="module")
def plain(tmp_path_factory, make_config):
    # checks off: these tests are about the timing processes, not the pattern checks
    ev = Evaluator(make_config(tmp_path_factory.mktemp("kg-twin"), checks="none", profile_coverage=False,
                               timing_min_reps=6, timing_max_reps=12, timing_max_s=1.0, run_timeout_s=20.0))
    yield ev
    ev.close()


def test_live_eager_runs_in_the_twin_and_matches_the_same_code(plain, problem):
    p = problem("matmul_cpu")
    r = plain.evaluate(p, as_candidate(p), seed=0)
    assert r.correct and not r.flags, r.feedback
    assert r.details["eager_timer"] == "twin"
    src = r.details["timing_sources"]
    # the property, not a ratio (a loaded machine moves any ratio; benchmarks/ measures it): both sides were
    # timed by the same harness, round for round, and both carry their own clocks
    assert {"cand", "eager"} <= set(src) and r.speedup is not None
    assert len(r.details["wall_floor_ratios"]) == r.details["timing_rounds"] > 0
    assert all(src[side]["event_ms"] > 0 and src[side]["host_ms"] > 0 for side in ("cand", "eager"))


def test_the_seconds_of_an_evaluation_are_split_by_phase(plain, problem):
    """details.phase_s says where an evaluation's wall time went (the throughput benches print it)."""
    p = problem("relu")
    r = plain.evaluate(p, as_candidate(p), seed=1)
    assert r.correct, r.feedback
    phases = r.details["phase_s"]
    assert {"setup", "build", "correctness", "evidence", "timing", "cleanup"} <= set(phases)
    assert all(v >= 0 for v in phases.values()) and phases["timing"] > 0
    assert sum(phases.values()) <= r.wall_s + 1e-3  # disjoint pieces of one wall clock
    # inside the phases, the round trips: the candidate's timed requests, the twin's, the reference worker's checks
    trips = r.details["round_trips"]
    assert trips["cand:time"][0] >= 1 and trips["twin:time"][0] >= 1 and trips["ref:check"][0] >= 1
    assert sum(sec for _, sec in trips.values()) <= r.wall_s + 1e-3


def test_reference_worker_timing_is_still_available(tmp_path, make_config, problem):
    p = problem("relu")
    with Evaluator(make_config(tmp_path, checks="none", profile_coverage=False, eager_timer="reference")) as ev:
        r = ev.evaluate(p, as_candidate(p), seed=0)
    assert r.correct and r.details["eager_timer"] == "reference" and r.speedup is not None


def _eager_ms(ev: Evaluator, p, cand: Candidate, seeds=(0, 1)) -> float:
    out = []
    for s in seeds:
        r = ev.evaluate(p, cand, seed=s)
        assert r.correct, r.feedback
        out.append(r.baselines["eager"].median_ms)
    return statistics.median(out)


def test_a_candidate_cannot_stall_the_baseline_it_is_compared_with(plain, problem, candidate, monkeypatch):
    p = problem("matmul_cpu")
    clean = _eager_ms(plain, p, as_candidate(p))
    stalled = _eager_ms(plain, p, candidate("cheat_stall_baseline", p))
    assert stalled < 1.8 * clean, (stalled, clean)
    # the property holds twice over: the freeze, and the candidate's own PID namespace (it cannot see the
    # twin to stop it); with the freeze patched out the stall still reaches nothing
    monkeypatch.setattr(Lane, "freeze_children", lambda self, keep: [])
    unfrozen = _eager_ms(plain, p, candidate("cheat_stall_baseline", p))
    assert unfrozen < 1.8 * clean, (unfrozen, clean)


def test_stopped_workers_are_woken_and_the_next_candidate_is_served(plain, problem, candidate):
    p = problem("relu")
    r = plain.evaluate(p, candidate("cheat_stop_workers", p), seed=0)
    assert r.error_kind in (None, "mismatch") and r.wall_s < 15, (r.error_kind, r.error, r.wall_s)
    nxt = plain.evaluate(p, as_candidate(p), seed=1)
    assert nxt.correct and nxt.wall_s < 15, (nxt.error_kind, nxt.error, nxt.wall_s)
