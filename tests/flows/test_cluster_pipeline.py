"""The pipeline on a Dask evaluation cluster (`gym.cluster`), through the real CLI, Prefect, MLflow and Dask.

- `davinci-kernel run --set gym.cluster=local-dask:2` runs all five stages with evaluation on a local
  two-worker Dask cluster and records the cluster: params on the pipeline run, tags on every stage run.
- Bad clusters fail before any stage runs, with one `error:` line naming the fix (exit 2, no traceback,
  no MLflow run): an unreachable scheduler, no GPU worker for `gym.device=cuda`, a worker that cannot
  import the project.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from davinci.config import load_profile
from flows.cluster import ClusterRecord, check_cluster

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "rl.epochs=1", "rl.problems_per_epoch=2", "agents.group_size=2", "agents.turns=1",
    "eval.turns=1", "eval.limit=2", "data.synthetic_count=0", "data.sources=[builtin]",
]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "DAVINCI_HOME": str(home), **extra}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _run(home: Path, *sets: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    args = [a for s in sets for a in ("--set", s)]
    return subprocess.run([sys.executable, "-m", "flows.cli", "run", *args], capture_output=True, text=True,
                          env=_env(home, **env), cwd=ROOT, timeout=timeout)


def _runs(home: Path) -> list:
    from mlflow.tracking import MlflowClient

    if not (home / "mlruns" / "mlflow.db").exists():
        return []
    client = MlflowClient(f"sqlite:///{home}/mlruns/mlflow.db")
    return client.search_runs([e.experiment_id for e in client.search_experiments()], "")


def _assert_refused(proc: subprocess.CompletedProcess, home: Path, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "error: " in proc.stderr and "  fix: " in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    assert _runs(home) == []  # refused before any MLflow run (and so before any stage) was opened


def test_local_setting_is_recorded_without_dask():
    record = check_cluster(load_profile("tiny", ["gym.device=cpu", "gym.workers=3"]))
    assert record == ClusterRecord("local", nodes=1, workers=3, gpus=0)
    assert record.params() == {"cluster.setting": "local", "cluster.nodes": 1, "cluster.workers": 3, "cluster.gpus": 0}
    assert record.tags()["cluster"] == "local"


@pytest.mark.slow
def test_unreachable_scheduler_fails_before_any_stage(tmp_path):
    proc = _run(tmp_path, "gym.cluster=tcp://127.0.0.1:9", timeout=120)
    _assert_refused(proc, tmp_path, "no Dask scheduler answers at tcp://127.0.0.1:9", "dask scheduler --port 9")


@pytest.mark.slow
def test_cluster_without_gpu_for_a_cuda_profile_fails_before_any_stage(tmp_path):
    proc = _run(tmp_path, "gym.cluster=local-dask:1", "gym.device=cuda", timeout=180)
    _assert_refused(proc, tmp_path, "gym.device=cuda but none of the 1 Dask workers declares a GPU", "gym.device=cpu")


@pytest.mark.slow
def test_worker_that_cannot_import_the_project_fails_before_any_stage(tmp_path):
    from distributed import LocalCluster

    fake = tmp_path / "shadow" / "davinci"  # a `davinci` package that shadows the project: every import fails
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('not the project')\n")
    home = tmp_path / "home"
    with LocalCluster(n_workers=0, processes=True, dashboard_address=None, host="127.0.0.1") as lc:
        bad = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", lc.scheduler_address, "--nthreads", "1",
                                "--no-dashboard"], env={**os.environ, "PYTHONPATH": str(fake.parent)}, cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc = _run(home, f"gym.cluster={lc.scheduler_address}", timeout=180)
        finally:
            bad.send_signal(signal.SIGINT)  # a dask worker closes cleanly on SIGINT
            bad.wait(60)
    _assert_refused(proc, home, "1 of 1 Dask workers cannot run kernelgym", "pip install -e .")


@pytest.mark.slow
@pytest.mark.integration
def test_pipeline_on_a_local_two_worker_cluster_records_it(tmp_path):
    proc = _run(tmp_path, "gym.cluster=local-dask:2", *SMALL, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "evaluation: gym.cluster=local-dask:2, on 2 Dask worker(s), 1 node(s), 0 GPU(s)" in proc.stdout
    runs = _runs(tmp_path)
    [parent] = [r for r in runs if r.data.tags.get("stage") == "pipeline"]
    assert parent.info.status == "FINISHED"
    params = parent.data.params
    assert (params["cluster.setting"], params["cluster.nodes"], params["cluster.workers"], params["cluster.gpus"]) == ("local-dask:2", "1", "2", "0")
    assert params["gym.cluster"] == "local-dask:2"
    stages = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["stage"] for r in stages) == ["data", "eval", "rl", "sft", "skills"]
    assert all(r.info.status == "FINISHED" for r in stages)
    for run in stages:
        tags = run.data.tags
        assert (tags["cluster"], tags["cluster.nodes"], tags["cluster.workers"], tags["cluster.gpus"]) == ("local-dask:2", "1", "2", "0")
