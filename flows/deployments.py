"""Prefect deployments: a scheduled pipeline and an on-demand stage rerun.

    davinci-kernel serve [--profile h100] [--cron "0 3 * * *"]
    prefect deployment run 'rerun-stage/rerun-stage' -p stage=eval -p from_run_id=<run id>

`serve` is a long-lived process that runs the deployments' flow runs itself (no work pool needed). A
Prefect API server must be reachable: PREFECT_API_URL, or one started here for the duration. A second
shell only finds the deployments through the same API, so `serve` prints the exact command to use there
(`PREFECT_API_URL=... prefect deployment run ...`). The cron expression is checked before any server starts.
"""

from __future__ import annotations

from typing import Any

from davinci.errors import ConfigError
from flows.servers import prefect_server


def check_cron(cron: str) -> None:
    """Raise ConfigError unless `cron` is a 5-field cron expression Prefect accepts."""
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron)
    except Exception:
        raise ConfigError(f"--cron {cron!r} is not a valid cron expression",
                          'give five fields: minute hour day-of-month month day-of-week, e.g. --cron "0 3 * * *"') from None


def second_shell_commands(api_url: str) -> list[str]:
    """What to type in another shell to trigger the deployments of this `serve`."""
    prefix = f"PREFECT_API_URL={api_url}"
    return [f"{prefix} prefect deployment run 'rerun-stage/rerun-stage' -p stage=eval -p from_run_id=<parent run id>",
            f"{prefix} prefect deployment run 'davinci-pipeline/nightly'"]


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

    load_profile(profile)  # a bad profile or cron fails before any server starts
    check_cron(cron)
    with prefect_server(port) as api_url:
        from prefect import serve

        deployments = build_deployments(profile, cron)
        print("serving deployments: davinci-pipeline/nightly (scheduled), rerun-stage/rerun-stage (on demand)", flush=True)
        print("from another shell:", *(f"  {line}" for line in second_shell_commands(api_url)), sep="\n", flush=True)
        serve(*deployments, limit=1)
    return 0
