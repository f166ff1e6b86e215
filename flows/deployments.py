"""Prefect deployments: a scheduled pipeline and an on-demand stage rerun.

    davinci-kernel serve [--profile h100] [--cron "0 3 * * *"]
    prefect deployment run 'rerun-stage/rerun-stage' -p stage=eval -p from_run_id=<run id>

`serve` is a long-lived process that runs the deployments' flow runs itself (no work pool needed). A
Prefect API server must be reachable: PREFECT_API_URL, or one started here for the duration.
"""

from __future__ import annotations

from typing import Any

from flows.servers import prefect_server


def build_deployments(profile: str, cron: str) -> list[Any]:
    from flows.pipeline import pipeline_flow
    from flows.rerun import rerun_stage_flow

    nightly = pipeline_flow.to_deployment(
        name="nightly", cron=cron, parameters={"profile": profile, "overrides": []}, tags=["scheduled", profile],
        description=f"The whole pipeline on profile {profile!r}, on the schedule {cron!r}.",
    )
    rerun = rerun_stage_flow.to_deployment(
        name="rerun-stage", tags=["on-demand"],
        description="Rerun one stage of an earlier pipeline run: parameters stage, from_run_id, overrides.",
    )
    return [nightly, rerun]


def serve_deployments(profile: str, cron: str, port: int) -> int:
    from davinci.config import load_profile

    load_profile(profile)  # a bad profile fails before any server starts
    with prefect_server(port):
        from prefect import serve

        deployments = build_deployments(profile, cron)
        print("serving deployments: davinci-pipeline/nightly (scheduled), rerun-stage/rerun-stage (on demand)", flush=True)
        serve(*deployments, limit=1)
    return 0
