"""Diversity filter on hand-checkable cases: near-duplicates, cluster caps, determinism, the report."""

from __future__ import annotations

from dataclasses import replace

import pytest

from data_prep.builtin import builtin_problems
from data_prep.diversity import diversity_filter

BUILTIN = {p.name: p for p in builtin_problems()}


def _synthetic(problem, suffix: str, code: str | None = None):
    return replace(problem, id=f"synthetic/{problem.name}-{suffix}", source="synthetic", code=code or problem.code)


def test_near_duplicates_are_dropped_and_named():
    relu = BUILTIN["relu"]
    resized = _synthetic(relu, "big", relu.code.replace("dim = 1000", "dim = 4096"))
    softmax = BUILTIN["softmax"]
    kept, dropped, report = diversity_filter([resized, relu, softmax], dedup_threshold=0.9, cluster_cap=0, seed=0)
    # the built-in copy wins (source priority), the input order is kept for the survivors
    assert [p.id for p in kept] == ["builtin/relu", "builtin/softmax"]
    [record] = dropped
    assert (record.reason, record.problem_id, record.matched_id) == ("near-duplicate", resized.id, "builtin/relu")
    assert record.score == pytest.approx(1.0) and "near-duplicate of builtin/relu at similarity 1.00" in record.detail
    assert report.clusters_before == {"activation": 2, "softmax": 1}
    assert report.clusters_after == {"activation": 1, "softmax": 1}


def _activation_family():
    """Four single-activation problems: relu (builtin) and three synthetic ones with distinct ops."""
    relu = BUILTIN["relu"]
    ops = {"tanh": "torch.tanh(x)", "sigmoid": "torch.sigmoid(x)", "elu": "torch.nn.functional.elu(x)"}
    synth = [_synthetic(relu, op, relu.code.replace("torch.relu(x)", expr)) for op, expr in ops.items()]
    return [*synth, relu]


def test_cluster_cap_keeps_builtin_first_and_is_deterministic():
    problems = _activation_family()
    kept, dropped, report = diversity_filter(problems, dedup_threshold=0.9, cluster_cap=2, seed=7)
    assert len(kept) == 2 and "builtin/relu" in [p.id for p in kept]
    assert len(dropped) == 2 and all(d.reason == "cluster-cap" for d in dropped)
    assert all("family activation holds 4 problems; cap 2" == d.detail for d in dropped)
    assert report.clusters_before == {"activation": 4} and report.clusters_after == {"activation": 2}
    again = diversity_filter(problems, dedup_threshold=0.9, cluster_cap=2, seed=7)
    assert [p.id for p in again[0]] == [p.id for p in kept] and again[1] == dropped
    chosen = {tuple(p.id for p in diversity_filter(problems, 0.9, 2, seed)[0]) for seed in range(8)}
    assert len(chosen) > 1  # the seed decides which synthetic problem survives


def test_no_cap_and_report_is_json_safe():
    import json

    problems = _activation_family()
    kept, dropped, report = diversity_filter(problems, dedup_threshold=0.9, cluster_cap=0, seed=0)
    assert len(kept) == 4 and dropped == []
    assert json.loads(json.dumps(report.to_dict()))["method"].startswith("exact token-shingle Jaccard")
