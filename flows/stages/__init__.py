"""One Prefect flow per stage. Each runs as a subflow of the pipeline or alone (`davinci-kernel stage`).

Every stage flow takes plain parameters (profile name, overrides, the parent pipeline run id, the upstream
stages' outputs as dicts, force) so it can also be a deployment. It opens its own child MLflow run.
"""

from flows.stages.data import data_flow
from flows.stages.eval import eval_flow
from flows.stages.rl import rl_flow
from flows.stages.sft import sft_flow
from flows.stages.skills import skills_flow

STAGE_FLOWS = {"data": data_flow, "sft": sft_flow, "rl": rl_flow, "skills": skills_flow, "eval": eval_flow}

# What each stage consumes (by stage name); a standalone rerun loads these from the parent pipeline run.
STAGE_INPUTS: dict[str, tuple[str, ...]] = {
    "data": (),
    "sft": ("data",),
    "rl": ("data", "sft"),
    "skills": ("data", "rl"),
    "eval": ("data", "sft", "rl", "skills"),
}

__all__ = ["STAGE_FLOWS", "STAGE_INPUTS", "data_flow", "sft_flow", "rl_flow", "skills_flow", "eval_flow"]
