"""Task of the rl stage: one RL epoch (rollouts -> rewards -> advantages -> update -> checkpoint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from tasks.caching import cache_key_fn
from tasks.common import task_logger

SCOPES = ("davinci",)


@task(name="rl-epoch", retries=2, retry_delay_seconds=5, cache_key_fn=cache_key_fn(SCOPES), persist_result=True)
def rl_epoch(checkpoint_dir: str, output_dir: str, store_root: str, library_version: int, problems_path: str,
             profile: dict[str, Any], epoch: int, previous_epoch_dir: str, admissions_path: str,
             run_ref: dict[str, str] | None = None, start_states_path: str = "", heldout_path: str = "") -> dict[str, Any]:
    """One epoch into `output_dir`; a retry resumes mid-epoch from the checkpoint the driver keeps there.

    `start_states_path`: the data stage's RL start states ("" = none); `heldout_path`: its eval split, whose
    problems never get one."""
    from davinci.config import profile_from_dict
    from davinci.rl.epoch import EpochInputs, run_rl_epoch

    inputs = EpochInputs(
        checkpoint_dir=checkpoint_dir, output_dir=output_dir, skill_store_root=store_root,
        library_version=library_version, problems=problems_path, profile=profile_from_dict(profile), epoch=epoch,
        previous_epoch_dir=previous_epoch_dir, admissions_path=admissions_path,
        start_states=start_states_path, heldout_problems=heldout_path,
        logger=task_logger(run_ref, Path(output_dir) / "metrics.jsonl"),
    )
    return run_rl_epoch(inputs).to_dict()
