"""Result tables carry the real error; episodes become MLflow traces on their stage run (real SQLite store);
task cache keys ignore which run asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from davinci.kernelgym.result import EvalResult

from artifacts.home import Home
from artifacts.store import EXPERIMENT_TAGS, StoreLocation, TrackingStore
from artifacts.tables import NO_CODE, error_line, eval_rows
from artifacts.traces import log_episode_traces, sampled
from davinci.agents.episode import Episode, Generation, Turn
from davinci.llm.types import GenOutput
from davinci.types import Candidate
from tasks.caching import task_key

TRACEBACK = ("Traceback (most recent call last):\n  File \"c.py\", line 98\n    dim = dim % x.dim()\n"
             "IndentationError: expected an indented block after 'for' statement on line 96\n")


def test_error_line_is_the_exception_class_and_message() -> None:
    assert error_line({"correct": False, "error_kind": "compile", "error": TRACEBACK}) == (
        "IndentationError: expected an indented block after 'for' statement on line 96")
    assert error_line({"correct": False, "error_kind": "timeout", "error": "ran past 120 s"}) == "timeout: ran past 120 s"
    assert error_line({"correct": False, "error_kind": "hack", "error": "", "flag_reasons": ["wrote to input"]}) == (
        "hack: wrote to input")
    assert error_line({"correct": True, "error": None}) == ""
    assert error_line(None, "no_code") == NO_CODE


def test_eval_rows_take_the_error_of_the_best_turn() -> None:
    records = [{"problem_id": "p", "turn": 1, "flags": [], "speedup_ci": None, "error_kind": "compile"}]
    episodes = {"p": {"turns": [{"index": 0, "result": {"error": "ValueError: first"}},
                                {"index": 1, "result": {"error": TRACEBACK}}]}}
    (row,) = eval_rows(records, episodes)
    assert row["error"].startswith("IndentationError") and row["flags"] == ""


def test_cache_key_ignores_the_run_reference() -> None:
    a = task_key("sft-train", {"x": 1, "run_ref": {"run_id": "A"}}, ("davinci/config",))
    b = task_key("sft-train", {"x": 1, "run_ref": {"run_id": "B"}}, ("davinci/config",))
    assert a == b != task_key("sft-train", {"x": 2, "run_ref": {"run_id": "A"}}, ("davinci/config",))


def _episode(eid: str, correct: bool) -> Episode:
    gen = Generation("policy", ({"role": "user", "content": "write ModelNew"},), GenOutput("```python\nx\n```", (), (), (), "stop"), True)
    result = EvalResult(problem_id="p", candidate_hash="h", backend="triton", compiled=True, correct=correct,
                        numerics_ok=correct, flags=(), error_kind=None if correct else "compile",
                        error="" if correct else TRACEBACK, speedup=1.5 if correct else None, feedback="verdict",
                        device="cpu", timing_label="cpu")
    turn = Turn(0, gen, Candidate("p", "class ModelNew: pass", "triton"), result)
    return Episode(eid, "p", 0, 0, None, (), (), (turn,), None, None, "no summary")


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TrackingStore:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
    return TrackingStore(StoreLocation.resolve(Home(tmp_path)), "trace-exp")


def test_episodes_become_traces_on_their_run_once(store: TrackingStore, tmp_path: Path) -> None:
    run_id = store.create_run("rl", {"stage": "rl"})
    episodes = [_episode("e1", True), _episode("e2", False)]
    stats = log_episode_traces(store, run_id, episodes, 1.0, "rl", [{"turn_scores": [1.0]}, None], marker_dir=tmp_path)
    again = log_episode_traces(store, run_id, episodes, 1.0, "rl", marker_dir=tmp_path)
    assert (stats.logged, again.logged) == (2, 0)
    traces = store.client.search_traces(locations=[store.experiment_id], run_id=run_id)
    assert len(traces) == 2
    failed = next(t for t in traces if t.info.tags["episode_id"] == "e2")
    names = [s.name for s in failed.data.spans]
    assert names[1:] == ["policy turn 0", "evaluate", "summary"]
    evaluate = next(s for s in failed.data.spans if s.name == "evaluate")
    assert evaluate.outputs["error"].startswith("IndentationError")


def test_writing_traces_leaves_the_users_store_choice_alone(store: TrackingStore, tmp_path: Path) -> None:
    """mlflow.set_tracking_uri also exports $MLFLOW_TRACKING_URI; left there, every later store lookup in the
    process (another project home) went to this one."""
    import os

    run_id = store.create_run("rl", {"stage": "rl"})
    log_episode_traces(store, run_id, [_episode("e1", True)], 1.0, "rl", marker_dir=tmp_path)
    assert "MLFLOW_TRACKING_URI" not in os.environ


def test_sampling_is_deterministic_and_proportional() -> None:
    ids = [f"ep-{i}" for i in range(2000)]
    picked = [i for i in ids if sampled(i, 0.25)]
    assert picked == [i for i in ids if sampled(i, 0.25)]
    assert 300 < len(picked) < 700
    assert all(sampled(i, 1.0) for i in ids[:10]) and not any(sampled(i, 0.0) for i in ids[:10])


def test_experiment_is_tagged_as_model_development(store: TrackingStore) -> None:
    exp = store.client.get_experiment(store.experiment_id)
    assert {k: exp.tags.get(k) for k in EXPERIMENT_TAGS} == EXPERIMENT_TAGS


def test_system_metrics_land_on_the_run_when_enabled(store: TrackingStore) -> None:
    import time

    run_id = store.create_run("rl", {"stage": "rl"})
    with store.system_metrics(run_id, enabled=True, interval_s=0.2):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not store.get_run(run_id).data.metrics:
            time.sleep(0.5)
    assert any(k.startswith("system/cpu") for k in store.get_run(run_id).data.metrics)
    quiet = store.create_run("sft", {"stage": "sft"})
    with store.system_metrics(quiet, enabled=False):
        pass
    assert not store.get_run(quiet).data.metrics
