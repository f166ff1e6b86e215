"""Task of the eval stage: the final checkpoint and library on the eval problems; per-problem results, fast_p.

The loop itself (greedy turns, best turn per problem, resume by chunks) is the engine's
`davinci.agents.evaluation`; this task loads the model and library, calls it, and writes the tables.
fast_p follows KernelBench exactly (strict >, N = every eval problem); it is reported vs eager and vs
torch.compile, overall and per level, and also for the first turn alone.

`compare_checkpoints` pairs two such outputs (the SFT and the RL checkpoint on the same problems) into the
held-out comparison (`davinci.agents.comparison`): `comparison.{json,md}` and `sft_vs_rl.png` beside the RL
checkpoint's files, its metrics under `summary["heldout"]`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from prefect import task

from artifacts.refs import StageOutputs
from davinci.jsonl import write_jsonl
from tasks.caching import cache_key_fn
from tasks.common import load_problems, read_jsonl
from tasks.plots import bar_plot, paired_bars_plot

SCOPES = ("davinci",)


def _run(profile: Any, problems: Sequence[Any], checkpoint_dir: str, store_root: str, version: int,
         episodes_path: Path) -> dict[str, Any]:
    """The engine's eval loop (`davinci.agents.evaluation.run_eval`) with the real backend and evaluator."""
    from davinci.agents.evaluation import read_episodes, run_eval
    from davinci.kernelgym import evaluate_batch
    from davinci.llm import Backbone, make_backend
    from davinci.rl.checkpoint import load_trainer_state_meta
    from davinci.rl.weightsync import sync_served_weights
    from davinci.skills import SkillStore

    if all(p.id in read_episodes(episodes_path) for p in problems):
        return read_episodes(episodes_path)  # a resumed run with nothing left: load no model
    backbone = Backbone.load(checkpoint_dir, profile.model)
    backend = make_backend(backbone, profile.model)
    step = int(load_trainer_state_meta(Path(checkpoint_dir))["global_step"])
    sync_served_weights(backend, checkpoint_dir, profile, global_step=step)  # a server evaluates these weights
    library = SkillStore(Path(store_root)).load(version) if profile.eval.use_skills else ()
    return run_eval(profile, problems, backend, library, lambda items: evaluate_batch(items, profile.gym, progress=False), episodes_path)


@task(name="eval-policy", retries=1, retry_delay_seconds=5, cache_key_fn=cache_key_fn(SCOPES), persist_result=True)
def evaluate_policy(checkpoint_dir: str, store_root: str, library_version: int, problems_path: str,
                    profile: dict[str, Any], out_dir: str) -> dict[str, Any]:
    from davinci.agents.evaluation import eval_profile, problem_record
    from davinci.config import profile_from_dict
    from davinci.kernelgym.metrics import fast_p_table, format_table, plot_fast_p

    prof = eval_profile(profile_from_dict(profile))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems = load_problems(problems_path)
    problems = problems[: prof.eval.limit] if prof.eval.limit else problems
    episodes_path = out / "episodes.jsonl"
    episodes = _run(prof, problems, checkpoint_dir, store_root, library_version, episodes_path)
    records = [problem_record(p, episodes.get(p.id)) for p in problems]
    first = [problem_record(p, episodes.get(p.id), max_turn=1) for p in problems]
    levels = {lvl: sum(1 for p in problems if p.level == lvl) for lvl in {p.level for p in problems}}
    table = fast_p_table(records, ps=prof.eval.p_values, n_total=levels)
    first_table = fast_p_table(first, ps=prof.eval.p_values, n_total=levels)
    write_jsonl(out / "results.jsonl", records)
    (out / "fast_p.json").write_text(json.dumps({"best_turn": table, "first_turn": first_table}, indent=2))
    (out / "fast_p.md").write_text(f"## best of {prof.eval.turns} turns\n\n{format_table(table)}\n\n"
                                   f"## first turn\n\n{format_table(first_table)}\n")
    plot_fast_p(records, str(out / "fast_p.png"), n_total=levels)
    bar_plot(out / "speedups.png", [(r["name"], r["speedup"] or 0.0) for r in records],
             "Per-problem speedup vs eager (0 = not correct)", "speedup")
    files = {"episodes": "episodes.jsonl", "results": "results.jsonl", "fast_p": "fast_p.json", "fast_p_md": "fast_p.md",
             "fast_p_plot": "fast_p.png", "speedup_plot": "speedups.png"}
    return StageOutputs("eval", str(out), files, _summary(table, first_table, records)).write().to_dict()


def _summary(table: list[dict[str, Any]], first: list[dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Headline numbers: the overall row (or the only level) per baseline, for best turn and first turn."""
    out: dict[str, Any] = {"problems": len(records), "correct": sum(r["correct"] for r in records),
                           "timing_label": next((r["timing_label"] for r in records if r["timing_label"]), "none")}
    for name, rows in (("", table), ("first_turn_", first)):
        overall = [r for r in rows if r["level"] == "all"] or rows
        for row in overall:
            for key, value in row.items():
                if key.startswith("fast_") and isinstance(value, float):
                    out[f"{name}{key}_{row['baseline']}"] = value
    return out


def compare_checkpoints(sft: StageOutputs, rl: StageOutputs, *, seed: int) -> StageOutputs:
    """The RL eval outputs plus the paired SFT-vs-RL comparison of their per-problem results (written into
    the RL eval's folder; cheap, so not a cached task)."""
    from davinci.agents.comparison import compare_records, format_comparison

    comparison = compare_records(list(read_jsonl(sft.path("results"))), list(read_jsonl(rl.path("results"))), seed=seed)
    out = Path(rl.dir)
    (out / "comparison.json").write_text(json.dumps(comparison.to_dict(), indent=2))
    (out / "comparison.md").write_text(format_comparison(comparison))
    paired_bars_plot(out / "sft_vs_rl.png", [(s.metric, s.before, s.after, s.ci95_low, s.ci95_high) for s in comparison.scores],
                     (comparison.before_label, comparison.after_label), f"held-out, n={len(comparison.problems)} (paired)")
    files = {**rl.files, "comparison": "comparison.json", "comparison_md": "comparison.md", "comparison_plot": "sft_vs_rl.png"}
    sft_results = sft.path("results")
    if sft.dir != rl.dir and sft_results.is_relative_to(out):  # the SFT eval's folder inside this one (`sft/`)
        files["sft_results"] = str(sft_results.relative_to(out))
    return StageOutputs("eval", rl.dir, files, {**rl.summary, "heldout": comparison.metrics()}).write()
