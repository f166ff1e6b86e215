"""Rerun one stage of an earlier pipeline run, as a flow (used by the CLI and by the on-demand deployment).

    davinci-kernel stage eval --from <pipeline run id> [--set eval.turns=3]

The stage takes the profile and overrides recorded on the pipeline run (plus any new `--set`), loads its
inputs from that run's finished upstream stages, recomputes (unless `use_cache`), and logs a new child run
under the same parent. No other stage runs.
"""

from __future__ import annotations

from typing import Any, Sequence

from prefect import flow

from flows.context import open_store, resolve_rerun, upstream_outputs
from flows.stages import STAGE_FLOWS, STAGE_INPUTS


@flow(name="rerun-stage")
def rerun_stage_flow(stage: str, from_run_id: str, overrides: Sequence[str] = (), use_cache: bool = False) -> dict[str, Any]:
    if stage not in STAGE_FLOWS:
        from davinci.errors import UnknownName

        raise UnknownName("stage", stage, list(STAGE_FLOWS))
    parent, ref = resolve_rerun(from_run_id, overrides)
    store = open_store(ref.load())
    upstream = upstream_outputs(store, parent, STAGE_INPUTS[stage])
    result = STAGE_FLOWS[stage](
        profile=ref.name,
        overrides=list(ref.overrides),
        parent_run_id=parent,
        upstream={k: v.to_dict() for k, v in upstream.items()},
        force=not use_cache,
        rerun=True,
    )
    return {"parent_run_id": parent, "stage": stage, "outputs": result}
