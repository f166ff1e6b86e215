"""Stage `data`: problem splits (train / held-out, decontaminated against eval), filter report, SFT examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from prefect import flow

from artifacts.refs import StageOutputs
from davinci.config import to_dict
from flows.context import log_stage_outputs, stage_run
from flows.stages.common import StageEnv, run_cached
from tasks.common import load_problems
from tasks.data import input_files_digest, prepare_data


@flow(name="stage-data")
def data_flow(profile: str = "tiny", overrides: Sequence[str] = (), parent_run_id: str = "",
              upstream: dict[str, Any] | None = None, force: bool = False,
              rerun: bool = False) -> dict[str, Any]:
    env = StageEnv.open("data", profile, overrides, parent_run_id)
    with stage_run(env.store, parent_run_id, "data", env.profile, rerun=rerun) as run_id:
        out, _ = run_cached(env, prepare_data, force, run_id=run_id, data_cfg=to_dict(env.profile.data), seed=env.profile.seed,
                            select_k=env.profile.skills.select_k, bm25_top_k=env.profile.skills.bm25_top_k,
                            agents_cfg=to_dict(env.profile.agents), inputs_digest=input_files_digest(env.profile.data))
        _log_data(env, run_id, out)
        log_stage_outputs(env.store, run_id, out)
    env.say(", ".join(f"{k}={v}" for k, v in out.summary.items() if isinstance(v, (int, float))))
    return out.to_dict()


def _problem_rows(path: Path) -> list[dict[str, Any]]:
    return [{"id": p.id, "source": p.source, "level": p.level, "name": p.name, "tags": ",".join(p.tags),
             "has_reference_solution": p.reference_solution is not None} for p in load_problems(path)]


def _log_data(env: StageEnv, run_id: str, out: StageOutputs) -> None:
    numbers = {k: float(v) for k, v in out.summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    env.store.log_metrics(run_id, numbers, step=0)
    for split in ("train", "eval"):
        if split in out.files:
            env.store.log_table(run_id, _problem_rows(out.path(split)), f"tables/{split}_problems.json")
    drops = json.loads(out.path("report").read_text()).get("drops", [])
    if drops:  # every problem the filters dropped, with the reason and the problem it matched
        env.store.log_table(run_id, drops, "tables/filter_drops.json")
