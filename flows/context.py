"""MLflow run lifecycle for flows: the parent pipeline run, one child run per stage, resume, lookup.

Only flows open runs (DESIGN.md). Choices:
- A pipeline run is keyed by `run_key` = hash of the resolved profile. `davinci-kernel run` with the same
  arguments finds the newest parent with that key: if it did not finish (interrupted, failed, killed), it is
  resumed: stages whose child run FINISHED are skipped, the others rerun and their tasks pick up cached or
  partial work. A finished parent is never reopened; a new one is made and its tasks hit the cache.
- Run names say what a run is: `<profile> <overrides> <start time>` for the parent, `<stage> · <parent
  name>` for a stage (so chart legends tell runs apart), `<stage> rerun <time> · ...` plus tag `rerun=true`
  for `davinci-kernel stage`. A resumed parent reopens its interrupted stage run (KILLED -> RUNNING ->
  FINISHED) rather than leaving a KILLED one behind; open runs are tracked so Ctrl-C marks them KILLED.
- Child runs carry `stage=<name>`, the Prefect flow-run id and name; the Prefect flow run gets a link
  artifact back to the MLflow run (on the UI's real port). Each child logs `outputs.json` and its folder.
- Upstream lookup for a stage rerun: the newest FINISHED child of the parent with that stage; its folder is
  used in place when it still exists, else downloaded from the run's artifacts.
"""

from __future__ import annotations

import json
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import davinci
from artifacts.home import Home
from artifacts.refs import MANIFEST, StageOutputs
from artifacts.store import PARENT_STAGE, StoreLocation, TrackingStore, latest
from davinci.config import Profile, config_hash, flatten, load_profile, to_dict
from davinci.errors import InputNotFound
from flows.console import say
from flows.interrupt import track_run, untrack_run


@dataclass(frozen=True)
class ProfileRef:
    """How a profile was asked for: re-loadable from a run's tags."""

    name: str
    overrides: tuple[str, ...]

    def load(self) -> Profile:
        return load_profile(self.name, list(self.overrides))


def open_store(profile: Profile, home: Home | None = None) -> TrackingStore:
    home = home or Home.current()
    return TrackingStore(StoreLocation.resolve(home, profile.tracking.tracking_uri), profile.tracking.experiment)


def ui_base(profile: Profile) -> str:
    """Base URL of the MLflow UI for printed links: the tracking server itself, else the local UI's port."""
    uri = profile.tracking.tracking_uri or ""
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    return f"http://127.0.0.1:{profile.tracking.ui_port}"


def newest_run_url(store: TrackingStore, base: str) -> str:
    try:
        run = latest(store.pipeline_runs())
    except Exception:
        return ""
    return store.ui_url(run.info.run_id, base) if run is not None else ""


def prefect_ids() -> dict[str, str]:
    try:
        from prefect.runtime import flow_run

        return {"prefect.flow_run_id": str(flow_run.id or ""), "prefect.flow_run_name": str(flow_run.name or "")}
    except Exception:
        return {}


def link_prefect_to_mlflow(store: TrackingStore, run_id: str, stage: str, base: str) -> None:
    """A link artifact on the current Prefect flow run pointing at the MLflow run (best effort)."""
    try:
        from prefect.artifacts import create_link_artifact
        from prefect.context import FlowRunContext

        if FlowRunContext.get() is None:  # called outside a flow (tests, scripts): nothing to link from
            return None
        create_link_artifact(
            key=f"mlflow-{stage}",
            link=store.ui_url(run_id, base),
            link_text=f"MLflow run {run_id}",
            description=f"MLflow {stage} run (open with `davinci-kernel ui`)",
        )
    except Exception:
        return None


def _git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parents[1])
        return out.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def run_label(profile: Profile, ref: ProfileRef, when: float | None = None) -> str:
    """`tiny rl.epochs=3 11-26 09:30`: what a person needs to tell pipeline runs apart in lists and legends."""
    stamp = time.strftime("%m-%d %H:%M", time.localtime(when if when is not None else time.time()))
    return " ".join([profile.name, *ref.overrides, stamp])


def start_or_resume_pipeline(store: TrackingStore, profile: Profile, ref: ProfileRef) -> tuple[str, bool]:
    """Returns (parent run id, resumed?)."""
    run_key = config_hash(profile)
    previous = latest(store.pipeline_runs(run_key))
    if previous is not None and previous.info.status != "FINISHED":
        run_id = previous.info.run_id
        store.set_status(run_id, "RUNNING")
        resumes = int(previous.data.tags.get("resumes", "0")) + 1
        store.set_tags(run_id, {"resumes": resumes, **prefect_ids()})
        track_run(store, run_id, "pipeline", prefect_ids().get("prefect.flow_run_id", ""))
        return run_id, True
    tags = {
        "stage": PARENT_STAGE,
        "run_key": run_key,
        "profile": ref.name,
        "overrides": json.dumps(list(ref.overrides)),
        "git_sha": _git_sha(),
        "davinci_version": davinci.__version__,
        **prefect_ids(),
    }
    run_id = store.create_run(run_label(profile, ref), tags)
    track_run(store, run_id, "pipeline", tags.get("prefect.flow_run_id", ""))
    store.log_params(run_id, flatten(profile))
    store.log_dict(run_id, to_dict(profile), "profile.json")
    return run_id, False


def close_pipeline(store: TrackingStore, run_id: str, status: str) -> None:
    untrack_run(run_id)
    store.set_status(run_id, status)  # type: ignore[arg-type]


def profile_ref_of(store: TrackingStore, run_id: str) -> tuple[str, ProfileRef]:
    """The pipeline (parent) run id and profile of a run id that names a pipeline or one of its stage runs."""
    run = store.get_run(run_id)
    tags = run.data.tags
    if tags.get("stage") != PARENT_STAGE:
        parent = tags.get("mlflow.parentRunId")
        if not parent:
            raise InputNotFound(
                f"run {run_id} is not a daVinci-kernel pipeline run (no stage=pipeline tag, no parent)",
                "pass the parent run id that `davinci-kernel run` printed",
            )
        return profile_ref_of(store, parent)
    overrides = tuple(json.loads(tags.get("overrides", "[]")))
    return run_id, ProfileRef(tags.get("profile", "tiny"), overrides)


def resolve_rerun(from_run_id: str, overrides: Sequence[str]) -> tuple[str, ProfileRef]:
    """The pipeline run and profile a stage rerun uses; checks the run and the overrides before any work."""
    store = open_store(load_profile("tiny"))
    parent, ref = profile_ref_of(store, from_run_id)
    ref = ProfileRef(ref.name, ref.overrides + tuple(overrides))
    ref.load()
    return parent, ref


@contextmanager
def stage_run(store: TrackingStore, parent_run_id: str, stage: str, profile: Profile,
              extra_tags: dict[str, str] | None = None, rerun: bool = False) -> Iterator[str]:
    """A child MLflow run for one stage: FINISHED on success, KILLED on Ctrl-C, FAILED on any error.

    Without `rerun`, an unfinished run of the same stage under the parent (an interrupted one) is reopened."""
    from flows.cluster import check_cluster

    tags = {**check_cluster(profile).tags(), **(extra_tags or {})}  # where this stage's kernels are evaluated
    run_id = _open_stage_run(store, parent_run_id, stage, profile, tags, rerun)
    store.log_params(run_id, {k: v for k, v in flatten(profile).items() if k.split(".")[0] in _SECTIONS[stage]})
    link_prefect_to_mlflow(store, run_id, stage, ui_base(profile))
    track_run(store, run_id, stage, prefect_ids().get("prefect.flow_run_id", ""))
    try:
        with store.system_metrics(run_id, profile.tracking.system_metrics):
            yield run_id
    except KeyboardInterrupt:
        untrack_run(run_id)
        store.set_status(run_id, "KILLED")
        raise
    except BaseException:
        untrack_run(run_id)
        store.set_status(run_id, "FAILED")
        raise
    untrack_run(run_id)
    store.set_status(run_id, "FINISHED")


def _open_stage_run(store: TrackingStore, parent_run_id: str, stage: str, profile: Profile,
                    extra_tags: dict[str, str], rerun: bool) -> str:
    tags = {"stage": stage, **prefect_ids(), **extra_tags}
    if not rerun:
        unfinished = [r for r in store.child_runs(parent_run_id, stage) if r.info.status != "FINISHED"
                      and r.data.tags.get("rerun") != "true"]
        if unfinished:
            run_id = unfinished[0].info.run_id
            store.set_status(run_id, "RUNNING")
            store.set_tags(run_id, {**tags, "resumes": int(unfinished[0].data.tags.get("resumes", "0")) + 1})
            say(stage, f"resuming stage run {run_id}")
            return run_id
    parent_name = store.get_run(parent_run_id).info.run_name or ""
    if rerun:
        tags["rerun"] = "true"
        name = f"{stage} rerun {time.strftime('%m-%d %H:%M')} · {parent_name}"
    else:
        name = f"{stage} · {parent_name}"
    return store.create_run(name, tags, parent_run_id=parent_run_id)


_SECTIONS: dict[str, tuple[str, ...]] = {
    "data": ("seed", "data"),
    "sft": ("seed", "model", "sft"),
    "rl": ("seed", "model", "agents", "rl", "skills", "gym"),
    "skills": ("seed", "skills", "gym"),
    "eval": ("seed", "model", "agents", "skills", "gym", "eval"),
}


def finished_stage(store: TrackingStore, parent_run_id: str, stage: str):
    return latest(store.child_runs(parent_run_id, stage), status="FINISHED")


def log_stage_outputs(store: TrackingStore, run_id: str, outputs: StageOutputs) -> None:
    store.log_artifact(run_id, outputs.dir, "outputs")
    store.log_dict(run_id, outputs.to_dict(), MANIFEST)
    store.set_tags(run_id, {"outputs_dir": outputs.dir})


def load_stage_outputs(store: TrackingStore, run_id: str, home: Home | None = None) -> StageOutputs:
    """A finished stage run's outputs: the local folder if it still holds them, else downloaded."""
    home = home or Home.current()
    outputs = StageOutputs.from_dict(store.read_json_artifact(run_id, MANIFEST))
    if outputs.exists():
        return outputs
    target = home.state / "downloads" / run_id
    if not (target / "outputs" / MANIFEST).exists():
        store.download(run_id, "outputs", target)
    return outputs.rebased(target / "outputs")


def upstream_outputs(store: TrackingStore, parent_run_id: str, stages: Sequence[str]) -> dict[str, StageOutputs]:
    """Outputs of the newest finished run of each named stage under a pipeline run."""
    found: dict[str, StageOutputs] = {}
    for stage in stages:
        run = finished_stage(store, parent_run_id, stage)
        if run is None:
            raise InputNotFound(
                f"pipeline run {parent_run_id} has no finished {stage!r} stage to take inputs from",
                f"rerun the {stage} stage first (`davinci-kernel stage {stage} --from {parent_run_id}`) "
                "or run the whole pipeline",
            )
        found[stage] = load_stage_outputs(store, run.info.run_id)
        say(stage, f"inputs from run {run.info.run_id}")
    return found
