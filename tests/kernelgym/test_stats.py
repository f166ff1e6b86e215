"""Timing statistics: bootstrap CI of the median, the ratio CI, the stop rule and the defended time."""

from __future__ import annotations

import numpy as np
import pytest

from davinci.kernelgym.stats import defended, median_ci_rel, ratio_ci, should_stop, summarize


def test_summary_brackets_the_median_and_is_seeded():
    x = list(np.random.default_rng(0).normal(10.0, 0.5, 200))
    s = summarize(x, label="cuda", seed=3)
    assert s.ci_low_ms <= s.median_ms <= s.ci_high_ms and s.trials == 200
    assert s == summarize(x, label="cuda", seed=3)
    assert s.ci_high_ms - s.ci_low_ms < 0.3


def test_ratio_of_medians_and_its_ci():
    base = [2.0] * 50 + [2.02] * 50
    cand = [1.0] * 50 + [1.01] * 50
    ratio, (lo, hi) = ratio_ci(base, cand)
    assert ratio == pytest.approx(2.01 / 1.005) and lo <= ratio <= hi and hi - lo < 0.1


def test_stop_rule_needs_tight_medians_or_a_cap():
    tight = [1.0] * 20
    noisy = list(np.random.default_rng(1).uniform(0.5, 1.5, 20))
    rule = dict(min_reps=5, max_reps=100, ci_rel=0.01, elapsed_s=0.0, max_s=10.0)
    assert should_stop({"a": tight}, **rule)
    assert not should_stop({"a": tight, "b": noisy}, **rule)
    assert should_stop({"a": noisy}, **{**rule, "elapsed_s": 11.0})
    assert median_ci_rel([1.0, 2.0]) == float("inf")


def test_defended_time_counts_work_the_events_missed():
    # event 1 ms, host 5 ms with 0.1 ms loop overhead: a side stream ran ~4 ms past the end event
    assert defended([1.0], [5.0], 0.1, cuda=True) == [pytest.approx(4.9)]
    assert defended([1.0], [1.05], 0.1, cuda=True) == [1.0]
    assert defended([0.0], [3.0], 0.1, cuda=False) == [3.0]


def test_timing_sources_report_both_clocks_and_the_host_bound_share():
    from davinci.kernelgym.perf import timing_sources

    raw = {"cand": {"event": [1.0, 2.0, 3.0], "host": [1.5, 2.0, 3.6], "overhead_ms": 0.2},
           "eager": {"event": [], "host": [], "overhead_ms": 0.0}}
    got = timing_sources(raw)
    # host - overhead: 1.3 > 1.0, 1.8 < 2.0, 3.4 > 3.0 -> two of three calls were host-bound
    assert got == {"cand": {"event_ms": 2.0, "host_ms": 2.0, "overhead_ms": 0.2, "host_bound": pytest.approx(2 / 3)}}
