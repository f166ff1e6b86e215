"""What every stage flow does: load the profile, open its child run, run cached tasks, log outputs."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from artifacts.home import Home
from artifacts.mlflow_logger import replay_metrics
from artifacts.refs import StageOutputs
from artifacts.store import TrackingStore
from artifacts.traces import TraceStats, log_episode_traces
from davinci.config import Profile
from flows.console import say
from flows.context import ProfileRef, open_store, upstream_outputs
from tasks.caching import params_hash
from tasks.common import configure_threads

# Stages that run torch in this process (the trainer, generation): their thread count is set at open.
TRAINING_STAGES = ("sft", "rl", "eval")


@dataclass(frozen=True)
class StageEnv:
    stage: str
    profile: Profile
    store: TrackingStore
    parent_run_id: str
    home: Home

    @classmethod
    def open(cls, stage: str, profile: str, overrides: Sequence[str], parent_run_id: str) -> "StageEnv":
        loaded = ProfileRef(profile, tuple(overrides)).load()
        env = cls(stage, loaded, open_store(loaded), parent_run_id, Home.current())
        if stage in TRAINING_STAGES:
            env.say(f"torch intra-op threads: {configure_threads()} (cores not busy elsewhere; $DAVINCI_TORCH_THREADS sets it)")
        return env

    def inputs(self, given: Mapping[str, Any] | None, needed: Sequence[str]) -> dict[str, StageOutputs]:
        """Upstream outputs: those handed in by the pipeline, else the parent run's finished stages."""
        if given:
            return {k: StageOutputs.from_dict(v) if isinstance(v, dict) else v for k, v in given.items()}
        return upstream_outputs(self.store, self.parent_run_id, needed)

    def run_ref(self, run_id: str) -> dict[str, str]:
        return {
            "tracking_uri": self.store.location.tracking_uri,
            "experiment": self.store.experiment_name,
            "run_id": run_id,
        }

    def say(self, message: str) -> None:
        say(self.stage, message)

    def stage_dir(self, params: Mapping[str, Any], fresh: bool) -> Path:
        """The stage's own folder, keyed by its inputs; `fresh` (a forced rerun) gets a new one, so work that
        resumes from partial output (RL epochs, eval episodes) really starts again."""
        key = params_hash(params)
        if fresh:
            key = f"{key}-{time.strftime('%Y%m%d-%H%M%S')}"
        folder = self.home.work / f"stage-{self.stage}" / key
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @property
    def skill_store(self) -> str:
        return str(self.home.skills)


def run_cached(env: StageEnv, task: Any, force: bool, run_id: str | None = None, **params: Any) -> tuple[StageOutputs, bool]:
    """Call a cached task; recompute when forced or when a cached result's files are gone.

    Returns (outputs, cached). When cached, the task's mirrored metrics are replayed into `run_id`.
    """
    call = task.with_options(refresh_cache=True) if force else task
    extra = {"run_ref": env.run_ref(run_id)} if run_id and "run_ref" in task.fn.__code__.co_varnames else {}
    state = call(return_state=True, **params, **extra)
    outputs = StageOutputs.from_dict(state.result())
    cached = state.name == "Cached"
    if cached and not outputs.exists():
        env.say(f"{task.name}: cached result's files are gone; recomputing")
        state = task.with_options(refresh_cache=True)(return_state=True, **params, **extra)
        outputs, cached = StageOutputs.from_dict(state.result()), False
    if cached:
        env.say(f"{task.name}: same inputs and code as an earlier run; reusing its result in {outputs.dir}")
        if run_id:
            _mark_reused(env, run_id, task.name, outputs)
    return outputs, cached


def _mark_reused(env: StageEnv, run_id: str, task_name: str, outputs: StageOutputs) -> None:
    """Tag the stage run with the reused result's folder and replay the metrics it logged when it was made."""
    env.store.set_tags(run_id, {"reused": task_name, "reused_outputs": outputs.dir})
    metrics = Path(outputs.dir) / "metrics.jsonl"
    if metrics.exists():
        replay_metrics(env.store, run_id, metrics)


def trace_episodes(env: StageEnv, run_id: str, path: Path) -> TraceStats:
    """The episodes of a JSONL file (RL rollout records `{episode, rewards}` or bare episodes) as MLflow traces
    on `run_id`, sampled per `tracking.trace_sample`; once per run (a marker next to the file)."""
    from davinci.agents.episode import Episode

    if not path.is_file() or env.profile.tracking.trace_sample <= 0:
        return TraceStats(0, 0, 0.0)
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    episodes = [Episode.from_dict(r.get("episode", r)) for r in records]
    rewards = [r.get("rewards") for r in records]
    return log_episode_traces(env.store, run_id, episodes, env.profile.tracking.trace_sample, env.stage, rewards,
                              marker_dir=path.parent)
