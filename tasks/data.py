"""Task of the data stage: problem splits, decontamination, diversity filter, role-tagged SFT examples."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from prefect import task

from artifacts.refs import StageOutputs
from davinci.agents.config import AgentsConfig
from davinci.config.data import DataConfig
from tasks.caching import cache_key_fn, work_dir
from tasks.common import section

SCOPES = ("data_prep", "davinci/config", "davinci/agents", "davinci/skills", "davinci/types.py")


def input_files_digest(cfg: DataConfig) -> str:
    """Digest of the content of the input files the config names (SFT trajectories, evolution revisions), so the
    cached task reruns when a file changes under the same path; "" when it names none."""
    from davinci.jsonl import file_digest

    paths = [p for p in (cfg.sft_trajectories, *cfg.evolution_revisions) if p]
    return ",".join(file_digest(p) if Path(p).is_file() else f"missing:{p}" for p in paths)


@task(name="prepare-data", retries=1, retry_delay_seconds=2, cache_key_fn=cache_key_fn(SCOPES), persist_result=True)
def prepare_data(data_cfg: dict[str, Any], seed: int, select_k: int, bm25_top_k: int, agents_cfg: dict[str, Any],
                 inputs_digest: str = "") -> dict[str, Any]:
    """Build train/eval problem splits, the filter report and SFT examples into a folder keyed by the inputs
    (`inputs_digest`: the content of the input files the config names, see `input_files_digest`).

    The SFT prompts are rendered with the profile's agent settings, so they equal the RL-time prompts."""
    from data_prep.stage import START_STATES_FILE, run_data_stage
    from davinci.agents import sft_examples_for

    params = {"data_cfg": data_cfg, "seed": seed, "select_k": select_k, "bm25_top_k": bm25_top_k, "agents_cfg": agents_cfg,
              "inputs_digest": inputs_digest}
    out = work_dir("prepare-data", params, SCOPES)
    example_fn = functools.partial(sft_examples_for, agents=section(AgentsConfig, agents_cfg, "agents"))
    result = run_data_stage(section(DataConfig, data_cfg, "data"), out, seed, select_k=select_k, bm25_top_k=bm25_top_k,
                            example_fn=example_fn)
    paths = {"train": result.train_path, "eval": result.eval_path, "sft": result.sft_path, "report": result.report_path,
             "report_csv": result.table_csv_path, "report_md": result.table_md_path, "manifest": result.manifest_path}
    files = {name: str(path.relative_to(out)) for name, path in paths.items()}
    if (out / START_STATES_FILE).is_file():
        files["start_states"] = START_STATES_FILE
    return StageOutputs("data", str(out), files, dict(result.counts)).write().to_dict()
