"""`davinci-kernel skills materialise`: the policy applies one skill to one problem under the admission gate.

    davinci-kernel skills materialise --skill lineage-single-warp --problem builtin/relu --checkpoint runs/rl/checkpoint
    davinci-kernel skills materialise --skill .davinci/work/lineage/x/candidates.jsonl --problem relu --replay answers.jsonl

The engine is `davinci.agents.materialise.materialise` (the policy's first-turn prompt with exactly this skill,
the answer judged by the admission gate's `transfer` check: correct, no hack flags, speedup CI lower bound above
`skills.min_speedup_lower`). This module resolves the inputs (bad ones are one `error:` line with the fix),
runs it with kernelgym's `evaluate` on the profile's gym, and then:
- records the skill's usage statistics: a skill of the library becomes a new library version with its usage
  and a `usage` evidence record updated; a seed skill that is not in the library, or a skill from a file, is
  written updated to `--out` (the library is not changed by a skill it does not hold);
- writes `skill.json` (the updated skill), `check.json` (the gate's record) and `kernel.py` (the answer's code)
  into `--out` (default `.davinci/work/materialise/<skill>/<problem>`);
- logs one top-level MLflow run (tag `stage=materialise`, like `evolve`): params (skill, problem, origin, seed,
  gym.*, the gate's threshold), metrics `applied`, `correct`, `passed`, `speedup`, `ci_low`, `ci_high` and the
  skill's `usage/*`, the `--out` folder as artifacts;
- prints a short result: applied (the answer had code and it compiled)? correct? speedup with its CI? gate?

The model: `--checkpoint DIR` (a policy checkpoint, the profile's model backend) or `--replay FILE` (recorded
answers, JSONL rows `{"answer": text}` with an optional `"problem_id"`: the first row for the problem, or without
one, is the policy's answer; for tests and for replaying a model's output where none can be loaded).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from artifacts.home import Home
from davinci.errors import ConfigError, InputNotFound, MalformedInput


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


# ---------------------------------------------------------------------------------------------------
# Inputs


def resolve_skill(spec: str, library: Any) -> tuple[Any, str]:
    """(skill, origin) from a library skill id, a seed skill id, or a file of one skill (JSON or JSONL);
    origin is `library:v<N>`, `seed` or `file:<path>`."""
    from davinci.skills import seed_skills

    if library is not None and library.get(spec) is not None:
        return library.get(spec), f"library:v{library.version}"
    seeds = {s.id: s for s in seed_skills()}
    if spec in seeds:
        return seeds[spec], "seed"
    path, _, wanted = spec.partition("#")  # FILE#SKILL_ID picks one skill of a file holding several
    if Path(path).is_file():
        return _skill_from_file(Path(path), wanted or None), f"file:{spec}"
    known = sorted({*(library.ids() if library is not None else ()), *seeds})
    raise InputNotFound(f"unknown skill {spec!r} (not in the library, not a seed skill, not an existing file)",
                        f"use a skill id ({', '.join(known)}) or a .json/.jsonl file holding one skill "
                        "(e.g. `skills lineage`'s candidates.jsonl)")


def _skill_from_file(path: Path, wanted: str | None = None) -> Any:
    """The one skill of a .json/.jsonl file, or the row whose id is `wanted` (`FILE#SKILL_ID`)."""
    from davinci.skills.schema import Skill

    text = path.read_text()
    try:
        rows = [json.loads(text)] if path.suffix == ".json" else [json.loads(x) for x in text.splitlines() if x.strip()]
    except json.JSONDecodeError as exc:
        raise MalformedInput(f"{path} is not JSON ({exc.msg}, line {exc.lineno})", "pass a file of Skill.to_dict() JSON") from None
    ids = [str(r.get("id")) if isinstance(r, dict) else "?" for r in rows]
    if wanted is not None:
        if wanted not in ids:
            raise InputNotFound(f"{path} has no skill {wanted!r}", f"pick one of: {', '.join(ids) or '(none)'}")
        return Skill.from_dict(rows[ids.index(wanted)])
    if len(rows) != 1:
        raise MalformedInput(f"{path} holds {len(rows)} skills, not one",
                             f"pick one with --skill {path}#SKILL_ID (ids: {', '.join(ids)})")
    return Skill.from_dict(rows[0])


class ReplayBackend:
    """Stands in for the policy: returns a recorded answer (where no model can be loaded, or to replay one)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def generate(self, prompts: Any, sampling: Any) -> list[Any]:
        from davinci.llm.types import GenOutput

        return [GenOutput(self.answer, (), (), (), "stop") for _ in prompts]


def replay_answer(path: str, problem_id: str) -> str:
    """The first recorded answer for `problem_id` (or without a problem id) in a replay JSONL."""
    if not Path(path).is_file():
        raise InputNotFound(f"replay file {path} does not exist", "pass --replay with a JSONL of {\"answer\": ...} rows")
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MalformedInput(f"{path}:{n} is not JSON ({exc.msg})", f"fix line {n}: one {{\"answer\": text}} object a line") from None
        if not isinstance(row, dict) or not isinstance(row.get("answer"), str):
            raise MalformedInput(f"{path}:{n} has no string \"answer\"", f"fix line {n}: one {{\"answer\": text}} object a line")
        if row.get("problem_id") in (None, problem_id):
            return row["answer"]
    raise InputNotFound(f"replay file {path} has no answer for {problem_id}",
                        f"add a row {{\"problem_id\": \"{problem_id}\", \"answer\": ...}}")


def make_policy(args: argparse.Namespace, profile: Any, problem_id: str) -> Any:
    """The policy's backend: recorded answers (--replay) or a checkpoint (--checkpoint); exactly one."""
    if bool(args.replay) == bool(args.checkpoint):
        raise ConfigError("materialise needs exactly one model" + (" (both given)" if args.replay else ""),
                          "pass --checkpoint DIR (a policy checkpoint) or --replay FILE (recorded answers)")
    if args.replay:
        return ReplayBackend(replay_answer(args.replay, problem_id))
    if not Path(args.checkpoint).is_dir():
        raise InputNotFound(f"checkpoint folder {args.checkpoint} does not exist",
                            "pass --checkpoint with a folder a run saved (e.g. an sft or rl stage's model)")
    from davinci.llm import Backbone, make_backend

    return make_backend(Backbone.load(args.checkpoint, profile.model), profile.model)


# ---------------------------------------------------------------------------------------------------
# The command


def materialise_command(args: argparse.Namespace) -> int:
    from data_prep.resolve import resolve_problem
    from davinci.config import load_profile
    from davinci.skills import SkillStore

    profile = load_profile(args.profile, args.overrides)
    problem = resolve_problem(args.problem)
    store = SkillStore(Home.current().skills)
    library = store.load("latest") if store.versions() else None
    skill, origin = resolve_skill(args.skill, library)
    backend = make_policy(args, profile, problem.id)
    from davinci.agents.materialise import materialise
    from davinci.kernelgym import evaluate

    outcome, updated = materialise(problem, skill, backend, evaluate, profile.gym, profile.skills,
                                   max_new_tokens=profile.agents.max_new_tokens, seed=profile.seed)
    out = Path(args.out) if args.out else Home.current().work / "materialise" / _slug(skill.id) / _slug(problem.id)
    write_outputs(out, outcome, updated)
    run_url = log_run(profile, outcome, updated, origin, out)
    recorded = record_usage(store, library, updated, origin, out)  # last: a failure before it records nothing
    print_result(outcome, updated, recorded, run_url)
    return 0


def record_usage(store: Any, library: Any, skill: Any, origin: str, out: Path) -> str:
    """Where the updated usage statistics went: a new library version, or `--out`/skill.json."""
    if origin.startswith("library:"):
        skills = [skill if s.id == skill.id else s for s in library.skills]
        new = store.commit(skills, parent=library.version, note=f"skills materialise {skill.id}")
        return f"library v{new.version}"
    return str(out / "skill.json")


def write_outputs(out: Path, outcome: Any, skill: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "skill.json").write_text(json.dumps(skill.to_dict(), indent=2))
    (out / "check.json").write_text(json.dumps(asdict(outcome.check), indent=2))
    kernel = out / "kernel.py"
    if outcome.code is not None:
        kernel.write_text(outcome.code)
    else:
        kernel.unlink(missing_ok=True)


def result_metrics(outcome: Any, skill: Any) -> dict[str, float]:
    check, usage = outcome.check, skill.usage
    metrics = {"applied": float(applied(outcome)), "correct": float(check.correct), "passed": float(check.passed),
               "usage/times_selected": float(usage.times_selected), "usage/times_succeeded": float(usage.times_succeeded)}
    metrics.update({k: float(v) for k, v in (("speedup", check.speedup), ("ci_low", check.ci_low), ("ci_high", check.ci_high))
                    if v is not None})
    return metrics


def applied(outcome: Any) -> bool:
    """The policy's answer had code and it compiled (a runtime or correctness failure still counts as applied)."""
    return outcome.compiled


def log_run(profile: Any, outcome: Any, skill: Any, origin: str, out: Path) -> str:
    """One top-level MLflow run (tag stage=materialise); returns its UI address."""
    from davinci.config import flatten
    from flows.context import open_store, prefect_ids, ui_base

    store = open_store(profile)
    tags = {"stage": "materialise", "skill": skill.id, "problem": outcome.problem_id, "profile": profile.name, **prefect_ids()}
    run_id = store.create_run(f"materialise {skill.id} on {outcome.problem_id}", tags)
    status = "FAILED"
    try:
        params = {k: v for k, v in flatten(profile).items() if k.split(".")[0] in ("seed", "gym")}
        store.log_params(run_id, {**params, "skills.min_speedup_lower": profile.skills.min_speedup_lower,
                                  "skill": skill.id, "problem": outcome.problem_id, "skill_origin": origin})
        store.log_metrics(run_id, result_metrics(outcome, skill), step=0)
        for path in sorted(out.iterdir()):
            store.log_artifact(run_id, path, "materialise")
        status = "FINISHED"
    finally:
        store.set_status(run_id, status)
    return store.ui_url(run_id, ui_base(profile))


def print_result(outcome: Any, skill: Any, recorded: str, run_url: str) -> None:
    check = outcome.check
    speed = "not timed"
    if check.speedup is not None:
        ci = f" (95% CI {check.ci_low:.2f}-{check.ci_high:.2f})" if check.ci_low is not None and check.ci_high is not None else ""
        speed = f"{check.speedup:.2f}x vs eager{ci}"
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    print(f"skill {skill.id} on {outcome.problem_id}: applied {yes(applied(outcome))}, correct {yes(check.correct)}, "
          f"speedup {speed}")
    print(f"  gate (transfer check): {'passed' if check.passed else 'failed'}" + (f": {check.note}" if check.note else ""))
    u = skill.usage
    print(f"  usage: selected {u.times_selected}, succeeded {u.times_succeeded} (recorded in {recorded})")
    print(f"MLflow materialise run: {run_url}")
