"""EvalResult is JSON-safe: to_dict -> json -> from_dict gives the same value."""

from __future__ import annotations

import json

from davinci.kernelgym.result import ERROR_KINDS, EvalResult, TimingStats


def test_round_trip_through_json():
    t = TimingStats(1.0, 0.9, 1.1, 1.0, 0.05, 0.9, 1.2, 20, 1.02, "cuda")
    r = EvalResult(problem_id="p", candidate_hash="h", backend="triton", compiled=True, correct=True,
                   numerics_ok=True, flags=("x",), error_kind="hack", error="e", feedback="f", device="d",
                   timing_label="cuda", runtime=t, baselines={"eager": t}, speedup=1.5, speedup_ci=(1.4, 1.6),
                   shape_overrides={"n": 4}, details={"a": [1, 2]})
    back = EvalResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r
    assert "needs_gpu" in ERROR_KINDS and "hack" in ERROR_KINDS
