"""`davinci-kernel skills lineage`: an expert kernel -> kept simplifications -> candidate lineage skills
(-> the admission gate and a new library version with `--admit`).

    davinci-kernel skills lineage --kernel triton-bias-gelu-residual          # a seed skill's example
    davinci-kernel skills lineage --kernel builtin --problem builtin/relu     # the built-in solution
    davinci-kernel skills lineage --kernel mine.py --problem builtin/relu --replay simplifications.jsonl --admit

The engine is `davinci.skills.lineage`; this module resolves the inputs (bad ones are one `error:` line with
the fix), runs it with kernelgym's `evaluate` on the profile's gym, writes `candidates.jsonl` (one
`Skill.to_dict()` a line), `steps.jsonl` and `report.md` into `--out` (default `.davinci/work/lineage/<kernel>`),
and prints the steps and candidates. `--admit` runs `skills.admit` against the latest library version and
commits the result (admitted lineage skills join the library; provenance kind `lineage`).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from artifacts.home import Home
from davinci.errors import InputNotFound
from davinci.jsonl import write_jsonl


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

    result = derive_lineage(expert, simps, evaluate, profile.gym, seed=profile.seed)
    out = Path(args.out) if args.out else Home.current().work / "lineage" / re.sub(r"[^A-Za-z0-9_.-]+", "_", args.kernel)
    write_lineage(result, out)
    print(f"expert {expert.origin} on {expert.problem.id}: speedup {result.expert_timing.speedup}")
    for s in result.steps:
        print(f"  {s.name:<22} {'kept' if s.kept else 'not kept'}: {s.reason[:150]}")
    for c in result.candidates:
        print(f"  candidate {c.id}: {c.effect.summary}")
    print(f"{len(result.candidates)} candidate skill(s) in {out / 'candidates.jsonl'}")
    if args.admit and result.candidates:
        _admit(profile, list(result.candidates))
    return 0


def _admit(profile: Any, candidates: list[Any]) -> None:
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
