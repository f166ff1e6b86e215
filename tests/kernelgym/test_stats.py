"""Timing statistics: bootstrap CI of the median, the ratio CI, the stop rule and the defended time."""

from __future__ import annotations

import numpy as np
import pytest

from davinci.kernelgym.stats import defended, launch_allowance, median_ci_rel, ratio_ci, should_stop, summarize


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
    # event 1 ms, host 5 ms, the reference's own host-minus-event gap 0.1 ms: ~3.9 ms ran outside the events
    assert defended([1.0], [5.0], 0.1, cuda=True) == [pytest.approx(4.9)]
    # within the reference's own gap: the events measure the call
    assert defended([1.0], [1.05], 0.1, cuda=True) == [1.0]
    assert defended([0.0], [3.0], 0.1, cuda=False) == [3.0]


def test_defended_time_charges_a_launch_path_longer_than_the_kernel():
    # a 5 us kernel behind 40 us of Python (launch path 0.045 ms, the timer's own share 0.005 ms): 0.040 ms;
    # the host span (0.070) minus the reference's gap (0.060) says less, the events far less
    assert defended([0.005], [0.070], 0.060, True, launches=[0.045], launch_overhead_ms=0.005) == [pytest.approx(0.040)]
    # a 4 ms kernel whose launch path is 0.03 ms: the events stand, the host's jitter does not count
    assert defended([4.0], [4.055], 0.060, True, launches=[0.030], launch_overhead_ms=0.005) == [4.0]


def test_launch_allowance_is_the_median_gap():
    assert launch_allowance([1.0, 2.0, 3.0], [1.05, 2.2, 3.1]) == pytest.approx(0.1)
    assert launch_allowance([1.0, 2.0], [1.1, 2.3]) == pytest.approx(0.2)  # even count: mean of the middle two
    assert launch_allowance([], []) == 0.0


def test_a_candidate_cannot_widen_its_own_allowance():
    # the allowance comes from the trusted eager's calls; a candidate spending 2 ms on the CPU before its
    # 1 ms kernel is charged the 2 ms whatever its own gaps look like
    allowance = launch_allowance([1.0] * 5, [1.06] * 5)
    assert defended([1.0] * 3, [3.06] * 3, allowance, True) == [pytest.approx(3.0)] * 3


def test_timing_sources_report_the_clocks_and_the_host_bound_share():
    from davinci.kernelgym.perf import timing_sources

    raw = {"cand": {"event": [1.0, 2.0, 3.0], "host": [1.5, 2.0, 3.6], "launch": [0.1, 2.5, 0.1], "overhead_ms": 0.2},
           "eager": {"event": [], "host": [], "launch": [], "overhead_ms": 0.0}}
    got = timing_sources(raw, allowance_ms=0.2, launch_overhead_ms=0.05)
    # host - allowance: 1.3 > 1.0, 1.8 < 2.0 (but launch 2.45 > 2.0), 3.4 > 3.0: every call was host-bound
    assert got == {"cand": {"phases_ms": {}, "event_ms": 2.0, "host_ms": 2.0, "launch_ms": 0.1, "overhead_ms": 0.2,
                            "allowance_ms": 0.2, "host_bound": pytest.approx(1.0)}}
    got = timing_sources(raw, allowance_ms=0.55, launch_overhead_ms=1.0)
    # host - 0.55: 0.95 < 1.0, 1.45 < 2.0, 3.05 > 3.0; launch - 1.0 never exceeds the events: one of three
    assert got["cand"]["host_bound"] == pytest.approx(1 / 3)


def test_wall_floor_raises_a_time_reported_below_the_supervisors_clock():
    from davinci.kernelgym.perf import wall_floor

    # twin: 2 calls of 1 ms in a 5 ms request each round -> gap 3 ms, spread 0 -> slack 0.2 + 0.1*3 = 0.5 ms
    twin, twin_walls = [1.0] * 6, [5.0, 5.0, 5.0]
    lying, ratios = wall_floor([0.5] * 6, [5.0, 5.0, 5.0], twin, twin_walls, per_round=2)
    # (5 - 3 - 0.5) / 2 - 0.02 * 0.5 = 0.74
    assert lying == pytest.approx([0.74] * 6) and ratios == pytest.approx([1.48] * 3)
    honest, ratios = wall_floor([1.0] * 6, [5.0, 5.0, 5.0], twin, twin_walls, per_round=2)
    assert honest == [1.0] * 6 and ratios == pytest.approx([0.73] * 3)  # within the clock: untouched


def test_wall_floor_uses_the_twins_median_gap_so_one_slow_twin_round_cannot_open_the_bar():
    from davinci.kernelgym.perf import wall_floor

    # one twin round took 50 ms longer (a hiccup): the median gap stays 3, its spread 0 -> the floor holds
    out, _ = wall_floor([0.1] * 6, [5.0] * 3, [1.0] * 6, [5.0, 55.0, 5.0], per_round=2)
    assert min(out) == pytest.approx(0.748)  # (5 - 3 - 0.5) / 2 - 0.02 * 0.1
