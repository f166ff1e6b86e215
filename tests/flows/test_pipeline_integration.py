"""The tiny pipeline end to end through the real CLI, real Prefect (ephemeral API) and a real MLflow store.

One module-scoped project home, used in order:
1. `davinci-kernel run` gets SIGINT (to its process group, as a terminal's Ctrl-C) while the rl stage runs:
   it exits within the watchdog's grace, prints one line with the resume command, and leaves the parent
   and the rl run KILLED (MLflow API and `davinci-kernel runs`) and no Prefect flow run Running;
2. the same command again resumes the same parent run: data and sft are skipped (and said so), the same
   rl run is reopened, the parent ends FINISHED with five finished stage runs that each hold artifacts,
   eval holds the fast_p table and the held-out SFT-vs-RL comparison (metrics, table, plot; printed at the
   end), and no run (MLflow or Prefect) is left Running;
3. `davinci-kernel stage eval --from <parent>` logs a second eval run, marked as a rerun, and reruns no
   other stage;
4. `davinci-kernel run ... --set rl.epochs=3` makes a new parent that reuses data and SFT (said so, and the
   stage runs point at the reused folders).

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
    "eval.turns=1", "eval.limit=2", "data.synthetic_count=6", "data.synthetic_heldout=2",
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


def _interrupt_during_rl(home: Path, log: Path, timeout_s: float = 900) -> tuple[int, float]:
    """(exit code, seconds from SIGINT to exit)."""
    cmd = [sys.executable, "-m", "flows.cli", "run", *_args()]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=_env(home), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
            if _stage_running(home, "rl"):
                time.sleep(3)  # inside the first epoch's rollouts
                os.killpg(proc.pid, signal.SIGINT)
                break
        sent = time.monotonic()
        code = proc.wait(timeout=180)
        return code, time.monotonic() - sent


def _stage_running(home: Path, stage: str) -> bool:
    if not (home / "mlruns" / "mlflow.db").exists():
        return False
    try:
        client = _client(home)
        exps = [e.experiment_id for e in client.search_experiments()]
        return any(r.info.status == "RUNNING" for r in client.search_runs(exps, f"tags.stage = '{stage}'"))
    except Exception:
        return False


def _all_runs(home: Path) -> list:
    client = _client(home)
    return client.search_runs([e.experiment_id for e in client.search_experiments()], "")


def _prefect_flow_run_states(home: Path) -> list[tuple[str, str]]:
    """(flow run name, state type) of every flow run in the project's Prefect database."""
    import sqlite3

    db = home / ".davinci" / "prefect" / "prefect.db"
    with sqlite3.connect(db) as conn:
        return list(conn.execute("select name, state_type from flow_run"))


def _snapshot(home: Path) -> dict:
    runs = _all_runs(home)
    return {"statuses": {(r.data.tags.get("stage"), r.info.run_id): r.info.status for r in runs},
            "prefect": _prefect_flow_run_states(home)}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("project")
    first, exit_s = _interrupt_during_rl(home, home / "first.log")
    after_interrupt = _snapshot(home)
    listed = subprocess.run([sys.executable, "-m", "flows.cli", "runs"], env=_env(home), cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    second = subprocess.run([sys.executable, "-m", "flows.cli", "run", *_args()], env=_env(home), cwd=ROOT,
                            capture_output=True, text=True, timeout=1500)
    return {"home": home, "first_rc": first, "exit_s": exit_s, "first_log": (home / "first.log").read_text(),
            "after_interrupt": after_interrupt, "runs_listing": listed.stdout, "second": second,
            "after_resume": _snapshot(home)}


def test_interrupted_run_exits_nonzero_without_traceback(pipeline: dict) -> None:
    assert pipeline["first_rc"] == 130
    assert "Traceback" not in pipeline["first_log"]
    lines = [x for x in pipeline["first_log"].splitlines() if x.startswith("interrupted:")]
    assert len(lines) == 1, pipeline["first_log"][-3000:]
    assert "resume with: davinci-kernel run" in lines[0] and "rl" in lines[0]


def test_interrupt_exits_within_the_grace_and_leaves_no_run_running(pipeline: dict) -> None:
    from flows.interrupt import INTERRUPT_GRACE_S

    assert pipeline["exit_s"] < INTERRUPT_GRACE_S + 3.0  # the watchdog's bound plus interpreter exit
    statuses = pipeline["after_interrupt"]["statuses"]
    assert [s for (stage, _), s in statuses.items() if stage == "pipeline"] == ["KILLED"]
    assert [s for (stage, _), s in statuses.items() if stage == "rl"] == ["KILLED"]
    assert "RUNNING" not in statuses.values()
    assert not [r for r in pipeline["after_interrupt"]["prefect"] if r[1] in ("RUNNING", "PENDING")]
    listing = pipeline["runs_listing"]
    assert "KILLED" in listing and "--set rl.epochs=2" in listing, listing


def test_resume_leaves_every_run_finished(pipeline: dict) -> None:
    before, after = pipeline["after_interrupt"]["statuses"], pipeline["after_resume"]["statuses"]
    killed_rl = [run for (stage, run), s in before.items() if stage == "rl"]
    assert after[("rl", killed_rl[0])] == "FINISHED", "the interrupted rl run was not reopened and finished"
    assert set(after.values()) == {"FINISHED"}, after
    assert not [r for r in pipeline["after_resume"]["prefect"] if r[1] in ("RUNNING", "PENDING")]


def test_resume_skips_finished_stages_and_completes(pipeline: dict) -> None:
    second = pipeline["second"]
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "(resumed)" in second.stdout
    assert re.search(r"\[rl\] resuming stage run \w+", second.stdout)
    assert re.search(r"\[data\] already finished in run \w+; skipping", second.stdout)
    assert re.search(r"\[sft\] already finished in run \w+; skipping", second.stdout)
    assert "MLflow parent run:" in second.stdout and "davinci-kernel ui" in second.stdout
    assert "## held-out: SFT vs RL (same 2 problems, paired)" in second.stdout


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
    # the SFT and RL checkpoints on the same held-out problems, paired, with the CI of the difference
    held = {k: v for k, v in eval_run.data.metrics.items() if k.startswith("heldout/")}
    assert {"heldout/correct_sft", "heldout/correct_rl", "heldout/correct_diff", "heldout/correct_diff_ci95_low",
            "heldout/correct_diff_ci95_high", "heldout/n"} <= set(held), held
    assert held["heldout/n"] == 2 and held["heldout/correct_diff_ci95_low"] <= held["heldout/correct_diff"] <= held["heldout/correct_diff_ci95_high"]
    assert "heldout/sft_vs_rl.json" in {a.path for a in client.list_artifacts(eval_run.info.run_id, "heldout")}
    assert "plots/sft_vs_rl.png" in {a.path for a in client.list_artifacts(eval_run.info.run_id, "plots")}
    assert client.get_run(parent).data.metrics["heldout/correct_rl"] == held["heldout/correct_rl"]


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
    assert newest.data.tags.get("rerun") == "true" and " rerun " in newest.info.run_name


def test_rl_only_change_reuses_data_and_sft(pipeline: dict) -> None:
    home = pipeline["home"]
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "run", *_args(), "--set", "rl.epochs=3"], env=_env(home),
                          cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "(new)" in proc.stdout
    for task in ("prepare-data", "sft-train"):
        assert re.search(rf"{task}: same inputs and code as an earlier run; reusing", proc.stdout), proc.stdout[-3000:]
    parent = re.search(r"MLflow parent run: (\w+)", proc.stdout).group(1)
    sft = next(r for r in _stage_runs(home, parent) if r.data.tags["stage"] == "sft")
    first_parent = _parent(pipeline)
    first_sft = next(r for r in _stage_runs(home, first_parent) if r.data.tags["stage"] == "sft")
    assert sft.data.tags["reused_outputs"] == first_sft.data.tags["outputs_dir"]
    assert "rl.epochs=3" in _client(home).get_run(parent).info.run_name


def _ui_check_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ui_check", ROOT / "benchmarks" / "ui_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_browser_shows_run_tree_fast_p_trace_and_skills(pipeline: dict) -> None:
    ui_check = _ui_check_module()
    if ui_check.browser() is None:
        pytest.skip("no Chromium on PATH (apt-get install -y chromium): the MLflow UI browser check needs it")
    proc, base = ui_check.start_ui(pipeline["home"])
    try:
        checks = ui_check.check_pages(pipeline["home"], base)
    finally:
        ui_check.stop_ui(proc)
    assert [c.page.name for c in checks if c.missing] == [], [(c.page.name, c.missing) for c in checks]
