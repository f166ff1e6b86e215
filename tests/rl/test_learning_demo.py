"""The learning demonstration's mechanics on the CPU (`benchmarks/gpu/learning_demo.py --smoke-cpu`): every arm
runs on the engine's code and `summary.json` carries the keys the issue asks for. At smoke sizes nothing is
learned (every score is 0), so this checks the plumbing, not the sign; the sign needs the GPU run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from davinci.jsonl import read_jsonl

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "learning_demo.py"
KEYS = {"heldout_n", "before", "after", "ci95_low", "ci95_high", "control_sft_after", "control_flipped_after", "device", "commit"}


@pytest.mark.slow
def test_demo_smoke_writes_the_summary(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("learning_demo", SCRIPT)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # type: ignore[union-attr]
    monkeypatch.setenv("OUT", str(tmp_path))
    summary = demo.main(["--smoke-cpu"])
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert KEYS <= set(on_disk) and on_disk["heldout_n"] == summary["heldout_n"] > 0
    assert all(0.0 <= on_disk[k] <= 1.0 for k in ("before", "after", "control_sft_after", "control_flipped_after"))
    assert on_disk["ci95_low"] <= on_disk["after"] - on_disk["before"] <= on_disk["ci95_high"]
    rows = read_jsonl(tmp_path / "per_problem.jsonl")
    assert len(rows) == on_disk["heldout_n"] and (tmp_path / "learning.png").exists()
