"""Stage `eval`: the RL checkpoint and the SFT checkpoint it started from, on the same held-out problems.

The RL checkpoint (with the final library version) gives the fast_p tables, per-problem results and plots, as
before; the SFT checkpoint is evaluated the same way (same problems, profile and library) into `sft/`, and
the two are compared problem by problem (`davinci.agents.comparison`): held-out correctness (and fast_1 where
timings come from a GPU) of SFT vs RL with a paired bootstrap 95% CI of the difference, printed and logged
(metrics `heldout/*`, table `heldout/sft_vs_rl.json`, `heldout/comparison.md`, plot `plots/sft_vs_rl.png`).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from prefect import flow

from artifacts.refs import StageOutputs
from artifacts.tables import eval_rows
from davinci.config import config_hash, to_dict
from flows.context import log_stage_outputs, stage_run
from flows.stages.common import StageEnv, run_cached, trace_episodes
from tasks.common import read_jsonl
from tasks.eval import compare_checkpoints, evaluate_policy
from tasks.skills import library_rows

_EVAL_SECTIONS = ("seed", "model", "agents", "skills", "gym", "eval")


@flow(name="stage-eval")
def eval_flow(profile: str = "tiny", overrides: Sequence[str] = (), parent_run_id: str = "",
              upstream: dict[str, Any] | None = None, force: bool = False,
              rerun: bool = False) -> dict[str, Any]:
    env = StageEnv.open("eval", profile, overrides, parent_run_id)
    inputs = env.inputs(upstream, ("data", "sft", "rl", "skills"))
    data, rl, skills = inputs["data"], inputs["rl"], inputs["skills"]
    sft_checkpoint = inputs["sft"].path("checkpoint")
    checkpoint = rl.path("checkpoint") if "checkpoint" in rl.files else sft_checkpoint
    version = int(skills.summary["library_version"])
    eval_profile = {k: v for k, v in to_dict(env.profile).items() if k in _EVAL_SECTIONS}
    folder = env.stage_dir({"checkpoint": str(checkpoint), "version": version, "profile": config_hash(eval_profile)}, fresh=force)
    with stage_run(env.store, parent_run_id, "eval", env.profile, {"library_version": str(version)}, rerun=rerun) as run_id:
        env.store.log_table(run_id, library_rows(env.skill_store, version), f"library/v{version}.json")
        common = dict(store_root=env.skill_store, library_version=version, problems_path=str(data.path("eval")), profile=eval_profile)
        out, _ = run_cached(env, evaluate_policy, force, run_id=run_id, checkpoint_dir=str(checkpoint), out_dir=str(folder), **common)
        _log_eval(env, run_id, out)
        sft_out = out
        if sft_checkpoint.resolve() != checkpoint.resolve():  # else no RL epoch ran: one checkpoint, evaluated once
            env.say("the SFT checkpoint on the same problems (paired comparison)")
            sft_out, _ = run_cached(env, evaluate_policy, force, checkpoint_dir=str(sft_checkpoint), out_dir=str(folder / "sft"), **common)
        out = compare_checkpoints(sft_out, out, seed=env.profile.seed)
        _log_comparison(env, run_id, out)
        log_stage_outputs(env.store, run_id, out)
    env.say(f"{out.summary['correct']}/{out.summary['problems']} correct; fast_1 vs eager "
            f"{out.summary.get('fast_1_eager', 0):.2f}, vs compile {out.summary.get('fast_1_compile', 0):.2f} "
            f"(timings: {out.summary['timing_label']})")
    print(out.path("fast_p_md").read_text(), flush=True)
    print(out.path("comparison_md").read_text(), flush=True)
    return out.to_dict()


def _log_eval(env: StageEnv, run_id: str, out: StageOutputs) -> None:
    """The RL checkpoint's tables (fast_p best and first turn, per problem), traces, metrics and plots."""
    tables = json.loads(out.path("fast_p").read_text())
    env.store.log_table(run_id, tables["best_turn"], "fast_p/fast_p_table.json")
    env.store.log_table(run_id, tables["first_turn"], "fast_p/fast_p_first_turn.json")
    results = list(read_jsonl(out.path("results")))
    episodes = {e["problem_id"]: e for e in read_jsonl(out.path("episodes"))}
    env.store.log_table(run_id, eval_rows(results, episodes), "results/per_problem.json")
    trace_episodes(env, run_id, out.path("episodes"))
    env.store.log_metrics(run_id, {k: float(v) for k, v in out.summary.items() if isinstance(v, (int, float))}, step=0)
    env.store.log_artifact(run_id, out.path("fast_p_plot"), "plots")
    env.store.log_artifact(run_id, out.path("speedup_plot"), "plots")


def _log_comparison(env: StageEnv, run_id: str, out: StageOutputs) -> None:
    """SFT vs RL on the held-out problems: metrics, the per-problem table, the markdown table and the plot."""
    comparison = json.loads(out.path("comparison").read_text())
    env.store.log_metrics(run_id, out.summary["heldout"], step=0)
    env.store.log_table(run_id, comparison["problems"], "heldout/sft_vs_rl.json")
    env.store.log_artifact(run_id, out.path("comparison_md"), "heldout")
    env.store.log_artifact(run_id, out.path("comparison_plot"), "plots")
