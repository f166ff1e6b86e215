"""The tiny pipeline end to end through the real CLI, real Prefect (ephemeral API) and a real MLflow store.

One module-scoped project home, used in order:
1. `davinci-kernel run` is interrupted with SIGINT once the sft stage has finished;
2. the same command again resumes the same parent run: data and sft are skipped (and said so), the rest
   runs, the parent ends FINISHED with five finished stage runs that each hold artifacts, and eval holds
   the fast_p table;
3. `davinci-kernel stage eval --from <parent>` logs a second eval run and reruns no other stage.

The profile is the tiny one, shrunk with `--set` so the whole module takes a few minutes on 2 cores.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "rl.epochs=2", "rl.problems_per_epoch=2", "agents.group_size=2", "agents.turns=1",
    "eval.turns=1", "eval.limit=2", "data.synthetic_count=0", "data.sources=[builtin]",
]


def _args(*extra: str) -> list[str]:
    out = []
    for item in SMALL:
        out += ["--set", item]
    return [*extra, *out]


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "DAVINCI_HOME": str(home)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _client(home: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{home}/mlruns/mlflow.db")


def _stage_runs(home: Path, parent: str) -> list:
    client = _client(home)
    exp = client.get_run(parent).info.experiment_id
    return client.search_runs([exp], f"tags.`mlflow.parentRunId` = '{parent}'")


def _interrupt_after_sft(home: Path, log: Path, timeout_s: float = 900) -> int:
    cmd = [sys.executable, "-m", "flows.cli", "run", *_args()]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=_env(home), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(2)
            if _sft_finished(home):
                os.killpg(proc.pid, signal.SIGINT)
                break
        return proc.wait(timeout=180)


def _sft_finished(home: Path) -> bool:
    if not (home / "mlruns" / "mlflow.db").exists():
        return False
    try:
        client = _client(home)
        exps = [e.experiment_id for e in client.search_experiments()]
        return any(r.info.status == "FINISHED" for r in client.search_runs(exps, "tags.stage = 'sft'"))
    except Exception:
        return False


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("project")
    first = _interrupt_after_sft(home, home / "first.log")
    second = subprocess.run([sys.executable, "-m", "flows.cli", "run", *_args()], env=_env(home), cwd=ROOT,
                            capture_output=True, text=True, timeout=1500)
    return {"home": home, "first_rc": first, "first_log": (home / "first.log").read_text(), "second": second}


def test_interrupted_run_exits_nonzero_without_traceback(pipeline: dict) -> None:
    assert pipeline["first_rc"] != 0
    assert "Traceback" not in pipeline["first_log"]


def test_resume_skips_finished_stages_and_completes(pipeline: dict) -> None:
    second = pipeline["second"]
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "(resumed)" in second.stdout
    assert re.search(r"\[data\] already finished in run \w+; skipping", second.stdout)
    assert re.search(r"\[sft\] already finished in run \w+; skipping", second.stdout)
    assert "MLflow parent run:" in second.stdout and "davinci-kernel ui" in second.stdout


def _parent(pipeline: dict) -> str:
    return re.search(r"MLflow parent run: (\w+)", pipeline["second"].stdout).group(1)


def test_store_holds_five_finished_stage_runs_with_artifacts(pipeline: dict) -> None:
    home, parent = pipeline["home"], _parent(pipeline)
    client = _client(home)
    assert client.get_run(parent).info.status == "FINISHED"
    assert client.get_run(parent).data.tags["stage"] == "pipeline"
    finished = [r for r in _stage_runs(home, parent) if r.info.status == "FINISHED"]
    stages = sorted(r.data.tags["stage"] for r in finished)
    assert stages == ["data", "eval", "rl", "sft", "skills"]
    for run in finished:
        assert client.list_artifacts(run.info.run_id), f"{run.data.tags['stage']} run has no artifacts"
        assert run.data.tags.get("prefect.flow_run_id"), "MLflow run does not point at its Prefect flow run"
    eval_run = next(r for r in finished if r.data.tags["stage"] == "eval")
    assert "fast_p/fast_p_table.json" in {a.path for a in client.list_artifacts(eval_run.info.run_id, "fast_p")}
    assert any(k.startswith("fast_1") for k in eval_run.data.metrics)


def test_stage_rerun_logs_new_eval_run_only(pipeline: dict) -> None:
    home, parent = pipeline["home"], _parent(pipeline)
    before = _stage_runs(home, parent)
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "stage", "eval", "--from", parent], env=_env(home),
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    after = _stage_runs(home, parent)
    count = lambda runs, stage: sum(1 for r in runs if r.data.tags["stage"] == stage)  # noqa: E731
    assert count(after, "eval") == count(before, "eval") + 1
    for stage in ("data", "sft", "rl", "skills"):
        assert count(after, stage) == count(before, stage), f"{stage} was rerun"
    newest = max((r for r in after if r.data.tags["stage"] == "eval"), key=lambda r: r.info.start_time)
    assert newest.info.status == "FINISHED"
