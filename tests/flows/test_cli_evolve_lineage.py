"""Bad input to `davinci-kernel evolve` and `davinci-kernel skills lineage`: one `error:` line with the fix, exit 2,
no traceback, before Prefect or kernelgym start. `skills lineage` logs one MLflow run (stage=lineage): FINISHED with
its metrics and artifacts after the real command, FAILED (KILLED on Ctrl-C) when the derivation stops mid-way."""

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
def test_skills_lineage_command_admits_into_a_new_library_version(tmp_path: Path, monkeypatch) -> None:
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
    assert (out / "lineage.png").stat().st_size > 0 and json.loads((out / "chain.json").read_text())["steps"][0]["kept"]

    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (run,) = lineage_runs(tmp_path)
    assert "MLflow lineage run: http" in proc.stdout and run.info.run_id in proc.stdout.splitlines()[-1]
    assert run.info.status == "FINISHED"
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    assert tags["stage"] == "lineage" and tags["kernel"] == "triton-fuse-elementwise-chain" and tags["library_version"] == "1"
    assert tags["problem"] == "skill-example/triton-fuse-elementwise-chain"
    assert params["admit"] == "True" and params["backend"] == "rules" and params["simplifications"] == "single_warp"
    assert params["skills.admission_reruns"] == "1" and "gym.timing_min_reps" in params
    assert {k: metrics[k] for k in ("simplifications_proposed", "simplifications_accepted", "candidate_skills", "admitted")} \
        == {"simplifications_proposed": 1.0, "simplifications_accepted": 1.0, "candidate_skills": 1.0, "admitted": 1.0}
    assert metrics["step/single_warp/ci_low"] <= metrics["step/single_warp/speedup"] <= metrics["step/single_warp/ci_high"]
    client = MlflowClient(tracking_uri=lineage_store(tmp_path).location.tracking_uri)
    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"lineage.png", "chain.json", "steps_table.json", "admission_table.json", "lineage"} <= top
    assert {a.path for a in client.list_artifacts(run.info.run_id, "lineage")} >= {
        "lineage/candidates.jsonl", "lineage/steps.jsonl", "lineage/report.md"}
    local = client.download_artifacts(run.info.run_id, "steps_table.json", str(tmp_path / "dl"))
    table = json.loads(Path(local).read_text())
    (row,) = [dict(zip(table["columns"], r)) for r in table["data"]]
    assert row["step"] == "single_warp" and row["ci_low"] == pytest.approx(metrics["step/single_warp/ci_low"])


def lineage_store(home: Path):
    """The tiny profile's MLflow store under the test's DAVINCI_HOME (as the CLI subprocess opened it)."""
    from artifacts.home import Home
    from davinci.config import load_profile
    from flows.context import open_store

    return open_store(load_profile("tiny"), home=Home(home))


def lineage_runs(home: Path) -> list:
    return lineage_store(home).search("tags.stage = 'lineage'")


@pytest.mark.parametrize("stop,status", [(RuntimeError("kernelgym worker died"), "FAILED"), (KeyboardInterrupt(), "KILLED")])
def test_skills_lineage_stopped_mid_way_leaves_the_run_failed(tmp_path: Path, monkeypatch, stop: BaseException,
                                                               status: str) -> None:
    """The derivation raises after the run is open (kernelgym dies, or Ctrl-C): the run ends FAILED (KILLED), never
    RUNNING, with its tags and params logged; nothing is written to --out."""
    import davinci.kernelgym
    from flows.cli import build_parser
    from flows.interrupt import is_tracked
    from tasks.lineage import lineage_command

    monkeypatch.setenv("DAVINCI_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)

    def evaluate(*args, **kwargs):
        raise stop

    monkeypatch.setattr(davinci.kernelgym, "evaluate", evaluate)
    out = tmp_path / "lineage"
    args = build_parser().parse_args(["skills", "lineage", "--kernel", "triton-fuse-elementwise-chain", "--out", str(out)])
    with pytest.raises(type(stop)):
        lineage_command(args)
    (run,) = lineage_runs(tmp_path)
    assert run.info.status == status and run.info.end_time is not None
    assert run.data.tags["stage"] == "lineage" and run.data.params["admit"] == "False"
    assert not (out / "candidates.jsonl").exists()
    assert not is_tracked(run.info.run_id)  # untracked: the interrupt handler has nothing left to mark


@pytest.mark.slow
def test_skills_lineage_incorrect_expert_is_one_error_line_and_a_failed_run(tmp_path: Path, monkeypatch) -> None:
    """An expert kernel kernelgym finds incorrect is the user's error found mid-way: one `error:` line with the fix,
    exit 2, no traceback, and the run that was already open ends FAILED."""
    from data_prep.builtin import builtin_problems

    relu = {p.id: p for p in builtin_problems()}["builtin/relu"]
    bad = tmp_path / "bad.py"
    bad.write_text(relu.reference_solution.replace("tl.maximum(x, 0.0)", "x"))
    proc = cli(tmp_path, "skills", "lineage", "--kernel", str(bad), "--problem", "relu", "--out", str(tmp_path / "out"))
    assert_clean_failure(proc, f"error: the expert kernel (file:{bad}) is not correct on builtin/relu", "fix:")
    assert proc.returncode == 2
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (run,) = lineage_runs(tmp_path)
    assert run.info.status == "FAILED" and run.data.tags["problem"] == "builtin/relu"
