"""The skills benchmark scripts, rehearsed on the CPU: the retrieval benchmark end to end (small sizes),
its metrics by hand, and the GPU seed-admission script with the local evaluator double."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(rel: str, name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / rel)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture(scope="module")
def bench():
    return _load("benchmarks/skills_retrieval_bench.py", "skills_retrieval_bench")


def test_quality_metrics_hand_computed(bench):
    rankings = [["a", "b", "c", "d", "e", "f"], ["x", "y", "a"], ["q"]]
    labels = [["b", "f"], ["a"], ["z"]]
    recall, mrr = bench.quality(rankings, labels)
    # recall@5: 1/2 (b in top 5, f at 6), 1/1 (a at 3), 0 -> mean 0.5; MRR: 1/2, 1/3, 0 -> mean 5/18
    assert recall == pytest.approx(0.5) and mrr == pytest.approx(5 / 18)


def test_labels_cover_thirty_problems_and_name_seed_skills(bench):
    from davinci.skills.seed import seed_skills

    labelled = bench.load_labels()
    assert len(labelled) >= 30
    ids = {s.id for s in seed_skills(evidence_path=None)}
    items = json.loads(bench.LABELS.read_text())["items"]
    assert all(set(it["relevant"]) <= ids and it["reason"] for it in items)


def test_synthetic_libraries_are_valid_and_distinct(bench):
    lib = bench.synthetic_library(60, seed=3)
    assert len({s.id for s in lib}) == 60
    assert lib == bench.synthetic_library(60, seed=3)  # deterministic


def test_retrieval_bench_runs_and_reports(bench, tmp_path, capsys):
    assert bench.main(["--sizes", "50", "--queries", "10", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "| BM25 (rank-bm25, AST query) |" in printed and "not run (no model given" in printed
    doc = json.loads((tmp_path / "retrieval_bench.json").read_text())
    assert doc["timing_label"] == "cpu" and doc["parser"]["valid"] == 1.0
    bm25 = doc["quality"][0]
    assert bm25["recall_at_5"] > 0.6 and bm25["mrr"] > 0.6  # BM25 over the seeds must find relevant skills


def test_seed_admission_script_rehearsal_on_cpu(tmp_path, capsys):
    script = _load("benchmarks/gpu/skills_admit_seed.py", "skills_admit_seed")
    argv = ["--device", "cpu", "--evaluator", str(REPO / "tests/skills/gym_double.py"), "--bar", "0", "--reruns", "1", "--shapes", "1", "--workers", "1"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"skills": {"kept-from-earlier": {"outcome": "admitted"}}}))
    assert script.main(argv + ["--skills", "triton-rmsnorm-rowwise", "--out", str(tmp_path), "--merge", str(old)]) == 0
    doc = json.loads((tmp_path / "seed_evidence.json").read_text())
    assert set(doc["skills"]) == {"triton-rmsnorm-rowwise", "kept-from-earlier"}
    e = doc["skills"]["triton-rmsnorm-rowwise"]
    assert e["outcome"] == "admitted" and len(e["evidence"]["checks"]) == 2 and e["measurements"]
    assert doc["environment"]["device"] == "cpu" and "2/2 admitted" in (tmp_path / "seed_admission.md").read_text()
    # A CPU-timed admission never makes a seed admitted (only GPU evidence does).
    from davinci.skills.seed import seed_skills

    rms = next(s for s in seed_skills(evidence_path=tmp_path / "seed_evidence.json") if s.id == "triton-rmsnorm-rowwise")
    assert rms.status == "candidate" and rms.evidence[-1].decision == "admitted"
