"""What a person sees of runs: names with profile, overrides and time; reruns marked; an interrupted stage run
reopened on resume; open runs KILLED by the interrupt path; the `runs` table. Real SQLite MLflow store."""

from __future__ import annotations

from pathlib import Path

import pytest

from artifacts.home import Home
from artifacts.store import StoreLocation, TrackingStore
from davinci.config import load_profile
from flows.context import ProfileRef, close_pipeline, stage_run, start_or_resume_pipeline, ui_base
from flows.interrupt import interrupted_line, kill_open_runs
from flows.runs_table import format_runs, headline


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TrackingStore:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("DAVINCI_HOME", str(tmp_path))
    kill_open_runs()  # runs an earlier test left open belong to another store
    return TrackingStore(StoreLocation.resolve(Home(tmp_path)), "views-exp")


def _pipeline(store: TrackingStore, *overrides: str) -> tuple[str, object]:
    profile = load_profile("tiny", list(overrides))
    parent, _ = start_or_resume_pipeline(store, profile, ProfileRef("tiny", tuple(overrides)))
    return parent, profile


def test_names_carry_profile_overrides_and_stage(store: TrackingStore) -> None:
    parent, profile = _pipeline(store, "rl.epochs=3")
    name = store.get_run(parent).info.run_name
    assert name.startswith("tiny rl.epochs=3 ") and len(name.split()) == 4  # profile, override, date, time
    with stage_run(store, parent, "sft", profile) as child:
        pass
    assert store.get_run(child).info.run_name == f"sft · {name}"
    with stage_run(store, parent, "eval", profile, rerun=True) as rerun:
        pass
    run = store.get_run(rerun)
    assert run.data.tags["rerun"] == "true" and run.info.run_name.startswith("eval rerun ")
    close_pipeline(store, parent, "FINISHED")


def test_interrupted_stage_run_is_reopened_not_duplicated(store: TrackingStore) -> None:
    parent, profile = _pipeline(store)
    with pytest.raises(KeyboardInterrupt):
        with stage_run(store, parent, "rl", profile):
            raise KeyboardInterrupt
    (killed,) = store.child_runs(parent, "rl")
    assert killed.info.status == "KILLED"
    with stage_run(store, parent, "rl", profile) as again:
        assert store.get_run(again).info.status == "RUNNING"
    assert again == killed.info.run_id
    assert [r.info.status for r in store.child_runs(parent, "rl")] == ["FINISHED"]
    assert store.get_run(again).data.tags["resumes"] == "1"


def test_interrupt_path_kills_every_open_run(store: TrackingStore) -> None:
    parent, profile = _pipeline(store)
    with stage_run(store, parent, "rl", profile) as child:
        labels = kill_open_runs()  # what the signal handler's thread does
        assert sorted(labels) == ["pipeline", "rl"]
        assert store.get_run(child).info.status == "KILLED" and store.get_run(parent).info.status == "KILLED"
    line = interrupted_line(labels)
    assert line.count("\n") == 1 and "KILLED" in line


def test_runs_table_shows_time_status_overrides_and_headline(store: TrackingStore) -> None:
    parent, _ = _pipeline(store, "rl.epochs=3", "agents.turns=1")
    store.log_metrics(parent, {"fast_1_eager": 0.4, "first_turn_fast_1_eager": 0.1, "fast_1_compile": 0.2}, step=0)
    close_pipeline(store, parent, "FINISHED")
    table = format_runs(store.pipeline_runs())
    header, row = table.splitlines()
    assert header.split()[:4] == ["started", "took", "status", "fast_1"]
    assert "FINISHED" in row and " 0.40 " in row and parent in row
    assert row.endswith("tiny --set rl.epochs=3 --set agents.turns=1")
    assert headline({}) == "-"


def test_links_use_the_configured_ui_port() -> None:
    assert ui_base(load_profile("tiny", ["tracking.ui_port=5123"])) == "http://127.0.0.1:5123"
    assert ui_base(load_profile("tiny", ["tracking.tracking_uri=http://mlflow:8080/"])) == "http://mlflow:8080"
