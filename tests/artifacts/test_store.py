"""The MLflow store against a real SQLite tracking store: runs, children, tables, resume, lookups."""

from __future__ import annotations

from pathlib import Path

import pytest

from artifacts.home import Home
from artifacts.mlflow_logger import MlflowLogger, replay_metrics
from artifacts.refs import StageOutputs
from artifacts.store import StoreLocation, TrackingStore
from davinci.config import load_profile
from davinci.errors import InputNotFound
from flows.context import (ProfileRef, load_stage_outputs, log_stage_outputs, profile_ref_of, stage_run,
                           start_or_resume_pipeline, upstream_outputs)


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TrackingStore:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("DAVINCI_HOME", str(tmp_path))
    return TrackingStore(StoreLocation.resolve(Home(tmp_path)), "test-exp")


def test_parent_child_and_outputs_round_trip(store: TrackingStore, tmp_path: Path) -> None:
    profile = load_profile("tiny")
    parent, resumed = start_or_resume_pipeline(store, profile, ProfileRef("tiny", ()))
    assert not resumed
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "f.txt").write_text("hello")
    outputs = StageOutputs("data", str(folder), {"f": "f.txt"}, {"n": 3}).write()
    with stage_run(store, parent, "data", profile) as child:
        log_stage_outputs(store, child, outputs)
    children = store.child_runs(parent, "data")
    assert [r.info.status for r in children] == ["FINISHED"]
    assert load_stage_outputs(store, child).path("f").read_text() == "hello"
    # The local folder is gone: the outputs come back from the run's artifacts.
    (folder / "f.txt").unlink()
    restored = load_stage_outputs(store, child)
    assert restored.path("f").read_text() == "hello" and restored.dir != str(folder)
    assert upstream_outputs(store, parent, ["data"])["data"].summary == {"n": 3}


def test_failed_stage_marks_run_failed_and_resume_reuses_parent(store: TrackingStore) -> None:
    profile = load_profile("tiny")
    parent, _ = start_or_resume_pipeline(store, profile, ProfileRef("tiny", ()))
    with pytest.raises(RuntimeError):
        with stage_run(store, parent, "sft", profile):
            raise RuntimeError("boom")
    assert store.child_runs(parent, "sft")[0].info.status == "FAILED"
    store.set_status(parent, "FAILED")
    again, resumed = start_or_resume_pipeline(store, profile, ProfileRef("tiny", ()))
    assert (again, resumed) == (parent, True)
    store.set_status(parent, "FINISHED")
    fresh, resumed = start_or_resume_pipeline(store, profile, ProfileRef("tiny", ()))
    assert fresh != parent and not resumed


def test_profile_ref_from_parent_or_child(store: TrackingStore) -> None:
    profile = load_profile("tiny", ["rl.epochs=1"])
    parent, _ = start_or_resume_pipeline(store, profile, ProfileRef("tiny", ("rl.epochs=1",)))
    with stage_run(store, parent, "data", profile) as child:
        pass
    assert profile_ref_of(store, parent) == (parent, ProfileRef("tiny", ("rl.epochs=1",)))
    assert profile_ref_of(store, child)[0] == parent


def test_unknown_run_and_missing_stage_are_clear(store: TrackingStore) -> None:
    with pytest.raises(InputNotFound, match="no MLflow run"):
        store.get_run("0123456789abcdef0123456789abcdef")
    parent, _ = start_or_resume_pipeline(store, load_profile("tiny"), ProfileRef("tiny", ()))
    with pytest.raises(InputNotFound, match="no finished 'rl'"):
        upstream_outputs(store, parent, ["rl"])


def test_logger_mirrors_and_replays(store: TrackingStore, tmp_path: Path) -> None:
    parent, _ = start_or_resume_pipeline(store, load_profile("tiny"), ProfileRef("tiny", ()))
    mirror = tmp_path / "m.jsonl"
    MlflowLogger(store, parent, mirror=mirror).log_metrics({"loss": 2.0}, step=0)
    MlflowLogger(store, parent, mirror=mirror).log_metrics({"loss": 1.0}, step=1)
    other, _ = start_or_resume_pipeline(store, load_profile("tiny", ["rl.epochs=5"]), ProfileRef("tiny", ("rl.epochs=5",)))
    assert replay_metrics(store, other, mirror) == 2
    history = store.client.get_metric_history(other, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 2.0), (1, 1.0)]


def test_log_table_writes_json_and_html(store: TrackingStore) -> None:
    parent, _ = start_or_resume_pipeline(store, load_profile("tiny"), ProfileRef("tiny", ()))
    store.log_table(parent, [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}], "tables/t.json")
    names = {f.path for f in store.client.list_artifacts(parent, "tables")}
    assert names == {"tables/t.json", "tables/t.html"}
