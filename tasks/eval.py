"""Task of the eval stage: the final checkpoint and library on the eval problems; per-problem results, fast_p.

The policy gets `eval.turns` turns per problem with greedy decoding (one sample per problem, as KernelBench
scores sample 0), skills selected from the given library version (or none with `eval.use_skills: false`),
and the evaluator's feedback between turns. A problem's result is its best turn: the fastest correct one,
else the last; a problem with no code at all is a failure. fast_p follows KernelBench exactly (strict >,
N = every eval problem); it is reported vs eager and vs torch.compile, overall and per level, and also for
the first turn alone. Episodes are appended problem chunk by chunk, so an interrupted eval resumes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

from prefect import task

from artifacts.refs import StageOutputs
from tasks.caching import cache_key_fn
from tasks.common import load_problems, read_jsonl
from tasks.plots import bar_plot

SCOPES = ("davinci",)
CHUNK = 4


def _eval_profile(profile: dict[str, Any]) -> Any:
    """The profile with the agents set for evaluation: eval turns, one greedy sample, no summaries."""
    from davinci.config import profile_from_dict

    p = profile_from_dict(profile)
    agents = dataclasses.replace(p.agents, turns=p.eval.turns, group_size=1, summarize=False)
    gym = dataclasses.replace(p.gym, cpu_compile_baseline=p.gym.cpu_compile_baseline or p.eval.compile_baseline_on_cpu)
    return dataclasses.replace(p, agents=agents, gym=gym)


def _run_chunks(profile: Any, problems: Sequence[Any], checkpoint_dir: str, store_root: str, version: int,
                episodes_path: Path) -> None:
    from davinci.agents import run_episodes
    from davinci.kernelgym import evaluate_batch
    from davinci.llm import Backbone, make_backend
    from davinci.skills import SkillStore

    done = {row["problem_id"] for row in read_jsonl(episodes_path)} if episodes_path.exists() else set()
    todo = [p for p in problems if p.id not in done]
    if not todo:
        return
    backbone = Backbone.load(checkpoint_dir, profile.model)
    backend = make_backend(backbone, profile.model)
    library = SkillStore(Path(store_root)).load(version) if profile.eval.use_skills else ()

    def evaluate_fn(items):  # noqa: ANN001, ANN202 - the agents' EvaluateFn
        return evaluate_batch(items, profile.gym, progress=False)

    from tqdm import tqdm

    bar = tqdm(total=len(problems), initial=len(problems) - len(todo), desc="eval", unit="problem")
    for start in range(0, len(todo), CHUNK):
        episodes = run_episodes(todo[start : start + CHUNK], library, backend, profile, epoch=-1, group_size=1,
                                greedy=profile.eval.greedy, evaluate_fn=evaluate_fn)
        with episodes_path.open("a") as fh:
            for ep in episodes:
                fh.write(json.dumps(ep.to_dict()) + "\n")
        bar.update(len(episodes))
    bar.close()


def problem_record(problem: Any, episode: dict[str, Any] | None, max_turn: int | None = None) -> dict[str, Any]:
    """One row per eval problem: the best turn (fastest correct, else the last), within `max_turn` turns."""
    turns = [t for t in (episode or {}).get("turns", []) if max_turn is None or t["index"] < max_turn]
    scored = [t for t in turns if t.get("result")]
    correct = [t for t in scored if t["result"].get("correct")]
    best = max(correct, key=lambda t: t["result"].get("speedup") or 0.0) if correct else (scored[-1] if scored else None)
    res = (best or {}).get("result") or {}
    runtime = res.get("runtime") or {}
    return {
        "problem_id": problem.id, "name": problem.name, "level": problem.level,
        "turn": best["index"] if best else None, "turns": len(turns),
        "compiled": bool(res.get("compiled")), "correct": bool(res.get("correct")),
        "speedup": res.get("speedup"), "speedup_compile": res.get("speedup_compile"),
        "speedup_ci": res.get("speedup_ci"), "runtime_ms": runtime.get("median_ms") if isinstance(runtime, dict) else None,
        "sol_percent": res.get("sol_percent"), "flags": list(res.get("flags") or []),
        "error_kind": res.get("error_kind") if best else "no_code", "timing_label": res.get("timing_label"),
        "device": res.get("device"),
    }


@task(name="eval-policy", retries=1, retry_delay_seconds=5, cache_key_fn=cache_key_fn(SCOPES), persist_result=True)
def evaluate_policy(checkpoint_dir: str, store_root: str, library_version: int, problems_path: str,
                    profile: dict[str, Any], out_dir: str) -> dict[str, Any]:
    from davinci.kernelgym.metrics import fast_p_table, format_table, plot_fast_p

    prof = _eval_profile(profile)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems = load_problems(problems_path)
    problems = problems[: prof.eval.limit] if prof.eval.limit else problems
    episodes_path = out / "episodes.jsonl"
    _run_chunks(prof, problems, checkpoint_dir, store_root, library_version, episodes_path)
    episodes = {row["problem_id"]: row for row in read_jsonl(episodes_path)}
    records = [problem_record(p, episodes.get(p.id)) for p in problems]
    first = [problem_record(p, episodes.get(p.id), max_turn=1) for p in problems]
    levels = {lvl: sum(1 for p in problems if p.level == lvl) for lvl in {p.level for p in problems}}
    table = fast_p_table(records, ps=prof.eval.p_values, n_total=levels)
    first_table = fast_p_table(first, ps=prof.eval.p_values, n_total=levels)
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
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
