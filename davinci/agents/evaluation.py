"""The eval loop of the engine: a checkpoint's policy on held-out problems, one typed record per problem.

The policy gets `eval.turns` turns per problem with greedy decoding (one sample per problem, as KernelBench
scores sample 0), skills from the given library (or none with `eval.use_skills: false`), and the
evaluator's feedback between turns. A problem's result is `Episode.best_turn` (the one rule: fastest
correct, else the last evaluated turn); a problem with no code at all is a failure. Episodes are appended
to a JSONL file chunk by chunk, so an interrupted eval resumes where it stopped. The Prefect task
(`tasks/eval.py`) only wires files and tables around `run_eval`.

    profile = eval_profile(load_profile("tiny"))
    episodes = run_eval(profile, problems, backend, library, evaluate_fn, Path("episodes.jsonl"))
    rows = [problem_record(p, episodes.get(p.id)) for p in problems]
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from davinci.agents.episode import Episode
from davinci.agents.runner import EvaluateFn, run_episodes
from davinci.jsonl import append_jsonl, read_jsonl
from davinci.types import Problem

CHUNK = 4  # problems per run_episodes call (and per append: the resume granularity)


def eval_profile(profile: Any) -> Any:
    """The profile with the agents set for evaluation: eval turns, one greedy sample, no summaries."""
    agents = dataclasses.replace(profile.agents, turns=profile.eval.turns, group_size=1, summarize=False)
    gym = dataclasses.replace(profile.gym, cpu_compile_baseline=profile.gym.cpu_compile_baseline or profile.eval.compile_baseline_on_cpu)
    return dataclasses.replace(profile, agents=agents, gym=gym)


def read_episodes(path: Path) -> dict[str, Episode]:
    """Episodes of an eval file by problem id (typed; the last one wins on a repeated id)."""
    return {ep.problem_id: ep for ep in (Episode.from_dict(r) for r in read_jsonl(path))}


def run_eval(profile: Any, problems: Sequence[Problem], backend: Any, library: Any, evaluate_fn: EvaluateFn,
             episodes_path: Path) -> dict[str, Episode]:
    """Episodes for the problems not yet in `episodes_path` (appended chunk by chunk); returns all by id."""
    from tqdm import tqdm

    done = read_episodes(episodes_path)
    todo = [p for p in problems if p.id not in done]
    bar = tqdm(total=len(problems), initial=len(problems) - len(todo), desc="eval", unit="problem")
    for start in range(0, len(todo), CHUNK):
        episodes = run_episodes(todo[start : start + CHUNK], library, backend, profile, epoch=-1, group_size=1,
                                greedy=profile.eval.greedy, evaluate_fn=evaluate_fn)
        append_jsonl(episodes_path, [ep.to_dict() for ep in episodes])
        bar.update(len(episodes))
    bar.close()
    return read_episodes(episodes_path)


def problem_record(problem: Problem, episode: Episode | None, max_turn: int | None = None) -> dict[str, Any]:
    """One row per eval problem from its best turn within `max_turn` turns (fast_p reads these keys)."""
    turns = [t for t in (episode.turns if episode else ()) if max_turn is None or t.index < max_turn]
    best = episode.best_turn(max_turn) if episode else None
    res = best.result if best is not None else None
    return {
        "problem_id": problem.id, "name": problem.name, "level": problem.level,
        "turn": best.index if best else None, "turns": len(turns),
        "compiled": bool(res and res.compiled), "correct": bool(res and res.correct),
        "speedup": res.speedup if res else None, "speedup_compile": res.speedup_compile if res else None,
        "speedup_ci": list(res.speedup_ci) if res and res.speedup_ci else None,
        "runtime_ms": res.runtime.median_ms if res and res.runtime else None,
        "sol_percent": res.sol_percent if res else None, "flags": list(res.flags) if res else [],
        "error_kind": res.error_kind if res else "no_code", "timing_label": res.timing_label if res else None,
        "device": res.device if res else None,
    }


def paired_bootstrap_ci(before: Sequence[float], after: Sequence[float], *, n_boot: int = 10_000, seed: int = 0,
                        level: float = 0.95) -> tuple[float, float, float]:
    """(mean of after - before, CI low, CI high): percentile bootstrap over problems, pairs kept together.

    The same problems are scored before and after, so the unit of resampling is the problem's pair.

    >>> paired_bootstrap_ci([0, 0, 0, 0], [1, 1, 1, 1])
    (1.0, 1.0, 1.0)
    >>> d, lo, hi = paired_bootstrap_ci([0, 1, 0, 1, 0, 0], [1, 1, 1, 1, 0, 0])
    >>> round(d, 3), lo <= d <= hi, lo >= 0.0
    (0.333, True, True)
    """
    import numpy as np

    if len(before) != len(after) or not before:
        raise ValueError(f"paired scores need equal, non-zero lengths (got {len(before)} and {len(after)})")
    diff = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)  # [P] one difference per problem
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(n_boot, len(diff)))].mean(axis=1)  # [n_boot]
    tail = (1.0 - level) / 2 * 100
    return float(diff.mean()), float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))


def stratified_paired_bootstrap_ci(strata: Sequence[tuple[Sequence[float], Sequence[float]]], *, n_boot: int = 10_000,
                                   seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(mean of after - before over every pair, CI low, CI high) for paired scores from several independent runs.

    Each stratum is one run's (before, after) on its own problems (another seed draws other problems), so
    problems are resampled within each run, each run keeping its number of pairs; the pooled mean weighs every
    problem alike. Run-to-run variance of training beyond its problems is not in the interval: with a handful of
    runs it cannot be estimated, and the per-run results are reported beside it. One stratum is
    `paired_bootstrap_ci`.

    >>> stratified_paired_bootstrap_ci([([0, 0], [1, 1]), ([0, 0, 0], [1, 1, 1])])
    (1.0, 1.0, 1.0)
    >>> d, lo, hi = stratified_paired_bootstrap_ci([([0, 0], [1, 1]), ([1, 1], [1, 1])])
    >>> d, lo, hi
    (0.5, 0.5, 0.5)
    """
    import numpy as np

    if not strata:
        raise ValueError("no runs to pool: pass one (before, after) pair of score lists per run")
    for k, (before, after) in enumerate(strata):
        if len(before) != len(after) or not before:
            raise ValueError(f"run {k}: paired scores need equal, non-zero lengths (got {len(before)} and {len(after)})")
    diffs = [np.asarray(a, dtype=float) - np.asarray(b, dtype=float) for b, a in strata]  # [P_k] per run
    total = sum(len(d) for d in diffs)
    rng = np.random.default_rng(seed)
    sums = np.zeros(n_boot)  # [n_boot] sum of the resampled differences over every run
    for d in diffs:
        sums += d[rng.integers(0, len(d), size=(n_boot, len(d)))].sum(axis=1)
    tail = (1.0 - level) / 2 * 100
    means = sums / total
    return float(np.concatenate(diffs).mean()), float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))
