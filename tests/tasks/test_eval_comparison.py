"""`tasks.eval.compare_checkpoints`: two eval output folders (SFT in `sft/`, RL beside it) become the RL outputs
plus the paired comparison files, with the metrics the eval flow logs under `summary["heldout"]`."""

from __future__ import annotations

import json
from pathlib import Path

from artifacts.refs import StageOutputs
from davinci.jsonl import write_jsonl
from tasks.eval import compare_checkpoints


def _outputs(folder: Path, correct: dict[str, bool]) -> StageOutputs:
    rows = [{"problem_id": pid, "name": pid, "correct": ok, "speedup": 0.01 if ok else None, "timing_label": "cpu"}
            for pid, ok in correct.items()]
    write_jsonl(folder / "results.jsonl", rows)
    return StageOutputs("eval", str(folder), {"results": "results.jsonl"}, {"correct": sum(correct.values())}).write()


def test_comparison_files_and_summary(tmp_path: Path):
    rl = _outputs(tmp_path, {"a": True, "b": True, "c": False})
    sft = _outputs(tmp_path / "sft", {"a": False, "b": True, "c": False})
    out = compare_checkpoints(sft, rl, seed=0)
    assert out.dir == rl.dir and out.files["sft_results"] == "sft/results.jsonl"
    assert all(out.path(k).is_file() for k in ("comparison", "comparison_md", "comparison_plot", "results"))
    held = out.summary["heldout"]
    assert (held["heldout/correct_sft"], held["heldout/correct_rl"], held["heldout/n"]) == (1 / 3, 2 / 3, 3.0)
    assert held["heldout/correct_diff"] == 1 / 3 and held["heldout/correct_diff_ci95_low"] >= 0.0
    assert out.summary["correct"] == 2  # the RL checkpoint's own summary is kept
    on_disk = StageOutputs.read(tmp_path)
    assert on_disk.files == out.files and json.loads(out.path("comparison").read_text())["before_label"] == "sft"
