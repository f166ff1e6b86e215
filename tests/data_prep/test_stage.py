"""The whole data stage on the tiny config (and KernelBench as the eval set) into a temporary folder.

SFT examples come from the `sft_doubles` fixture (conftest.py: doubles of davinci.agents.sft_examples_for
and of the BM25 retriever); `test_default_path` runs the real agents/skills packages once they exist.
"""

from __future__ import annotations

import csv
import hashlib
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from data_prep.builtin import default_heldout_ids
from data_prep.kernelbench import PROJECT_ROOT
from data_prep.stage import read_problems, run_data_stage
from davinci.config.data import DataConfig
from davinci.errors import ConfigError



def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_tiny_stage_writes_every_file_fast_and_deterministically(tmp_path: Path, sft_doubles):
    start = time.perf_counter()
    out = run_data_stage(DataConfig(), tmp_path / "a", seed=0, **sft_doubles.kwargs())
    assert time.perf_counter() - start < 30  # seconds on the tiny profile (a few on an idle machine)
    train, eval_ = read_problems(out.train_path), read_problems(out.eval_path)
    assert tuple(p.id for p in eval_) == default_heldout_ids()
    assert len(train) == 18 and not {p.id for p in train} & {p.id for p in eval_}
    assert all(p.reference_solution for p in train + eval_)
    counts = out.counts
    assert counts["train"] == 18 and counts["eval"] == 5 and counts["dropped_decontamination"] == 0
    assert counts["sft_examples"] == 54 and counts["sft_policy"] == counts["sft_selection"] == counts["sft_summary"] == 18
    examples = [json.loads(line) for line in out.sft_path.read_text().splitlines()]
    assert len(examples) == 54 and {e["problem_id"] for e in examples} == {p.id for p in train}
    manifest = json.loads(out.manifest_path.read_text())
    assert len(manifest["files"]) == 6 and manifest["counts"] == counts
    for entry in manifest["files"]:
        assert _sha(out.out_dir / entry["path"]) == entry["sha256"]
    with out.table_csv_path.open() as fh:
        assert next(csv.reader(fh)) == ["stage", "problem_id", "reason", "matched_id", "score", "detail"]
    report = json.loads(out.report_path.read_text())
    assert report["per_source"] == {"builtin": {"candidates": 18, "after_decontamination": 18, "train": 18}}
    assert "| builtin | 18 | 18 | 18 |" in out.table_md_path.read_text()
    again = run_data_stage(DataConfig(), tmp_path / "b", seed=0, **sft_doubles.kwargs())
    assert json.loads(again.manifest_path.read_text())["files"] == manifest["files"]


def test_trajectories_are_merged_and_eval_leaks_dropped(tmp_path: Path, sft_doubles):
    good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    leak = {**good, "problem_id": default_heldout_ids()[0]}
    path = tmp_path / "traj.jsonl"
    path.write_text("\n".join([json.dumps(good), "{broken", json.dumps(leak)]) + "\n")
    cfg = replace(DataConfig(), sft_trajectories=str(path))
    out = run_data_stage(cfg, tmp_path / "out", seed=0, **sft_doubles.kwargs())
    assert out.counts["sft_trajectories"] == 1 and out.counts["sft_examples"] == 55
    drops = json.loads(out.report_path.read_text())["drops"]
    assert [d["reason"] for d in drops if d["stage"] == "sft"] == ["bad-trajectory", "bad-trajectory"]


@pytest.mark.skipif(not (PROJECT_ROOT.parent / "shared" / "kernelbench").exists(), reason="no local KernelBench")
def test_kernelbench_eval_decontaminates_builtin_and_synthetic(tmp_path: Path, sft_doubles):
    cfg = replace(DataConfig(), eval_source="kernelbench", sources=("builtin", "synthetic"), synthetic_count=2)
    start = time.perf_counter()
    out = run_data_stage(cfg, tmp_path / "kb", seed=1, **sft_doubles.kwargs())
    assert time.perf_counter() - start < 120
    assert out.counts["eval"] == 250
    report = json.loads(out.report_path.read_text())
    decontam = [d for d in report["drops"] if d["stage"] == "decontamination"]
    by_id = {d["problem_id"]: d for d in decontam}
    assert by_id["builtin/relu"]["matched_id"] == "kernelbench/L1/19_ReLU" and by_id["builtin/relu"]["score"] == 1.0
    assert report["per_source"]["synthetic"]["candidates"] == 2
    train_ids = {p.id for p in read_problems(out.train_path)}
    assert train_ids and not train_ids & set(by_id)


@pytest.mark.skipif(not (PROJECT_ROOT.parent / "shared" / "kernelbench").exists(), reason="no local KernelBench")
def test_kernelbench_as_a_training_source(tmp_path: Path, sft_doubles):
    cfg = replace(DataConfig(), sources=("builtin", "kernelbench"), kernelbench_levels=(1,), kernelbench_limit=3)
    out = run_data_stage(cfg, tmp_path / "kbtrain", seed=0, **sft_doubles.kwargs())
    report = json.loads(out.report_path.read_text())
    assert report["per_source"]["kernelbench"]["candidates"] == 3
    kb_train = [p for p in read_problems(out.train_path) if p.source == "kernelbench"]
    assert kb_train and report["sft"]["problems_without_solution"] == len(kb_train)
    assert out.counts["sft_policy"] == 18  # only problems with a reference solution give SFT examples


def test_config_errors_name_the_fix(tmp_path: Path, sft_doubles):
    with pytest.raises(ConfigError, match="training on the eval set"):
        run_data_stage(replace(DataConfig(), eval_source="kernelbench", sources=("kernelbench",)), tmp_path, 0, **sft_doubles.kwargs())
    with pytest.raises(ConfigError, match="builtin/nope") as err:
        run_data_stage(replace(DataConfig(), eval_ids=("builtin/nope",)), tmp_path, 0, **sft_doubles.kwargs())
    assert "builtin/relu" in str(err.value)
    with pytest.raises(ConfigError, match="data.sources is empty"):
        run_data_stage(replace(DataConfig(), sources=()), tmp_path, 0, **sft_doubles.kwargs())


def test_default_path(tmp_path: Path):
    """Real agents + skills packages (skipped until davinci.agents exports sft_examples_for)."""
    import davinci.agents as agents

    if not hasattr(agents, "sft_examples_for"):
        pytest.skip("davinci.agents.sft_examples_for is not built yet")
    out = run_data_stage(DataConfig(), tmp_path / "real", seed=0)
    assert out.counts["train"] == 18 and out.counts["sft_policy"] >= 18 and out.counts["sft_summary"] == 18


def _heldout_cfg(**kw) -> DataConfig:
    base = dict(sources=("synthetic",), eval_source="synthetic_heldout", synthetic_ops=("relu", "sigmoid", "abs", "shift"),
                synthetic_lengths=(2,), synthetic_count=8, synthetic_heldout=4, synthetic_verify=False,
                decontam_threshold=1.0, dedup_threshold=1.0, cluster_cap=0)
    return replace(DataConfig(), **{**base, **kw})


def test_synthetic_heldout_split_is_by_operator_signature(tmp_path: Path, sft_doubles):
    from data_prep.source_ast import operator_signature

    out = run_data_stage(_heldout_cfg(), tmp_path / "held", seed=0, **sft_doubles.kwargs())
    train, held = read_problems(out.train_path), read_problems(out.eval_path)
    assert len(held) == 4 and len(train) + out.counts["dropped_decontamination"] == 8
    op_sets = lambda ps: {tuple(sorted(operator_signature(p.code))) for p in ps}  # noqa: E731
    assert not op_sets(train) & op_sets(held)  # no held-out op pair is trained on, in either order
    assert all(p.source == "synthetic" for p in train + held)
    assert json.loads(out.report_path.read_text())["synthesis"]["held_out"] == 4
    again = run_data_stage(_heldout_cfg(), tmp_path / "again", seed=0, **sft_doubles.kwargs())
    assert [p.id for p in read_problems(again.eval_path)] == [p.id for p in held]


def test_synthetic_heldout_without_synthetic_training(tmp_path: Path, sft_doubles):
    """`data.sources=[builtin]` with the tiny eval split: built-in problems train, op chains are the eval set."""
    out = run_data_stage(_heldout_cfg(sources=("builtin",), synthetic_count=0, synthetic_heldout=2), tmp_path / "b", seed=0,
                         **sft_doubles.kwargs())
    assert out.counts["eval"] == 2 and out.counts["train"] == 23
    assert all(p.source == "builtin" for p in read_problems(out.train_path))


def test_split_by_signature_ignores_draw_order():
    from data_prep.stage import split_by_signature
    from data_prep.synthesis import ChainPool, synthesize_with_report

    problems = list(synthesize_with_report([], 6, 0, verify_solutions=False, pool=ChainPool(("relu", "abs", "shift"), (2,))).problems)
    held, rest = split_by_signature(problems, 2)
    held_rev, _ = split_by_signature(problems[::-1], 2)
    assert {p.id for p in held} == {p.id for p in held_rev} and len(rest) == 4
    assert {tuple(sorted(p.name.split("_"))) for p in held} == {tuple(sorted(held[0].name.split("_")))}  # a pair and its reverse


def test_synthetic_heldout_config_errors(tmp_path: Path, sft_doubles):
    with pytest.raises(ConfigError, match="holds out no problems"):
        run_data_stage(_heldout_cfg(synthetic_heldout=0), tmp_path, 0, **sft_doubles.kwargs())
    with pytest.raises(ConfigError, match="unknown synthesis ops"):
        run_data_stage(_heldout_cfg(synthetic_ops=("relu", "nope")), tmp_path, 0, **sft_doubles.kwargs())
