"""The pipeline flow: data -> sft -> rl -> skills -> eval, each a stage subflow with its own MLflow child run.

    davinci-kernel run --profile tiny                       # or: make run
    davinci-kernel run --profile tiny --set rl.epochs=1

Rerunning with the same arguments after an interruption resumes the same parent run: finished stages are
skipped (said on the console) and unfinished ones pick up their cached and partial task results.
"""

from __future__ import annotations

from typing import Any, Sequence

from prefect import flow

from artifacts.refs import StageOutputs
from artifacts.store import TrackingStore
from flows.cluster import check_cluster
from flows.console import banner, say
from flows.context import ProfileRef, close_pipeline, finished_stage, load_stage_outputs, open_store, start_or_resume_pipeline
from flows.stages import STAGE_FLOWS


@flow(name="davinci-pipeline", log_prints=False)
def pipeline_flow(profile: str = "tiny", overrides: Sequence[str] = ()) -> dict[str, Any]:
    ref = ProfileRef(profile, tuple(overrides))
    loaded = ref.load()
    store = open_store(loaded)
    cluster = check_cluster(loaded)  # a deployment's run checks it here, before it opens any run
    parent, resumed = start_or_resume_pipeline(store, loaded, ref)
    store.log_params(parent, cluster.params())  # kept from the first start when resumed (params are immutable)
    store.set_tags(parent, cluster.tags())
    banner(f"pipeline run {parent} ({'resumed' if resumed else 'new'}), profile {loaded.name}")
    run = _StageRunner(store, parent, ref, resumed)
    try:
        data = run("data")
        sft = run("sft", data=data)
        rl = run("rl", data=data, sft=sft)
        skills = run("skills", data=data, rl=rl)
        evaluation = run("eval", data=data, sft=sft, rl=rl, skills=skills)
    except KeyboardInterrupt:
        close_pipeline(store, parent, "KILLED")
        raise
    except BaseException:
        close_pipeline(store, parent, "FAILED")
        raise
    _summarize(store, parent, evaluation)
    close_pipeline(store, parent, "FINISHED")
    return {"parent_run_id": parent, "eval": evaluation.to_dict()}


class _StageRunner:
    """Runs one stage as a subflow, or skips it when a resumed parent already finished it."""

    def __init__(self, store: TrackingStore, parent: str, ref: ProfileRef, resumed: bool) -> None:
        self.store, self.parent, self.ref, self.resumed = store, parent, ref, resumed

    def __call__(self, stage: str, **upstream: StageOutputs) -> StageOutputs:
        if self.resumed:
            done = finished_stage(self.store, self.parent, stage)
            if done is not None:
                say(stage, f"already finished in run {done.info.run_id}; skipping")
                return load_stage_outputs(self.store, done.info.run_id)
        result = STAGE_FLOWS[stage](
            profile=self.ref.name,
            overrides=list(self.ref.overrides),
            parent_run_id=self.parent,
            upstream={k: v.to_dict() for k, v in upstream.items()},
        )
        return StageOutputs.from_dict(result)


def _summarize(store: TrackingStore, parent: str, evaluation: StageOutputs) -> None:
    """Copy the headline numbers (fast_p vs eager and compile, the held-out SFT-vs-RL comparison) onto the parent run."""
    headline = {k: float(v) for k, v in evaluation.summary.items() if k.startswith("fast_") and isinstance(v, (int, float))}
    if "heldout" in evaluation.summary:  # an eval stage finished before the comparison existed has none
        headline.update({k: float(v) for k, v in evaluation.summary["heldout"].items()})
    if headline:
        store.log_metrics(parent, headline, step=0)
