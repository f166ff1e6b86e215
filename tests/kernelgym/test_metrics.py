"""fast_p exactly as KernelBench (strict >, unscored = failure), geomean, tables and the plot helper."""

from __future__ import annotations

import math

import pytest

from davinci.errors import UnknownName
from davinci.kernelgym.metrics import fast_p, fast_p_table, format_table, geomean_speedup, plot_fast_p


def r(correct: bool, speedup: float | None, level: int = 1, compile_speedup: float | None = None) -> dict:
    return {"correct": correct, "speedup": speedup, "speedup_compile": compile_speedup, "level": level}


RESULTS = [r(True, 2.0), r(True, 1.0), r(True, 0.5), r(False, 5.0), r(True, None)]


def test_fast_p_hand_computed():
    # correct and > p: p=0 -> 2.0, 1.0, 0.5 (3 of 5); p=1 -> only 2.0 (1.0 is not > 1: strict)
    assert fast_p(RESULTS, 0.0) == pytest.approx(3 / 5)
    assert fast_p(RESULTS, 1.0) == pytest.approx(1 / 5)
    assert fast_p(RESULTS, 0.99) == pytest.approx(2 / 5)
    assert fast_p(RESULTS, 2.0) == 0.0


def test_unscored_problems_count_as_failures_with_n_total():
    assert fast_p(RESULTS, 0.0, n_total=100) == pytest.approx(3 / 100)
    assert fast_p([], 1.0, n_total=0) == 0.0


def test_incorrect_result_never_counts_even_when_fast():
    assert fast_p([r(False, 10.0)], 1.0) == 0.0


def test_baseline_selects_the_compile_speedup_and_unknown_baseline_raises():
    rs = [r(True, 0.5, compile_speedup=1.5), r(True, 3.0, compile_speedup=0.9)]
    assert fast_p(rs, 1.0, baseline="compile") == pytest.approx(0.5)
    with pytest.raises(UnknownName):
        fast_p(rs, 1.0, baseline="cudagraphs")


def test_geomean_over_correct_results_only():
    assert geomean_speedup(RESULTS) == pytest.approx(math.exp((math.log(2) + math.log(1) + math.log(0.5)) / 3))
    assert geomean_speedup([r(False, 2.0)]) is None


def test_table_per_level_and_overall_row():
    rs = [r(True, 2.0, 1), r(False, None, 1), r(True, 1.5, 2, compile_speedup=0.5)]
    rows = fast_p_table(rs, n_total={1: 4, 2: 1})
    by = {(row["level"], row["baseline"]): row for row in rows}
    assert by[(1, "eager")]["fast_1"] == pytest.approx(1 / 4)
    assert by[(2, "compile")]["fast_1"] == 0.0
    assert by[("all", "eager")]["n"] == 5 and by[("all", "eager")]["fast_1"] == pytest.approx(2 / 5)
    assert "| level |" in format_table(rows)


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "fast_p.png"
    fig = plot_fast_p([r(True, 2.0, 1), r(True, 0.7, 1)], str(path))
    assert path.stat().st_size > 1000 and fig.axes[0].get_ylabel() == "fast_p"
