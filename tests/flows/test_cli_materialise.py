"""`davinci-kernel skills materialise` through the real CLI on CPU (tiny profile, kernelgym with the Triton
interpreter): a library skill applied to a built-in problem is judged by the admission gate, its usage is
recorded as a new library version, the run is in MLflow; bad input is one `error:` line with the fix, exit 2.

A replay backend stands in for the policy model (`--replay`: a JSONL of recorded answers; no model that writes
Triton can be loaded here): the recorded answers are the problem's reference solution (correct) and a broken
copy of it (wrong). Every evaluation is real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SKILL = "triton-fuse-elementwise-chain"
FAST_GATE = ("--set", "gym.timing_min_reps=3", "--set", "gym.timing_max_reps=5", "--set", "skills.min_speedup_lower=0")


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAVINCI_HOME": str(home)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=Path(__file__).resolve().parents[2])


def _answers(path: Path, code: str) -> str:
    path.write_text(json.dumps({"problem_id": "builtin/relu", "answer": f"Here it is.\n```python\n{code}\n```"}) + "\n")
    return str(path)


@pytest.mark.slow
def test_materialise_a_library_skill_records_usage_and_logs_to_mlflow(tmp_path: Path, monkeypatch) -> None:
    from data_prep.builtin import builtin_problems
    from davinci.skills import SkillStore, seed_skills

    relu = {p.id: p for p in builtin_problems()}["builtin/relu"]
    store = SkillStore(tmp_path / ".davinci" / "skills")
    store.commit([s for s in seed_skills(evidence_path=None) if s.id == SKILL], parent=None, note="seed")
    good = _answers(tmp_path / "good.jsonl", relu.reference_solution)
    proc = cli(tmp_path, "skills", "materialise", "--skill", SKILL, "--problem", "relu", "--replay", good, *FAST_GATE)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"skill {SKILL} on builtin/relu: applied yes, correct yes, speedup" in proc.stdout
    assert "95% CI" in proc.stdout and "gate (transfer check): passed" in proc.stdout
    assert "usage: selected 1, succeeded 1 (recorded in library v2)" in proc.stdout
    skill = store.load("latest").get(SKILL)
    assert (skill.usage.times_selected, skill.usage.times_succeeded) == (1, 1)
    assert skill.evidence[-1].decision == "helped on builtin/relu"

    wrong = _answers(tmp_path / "wrong.jsonl", relu.reference_solution.replace("tl.maximum(x, 0.0)", "x"))
    proc = cli(tmp_path, "skills", "materialise", "--skill", SKILL, "--problem", "relu", "--replay", wrong, *FAST_GATE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "applied yes, correct no" in proc.stdout and "gate (transfer check): failed: incorrect" in proc.stdout
    assert "usage: selected 2, succeeded 1 (recorded in library v3)" in proc.stdout

    monkeypatch.setenv("DAVINCI_HOME", str(tmp_path))
    from davinci.config import load_profile
    from flows.context import open_store

    runs = open_store(load_profile("tiny")).search("tags.stage = 'materialise'")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    by_passed = {r.data.metrics["passed"]: r for r in runs}
    assert by_passed[1.0].data.metrics["correct"] == 1.0 and "ci_low" in by_passed[1.0].data.metrics
    assert by_passed[0.0].data.params["skill"] == SKILL and by_passed[0.0].data.tags["problem"] == "builtin/relu"


@pytest.mark.parametrize("args,needles", [
    (("--skill", "nope", "--problem", "relu", "--replay", "x.jsonl"), ("error: unknown skill 'nope'", SKILL)),
    (("--skill", SKILL, "--problem", "nope", "--replay", "x.jsonl"), ("error: unknown problem 'nope'", "builtin/relu")),
    (("--skill", SKILL, "--problem", "relu"), ("error: materialise needs exactly one model", "--replay FILE")),
    (("--skill", SKILL, "--problem", "relu", "--replay", "/no/answers.jsonl"), ("replay file /no/answers.jsonl does not exist",)),
    (("--skill", SKILL, "--problem", "relu", "--checkpoint", "/no/ckpt"), ("checkpoint folder /no/ckpt does not exist",)),
    (("--skill", SKILL, "--problem", "relu", "--replay", "x.jsonl", "--set", "rl.start_state_fraction=2"),
     ("rl.start_state_fraction = 2.0 is out of range: it must be in [0, 1]",)),
])
def test_bad_input(tmp_path: Path, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    proc = cli(tmp_path, "skills", "materialise", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("error: ") and "  fix: " in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_malformed_replay_line_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "answers.jsonl"
    bad.write_text('{"problem_id": "builtin/relu", "answer": "x"}\n{"problem": 1\n')
    proc = cli(tmp_path, "skills", "materialise", "--skill", SKILL, "--problem", "softmax", "--replay", str(bad))
    assert proc.returncode == 2 and "answers.jsonl:2 is not JSON" in proc.stderr, proc.stderr


def test_one_skill_of_a_lineage_candidates_file_is_picked_by_id(tmp_path: Path) -> None:
    from davinci.skills import seed_skills
    from tasks.materialise import resolve_skill

    two = [s for s in seed_skills(evidence_path=None)][:2]
    path = tmp_path / "candidates.jsonl"
    path.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in two))
    skill, origin = resolve_skill(f"{path}#{two[1].id}", None)
    assert skill.id == two[1].id and origin == f"file:{path}#{two[1].id}"
    proc = cli(tmp_path, "skills", "materialise", "--skill", str(path), "--problem", "relu", "--replay", "x.jsonl")
    assert proc.returncode == 2 and f"--skill {path}#SKILL_ID" in proc.stderr and two[0].id in proc.stderr, proc.stderr
    proc = cli(tmp_path, "skills", "materialise", "--skill", f"{path}#nope", "--problem", "relu", "--replay", "x.jsonl")
    assert proc.returncode == 2 and "has no skill 'nope'" in proc.stderr and two[1].id in proc.stderr, proc.stderr
