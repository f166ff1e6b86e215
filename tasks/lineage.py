"""`davinci-kernel skills lineage`: an expert kernel -> kept simplifications -> candidate lineage skills
(-> the admission gate and a new library version with `--admit`), logged as one MLflow run.

    davinci-kernel skills lineage --kernel triton-bias-gelu-residual          # a seed skill's example
    davinci-kernel skills lineage --kernel builtin --problem builtin/relu     # the built-in solution
    davinci-kernel skills lineage --kernel mine.py --problem builtin/relu --replay simplifications.jsonl --admit

The engine is `davinci.skills.lineage`; this module resolves the inputs (bad ones are one `error:` line with
the fix, exit 2, before any MLflow run exists), runs it with kernelgym's `evaluate` on the profile's gym, and:
- writes `candidates.jsonl` (one `Skill.to_dict()` a line), `steps.jsonl`, `report.md`, `chain.json` (the
  expert and each step with the reverse step's speedup and CI, and the candidate it became) and `lineage.png`
  (that chain as a chart) into `--out` (default `.davinci/work/lineage/<kernel>`);
- prints the steps and candidates; `--admit` runs `skills.admit` against the latest library version and
  commits the result (admitted lineage skills join the library; provenance kind `lineage`);
- logs one top-level MLflow run (tag `stage=lineage`, like `materialise` and `evolve`; tags `kernel`,
  `problem`, `expert_origin`, `library_version` after an admission): params (seed, gym.*, skills.*, kernel,
  problem, `backend` rules or rules+replay, `replay`, `simplifications`, `admit`); metrics
  `simplifications_proposed|applied|accepted` (accepted: the simpler kernel is still correct, the step is
  kept), `candidate_skills`, `expert_speedup`, with `--admit` `admitted` and `merged`, and per timed step
  `step/<name>/speedup|ci_low|ci_high`; artifacts `steps_table.json` (+ .html: every step's reverse speedup
  and CI), `chain.json`, `lineage.png` (logged with `log_figure`), `admission_table.json` with `--admit`,
  and `lineage/` (candidates.jsonl, steps.jsonl, report.md). The run is created before the derivation:
  FINISHED at the end, FAILED on any error (an incorrect expert kernel included: still one `error:` line),
  KILLED on Ctrl-C; its address is printed last.
"""

from __future__ import annotations

import argparse
import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from artifacts.home import Home
from davinci.errors import InputNotFound
from davinci.jsonl import write_jsonl

STAGE = "lineage"


def resolve_expert(kernel: str, problem: str) -> Any:
    """An `Expert` from a seed skill id, `builtin` (+ a built-in problem) or a kernel file (+ a problem)."""
    from data_prep.resolve import read_kernel, resolve_problem
    from davinci.skills import seed_skills
    from davinci.skills.lineage import Expert
    from davinci.types import Problem

    seeds = {s.id: s for s in seed_skills()}
    if kernel in seeds:
        s = seeds[kernel]
        prob = Problem(f"skill-example/{s.id}", "synthetic", 0, s.id, s.example.before)
        return Expert(prob, s.example.after, f"seed:{s.id}", s.example.cpu_shapes, f"{s.title}: {s.intent}")
    if not problem:
        raise InputNotFound(f"--kernel {kernel!r} is not a seed skill id, so --problem is needed",
                            f"pass --problem ID_OR_FILE, or a seed skill id as --kernel ({', '.join(sorted(seeds))})")
    prob = resolve_problem(problem)
    if kernel == "builtin":
        if not prob.reference_solution:
            raise InputNotFound(f"{prob.id} has no built-in solution", "pass a kernel file or a seed skill id as --kernel")
        return Expert(prob, prob.reference_solution, "builtin", context=f"the built-in solution of {prob.name}")
    if not kernel.endswith(".py") and not Path(kernel).exists():
        raise InputNotFound(f"--kernel {kernel!r} is not a seed skill id, `builtin`, or an existing file",
                            f"use a seed skill id ({', '.join(sorted(seeds))}), `builtin`, or a .py file defining ModelNew")
    return Expert(prob, read_kernel(kernel), f"file:{kernel}")


def simplifications_for(names: str, replay: str, problem_id: str) -> list[Any]:
    from davinci.skills.lineage import read_replay_simplifications
    from davinci.skills.rewrites import SIMPLIFICATIONS

    chosen = [n.strip() for n in names.split(",") if n.strip()] or list(SIMPLIFICATIONS.names())
    out = [SIMPLIFICATIONS.get(n) for n in chosen]
    return out + (read_replay_simplifications(replay, problem_id) if replay else [])


def write_lineage(result: Any, out: Path) -> None:
    from davinci.skills.export import render_skill_markdown

    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "candidates.jsonl", [s.to_dict() for s in result.candidates])
    write_jsonl(out / "steps.jsonl", [{"name": s.name, "description": s.description, "kept": s.kept, "reason": s.reason,
                                       "expert_code": s.expert_code, "simple_code": s.simple_code} for s in result.steps])
    lines = [f"# Lineage of {result.expert.origin} on {result.expert.problem.id}", "",
             f"expert: speedup {result.expert_timing.speedup} on {result.expert_timing.device}", "",
             "| step | kept | reason |", "|---|---|---|"]
    lines += [f"| {s.name} | {s.kept} | {s.reason.replace('|', '/')[:200]} |" for s in result.steps]
    lines += ["", *(render_skill_markdown(s) for s in result.candidates)]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def lineage_command(args: argparse.Namespace) -> int:
    from davinci.config import load_profile

    profile = load_profile(args.profile, args.overrides)
    expert = resolve_expert(args.kernel, args.problem)
    simps = simplifications_for(args.simplifications, args.replay, expert.problem.id)
    from davinci.kernelgym import evaluate
    from davinci.skills.lineage import derive_lineage
    from flows.context import open_store, ui_base

    out = Path(args.out) if args.out else Home.current().work / "lineage" / re.sub(r"[^A-Za-z0-9_.-]+", "_", args.kernel)
    store = open_store(profile)  # bad input above fails before any run exists; from here on the run records it
    with lineage_run(store, profile, expert, args, [s.name for s in simps], out) as run_id:
        result = derive_lineage(expert, simps, evaluate, profile.gym, seed=profile.seed)
        write_lineage(result, out)
        print(f"expert {expert.origin} on {expert.problem.id}: speedup {result.expert_timing.speedup}")
        for s in result.steps:
            print(f"  {s.name:<22} {'kept' if s.kept else 'not kept'}: {s.reason[:150]}")
        for c in result.candidates:
            print(f"  candidate {c.id}: {c.effect.summary}")
        print(f"{len(result.candidates)} candidate skill(s) in {out / 'candidates.jsonl'}")
        decisions, version = _admit(profile, list(result.candidates)) if args.admit and result.candidates else ([], None)
        log_results(store, run_id, result, decisions, version, args.admit, out)
    print(f"MLflow lineage run: {store.ui_url(run_id, ui_base(profile))}")
    return 0


# ---------------------------------------------------------------------------------------------------
# MLflow


@contextmanager
def lineage_run(store: Any, profile: Any, expert: Any, args: argparse.Namespace, simplifications: list[str],
                out: Path) -> Iterator[str]:
    """One top-level MLflow run (tag stage=lineage) around the derivation: FINISHED on success, KILLED on
    Ctrl-C (also from the interrupt handler's thread, via `track_run`), FAILED on any error."""
    from davinci.config import flatten
    from flows.context import prefect_ids
    from flows.interrupt import tracked_status

    tags = {"stage": STAGE, "kernel": args.kernel, "expert_origin": expert.origin, "problem": expert.problem.id,
            "profile": profile.name, "outputs_dir": str(out), **prefect_ids()}
    run_id = store.create_run(f"lineage {args.kernel} on {expert.problem.id}", tags)
    with tracked_status(store, run_id, STAGE):
        params = {k: v for k, v in flatten(profile).items() if k.split(".")[0] in ("seed", "gym", "skills")}
        store.log_params(run_id, {**params, "kernel": args.kernel, "problem": expert.problem.id, "expert_origin": expert.origin,
                                  "backend": "rules+replay" if args.replay else "rules", "replay": args.replay or "",
                                  "simplifications": ",".join(simplifications), "admit": bool(args.admit)})
        yield run_id


def step_rows(result: Any) -> list[dict[str, Any]]:
    """One row per simplification: kept?, the reverse step's speedup (simpler -> expert) and its CI."""
    from davinci.skills.lineage import ratio_ci

    rows = []
    for s in result.steps:
        ratio = ratio_ci(s.slow, s.fast) if s.kept and s.slow is not None and s.fast is not None else None
        rows.append({"step": s.name, "description": s.description, "kept": s.kept, "reason": s.reason,
                     "expert_median_ms": s.fast.median_ms if s.fast else None,
                     "simple_median_ms": s.slow.median_ms if s.slow else None,
                     "speedup": ratio[0] if ratio else None, "ci_low": ratio[1] if ratio else None,
                     "ci_high": ratio[2] if ratio else None, "device": s.fast.device if s.fast else ""})
    return rows


def chain_json(result: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The expert and every step (the reverse step's speedup and CI), with the candidate skill each kept step became."""
    t = result.expert_timing
    kept_ids = iter(c.id for c in result.candidates)  # candidates are the kept steps, in order
    return {"expert": {"origin": result.expert.origin, "problem_id": result.expert.problem.id, "speedup_vs_eager": t.speedup,
                       "median_ms": t.median_ms, "ci_low_ms": t.ci_low_ms, "ci_high_ms": t.ci_high_ms, "device": t.device,
                       "timing": t.timing_label},
            "steps": [{**r, "candidate": next(kept_ids, None) if r["kept"] else None} for r in rows]}


def chain_figure(result: Any, rows: list[dict[str, Any]]) -> Any:
    """One row per simplification: the reverse step's measured speedup with its CI (green: CI above 1x),
    grey text for a step that did not apply or was dropped; the dashed line is 1x (no gain)."""
    from tasks.plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 1.4 + 0.45 * max(1, len(rows))), dpi=120)
    timed = [r["speedup"] for r in rows if r["speedup"] is not None]
    right = max([1.2, *(r["ci_high"] for r in rows if r["ci_high"] is not None), *timed]) * 1.15
    for y, r in enumerate(rows):
        if r["speedup"] is not None:
            err = [[r["speedup"] - r["ci_low"]], [r["ci_high"] - r["speedup"]]]
            ax.barh(y, r["speedup"], color="#3a7" if r["ci_low"] > 1 else "#9bd", edgecolor="#333")
            ax.errorbar(r["speedup"], y, xerr=err, fmt="none", ecolor="#222", capsize=4)
            ax.annotate(f"{r['speedup']:.2f}x [{r['ci_low']:.2f}, {r['ci_high']:.2f}]", (r["ci_high"], y),
                        xytext=(4, 0), textcoords="offset points", va="center", fontsize=7)
        else:
            why = "kept, not timed" if r["kept"] else r["reason"][:60]
            ax.annotate(why, (0.02 * right, y), va="center", fontsize=7, color="#888")
    ax.axvline(1.0, color="#c33", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(rows)), [f"undo {r['step']}" for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.4, -0.6)  # first step on top, the last row clear of the axis
    ax.set_xlim(0, right)
    ax.set_xlabel("reverse step speedup (simpler -> expert) with 95% CI; green: CI above 1x", fontsize=8)
    e = result.expert_timing
    ax.set_title(f"lineage of {result.expert.origin} on {result.expert.problem.id} "
                 f"(expert {e.speedup:.2f}x vs eager on {e.device or 'unknown device'})" if e.speedup is not None
                 else f"lineage of {result.expert.origin} on {result.expert.problem.id}", fontsize=8)
    fig.tight_layout()
    return fig


def log_results(store: Any, run_id: str, result: Any, decisions: list[Any], version: int | None, admit: bool,
                out: Path) -> None:
    """Metrics, the steps table, the chain JSON and figure, and the `--out` files, onto the lineage run."""
    from davinci.skills.lineage import NOT_APPLICABLE

    rows = step_rows(result)
    metrics = {"simplifications_proposed": len(result.steps),
               "simplifications_applied": sum(r["reason"] != NOT_APPLICABLE for r in rows),
               "simplifications_accepted": sum(r["kept"] for r in rows),
               "candidate_skills": len(result.candidates)}
    if result.expert_timing.speedup is not None:
        metrics["expert_speedup"] = result.expert_timing.speedup
    if admit:
        metrics["admitted"] = sum(d.admitted for d in decisions)
        metrics["merged"] = sum(d.outcome == "merged" for d in decisions)
    for r in rows:
        if r["speedup"] is not None:
            key = re.sub(r"[^A-Za-z0-9_./ -]+", "_", r["step"])
            metrics.update({f"step/{key}/speedup": r["speedup"], f"step/{key}/ci_low": r["ci_low"],
                            f"step/{key}/ci_high": r["ci_high"]})
    store.log_metrics(run_id, metrics, step=0)
    chain = chain_json(result, rows)
    (out / "chain.json").write_text(json.dumps(chain, indent=2))
    fig = chain_figure(result, rows)
    fig.savefig(out / "lineage.png")
    if hasattr(store, "log_figure"):
        store.log_figure(run_id, fig, "lineage.png")
    else:
        store.log_artifact(run_id, out / "lineage.png")
    from tasks.plots import _pyplot

    _pyplot().close(fig)
    store.log_table(run_id, [{k: v for k, v in r.items() if k != "description"} for r in rows], "steps_table.json")
    store.log_dict(run_id, chain, "chain.json")
    for name in ("candidates.jsonl", "steps.jsonl", "report.md"):
        store.log_artifact(run_id, out / name, "lineage")
    if decisions:
        store.log_table(run_id, [{"skill": d.skill_id, "outcome": d.outcome, "admitted": d.admitted,
                                  "reasons": "; ".join(d.reasons)} for d in decisions], "admission_table.json")
    if version is not None:
        store.set_tags(run_id, {"library_version": version})


def _admit(profile: Any, candidates: list[Any]) -> tuple[list[Any], int | None]:
    """The admission gate on the candidates; admitted ones are committed. Returns (decisions, new library version)."""
    from davinci.skills import SkillStore, admit, apply_decisions

    store = SkillStore(Home.current().skills)
    library = store.load("latest") if store.versions() else None
    decisions = admit(candidates, library.skills if library else (), [], profile.gym, profile.skills)
    for d in decisions:
        print(f"  admission {d.skill_id}: {d.outcome} ({'; '.join(d.reasons)[:200]})")
    if any(d.admitted or d.outcome == "merged" for d in decisions):
        new = store.commit(apply_decisions(library.skills if library else [], decisions),
                           parent=library.version if library else None, note="skills lineage")
        print(f"library v{new.version}: {sum(d.admitted for d in decisions)} lineage skill(s) admitted")
        return list(decisions), new.version
    return list(decisions), None
