"""Bad input to `davinci-kernel evolve` and `davinci-kernel skills lineage`: one `error:` line with the fix, exit 2,
no traceback, before Prefect or kernelgym start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAVINCI_HOME": str(tmp_path)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, env=env,
                          timeout=180, cwd=Path(__file__).resolve().parents[2])


def assert_clean_failure(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


@pytest.mark.parametrize("args,needles", [
    (("evolve", "--problem", "nope"), ("error: unknown problem 'nope'", "builtin/relu")),
    (("evolve", "--problem", "relu", "--kernel", "/no/such.py"), ("kernel file /no/such.py does not exist",)),
    (("evolve", "--problem", "relu", "--mutator", "replay"), ("the replay mutator needs a replay file", "--replay FILE")),
    (("evolve", "--problem", "relu", "--mutator", "genetic"), ("evolve.mutator = 'genetic' is not allowed", "'rules'")),
    (("evolve", "--problem", "relu", "--mutator", "policy"), ("the policy mutator needs a model", "--checkpoint")),
    (("evolve", "--problem", "relu", "--generations", "0"), ("out of range",)),
    (("evolve", "--problem", "relu", "--replay", "/no/edits.jsonl"), ("replay file /no/edits.jsonl does not exist",)),
    (("evolve", "--problem", "relu", "--mutator", "policy", "--checkpoint", "/no/ckpt"),
     ("checkpoint folder /no/ckpt does not exist",)),
    (("skills", "lineage", "--kernel", "nope"), ("is not a seed skill id, so --problem is needed",)),
    (("skills", "lineage", "--kernel", "/no/k.py", "--problem", "relu"), ("kernel file /no/k.py does not exist",)),
    (("skills", "lineage", "--kernel", "builtin", "--problem", "relu", "--simplifications", "fuse"),
     ("unknown simplification 'fuse'", "shrink_tiles")),
])
def test_bad_input(tmp_path: Path, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    proc = cli(tmp_path, *args)
    assert_clean_failure(proc, *needles)
    assert proc.returncode == 2


def test_malformed_replay_file(tmp_path: Path) -> None:
    bad = tmp_path / "edits.jsonl"
    bad.write_text('{"problem_id": "builtin/relu"}\n')
    proc = cli(tmp_path, "evolve", "--problem", "relu", "--mutator", "replay", "--replay", str(bad))
    assert_clean_failure(proc, "edits.jsonl:1 has neither code nor find/replace", "fix:")


@pytest.mark.slow
def test_skills_lineage_command_admits_into_a_new_library_version(tmp_path: Path) -> None:
    """The real command on a seed skill's expert kernel (kernelgym on CPU): candidates written, admitted, committed."""
    import json

    out = tmp_path / "lineage"
    proc = cli(tmp_path, "skills", "lineage", "--kernel", "triton-fuse-elementwise-chain", "--simplifications", "single_warp",
               "--admit", "--out", str(out), "--set", "skills.admission_reruns=1", "--set", "skills.admission_shape_variants=1")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (cand,) = [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()]
    assert cand["provenance"]["kind"] == "lineage" and cand["effect"]["measurements"]
    assert "admission lineage-single-warp" in proc.stdout and "library v1: 1 lineage skill(s) admitted" in proc.stdout
    assert (out / "report.md").read_text().startswith("# Lineage of seed:triton-fuse-elementwise-chain")
