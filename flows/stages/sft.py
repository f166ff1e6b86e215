"""Stage `sft`: structured SFT cold start of the backbone on the role-tagged examples."""

from __future__ import annotations

from typing import Any, Sequence

from prefect import flow

from davinci.config import to_dict
from flows.context import log_stage_outputs, stage_run
from flows.stages.common import StageEnv, run_cached
from tasks.sft import sft_train


@flow(name="stage-sft")
def sft_flow(profile: str = "tiny", overrides: Sequence[str] = (), parent_run_id: str = "",
             upstream: dict[str, Any] | None = None, force: bool = False,
             rerun: bool = False) -> dict[str, Any]:
    env = StageEnv.open("sft", profile, overrides, parent_run_id)
    data = env.inputs(upstream, ("data",))["data"]
    with stage_run(env.store, parent_run_id, "sft", env.profile, rerun=rerun) as run_id:
        out, _ = run_cached(
            env, sft_train, force, run_id=run_id, data_dir=data.dir, examples_file=str(data.path("sft")),
            model_cfg=to_dict(env.profile.model), sft_cfg=to_dict(env.profile.sft), seed=env.profile.seed,
        )
        log_stage_outputs(env.store, run_id, out)
    env.say(f"loss {out.summary.get('first_loss', float('nan')):.3f} -> {out.summary.get('final_loss', float('nan')):.3f} "
            f"in {out.summary.get('steps', '?')} steps; checkpoint {out.path('checkpoint')}")
    return out.to_dict()
