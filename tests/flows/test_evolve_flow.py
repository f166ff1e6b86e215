"""`davinci-kernel evolve` end to end: real CLI, real Prefect, a real MLflow store, real kernelgym (CPU).

1. `evolve --profile tiny --problem builtin/relu --generations 3` gets SIGINT once generation 0 is written:
   it exits, the evolve run is KILLED;
2. the same command again reopens that run, evaluates only programs it has no verdict for (no code hash
   twice in evaluations.jsonl), and ends FINISHED with the archive, the best kernel, the lineage graph
   (JSON, SVG, PNG) and fast_p in MLflow.
One child per generation keeps it to a handful of evaluations.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CMD = [sys.executable, "-m", "flows.cli", "evolve", "--profile", "tiny", "--problem", "builtin/relu", "--generations", "3",
       "--set", "evolve.children_per_generation=1"]


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "DAVINCI_HOME": str(home), "TRITON_INTERPRET": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _generations(home: Path) -> int:
    files = list((home / ".davinci" / "work" / "evolve").glob("*/builtin_relu/generations.jsonl"))
    return sum(1 for _ in files[0].read_text().splitlines()) if files else 0


def test_evolve_interrupt_resume_and_artifacts(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    home = tmp_path / "home"
    home.mkdir()
    with (tmp_path / "first.log").open("w") as log:
        proc = subprocess.Popen(CMD, env=_env(home), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline and _generations(home) < 1:
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    assert 1 <= _generations(home) < 4, (tmp_path / "first.log").read_text()[-3000:]
    client = MlflowClient(f"sqlite:///{home}/mlruns/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("davinci-kernel").experiment_id], "tags.stage = 'evolve'")
    assert [r.info.status for r in runs] == ["KILLED"]

    second = subprocess.run(CMD, env=_env(home), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resuming evolve run" in second.stdout + second.stderr
    folder = next((home / ".davinci" / "work" / "evolve").glob("*/builtin_relu"))
    hashes = [json.loads(line)["code_hash"] for line in (folder / "evaluations.jsonl").read_text().splitlines()]
    assert len(hashes) == len(set(hashes)) >= 2
    run = client.get_run(runs[0].info.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["builtin_relu/evaluations"] == len(hashes)
    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"evolve", "lineage", "fast_p.json", "summary.json", "revisions.jsonl"} <= top
    lineage = {a.path for a in client.list_artifacts(run.info.run_id, "lineage/builtin_relu")}
    assert {"lineage/builtin_relu/lineage.json", "lineage/builtin_relu/lineage.svg", "lineage/builtin_relu/lineage.png"} <= lineage
    evolved = {a.path for a in client.list_artifacts(run.info.run_id, "evolve/builtin_relu")}
    assert {"evolve/builtin_relu/archive.jsonl", "evolve/builtin_relu/best_kernel.py"} <= evolved
