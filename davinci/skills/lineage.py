"""Lineage skills (KLineage): simplify an expert kernel step by step, keep the steps kernelgym still finds
correct, and reverse each kept step into a candidate skill whose evidence is the measured reverse step.

How it works (`derive_lineage(expert, simplifications, evaluate, gym)`):
1. The expert kernel is evaluated (timed, vs eager). An incorrect expert is an error: nothing to learn from.
2. Each simplification is applied to the expert kernel itself (a star-shaped lineage, not a chain), so each
   kept step isolates one change and every reversed step ends at the expert kernel (which is then the
   skill's example, the program admission re-measures): deterministic rules from `skills.rewrites`
   (`shrink_tiles`, `single_warp`, `single_stage`), then any recorded ones (`read_replay_simplifications`:
   what the backbone would propose where no rule is clear: drop a fusion, a naive reduction; the replay file
   stands in for the model, every evaluation is real). A step is kept only when the simpler kernel is
   correct and unflagged.
3. Each kept step A -> B (expert side A, simpler B) whose reverse step is faster beyond the noise on a GPU (its
   speedup CI above 1; on the CPU every kept step, the interpreter's timing saying nothing about speed)
   becomes a candidate `Skill` for B -> A: intent (why the
   expert form is faster), where it applies (the problem's operators and the rule's pattern), preconditions
   (dtypes, the sizes measured, layout, the device), guidance with the diff, the example (problem, expert
   kernel; CPU sizes carried over), the measured effect of the reverse step (`ratio_ci`: speedup
   t_B / t_A with a conservative CI from the two runtime CIs), and the failure it avoids (the simpler form
   and how much slower it ran). Provenance kind `lineage`; status `candidate`. Admission is the existing gate.

    result = derive_lineage(expert, [SIMPLIFICATIONS.get(n) for n in SIMPLIFICATIONS.names()], evaluate, gym)
    decisions = admit(result.candidates, library, [], gym, skills_cfg)
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from davinci.errors import DavinciError, InputNotFound, MalformedInput
from davinci.jsonl import read_jsonl
from davinci.skills.admission import _version, on_gpu, with_config_fields
from davinci.skills.codeinfo import apply_shape_overrides, extract_ops, module_constants
from davinci.skills.rewrites import Simplification
from davinci.skills.schema import AppliesTo, Effect, Example, Measurement, Preconditions, Skill, SkillProvenance, slugify
from davinci.types import Candidate, Problem, Provenance

EvaluateFn = Callable[..., Any]
NOT_APPLICABLE = "does not apply to this kernel"  # a Step's reason when the rule changed nothing


@dataclass(frozen=True)
class Expert:
    """An expert kernel for a problem; `origin` says where it came from (`seed:<id>`, `builtin`, `file:<path>`)."""

    problem: Problem
    code: str
    origin: str
    cpu_shapes: tuple[tuple[str, int], ...] = ()
    context: str = ""  # what the expert kernel does (a seed skill's title and intent), for the skill's text


@dataclass(frozen=True)
class Timed:
    """What a step needs of one evaluation: verdict, speedup vs eager, runtime median and CI (ms)."""

    correct: bool
    speedup: float | None
    median_ms: float | None
    ci_low_ms: float | None
    ci_high_ms: float | None
    device: str = ""
    timing_label: str = ""
    error: str = ""

    @classmethod
    def of(cls, r: Any) -> "Timed":
        rt = getattr(r, "runtime", None)
        ok = bool(r.correct) and not tuple(r.flags or ())
        why = "" if ok else (f"flags {', '.join(r.flags)}" if r.flags else f"{r.error_kind or 'incorrect'}: {str(r.error)[:300]}")
        return cls(ok, r.speedup, rt.median_ms if rt else None, rt.ci_low_ms if rt else None, rt.ci_high_ms if rt else None,
                   str(r.device or ""), str(r.timing_label or ""), why)


@dataclass(frozen=True)
class Step:
    name: str
    description: str
    expert_code: str  # the faster side (A)
    simple_code: str  # the simplified side (B)
    kept: bool
    reason: str
    fast: Timed | None = None
    slow: Timed | None = None


@dataclass(frozen=True)
class LineageResult:
    expert: Expert
    expert_timing: Timed
    steps: tuple[Step, ...]
    candidates: tuple[Skill, ...]


def ratio_ci(slow: Timed, fast: Timed) -> tuple[float, float, float] | None:
    """(speedup, low, high) of the reverse step: slow median / fast median, CI [slow.lo / fast.hi, slow.hi / fast.lo]."""
    vals = (slow.median_ms, slow.ci_low_ms, slow.ci_high_ms, fast.median_ms, fast.ci_low_ms, fast.ci_high_ms)
    if any(v is None or v <= 0 for v in vals):
        return None
    return slow.median_ms / fast.median_ms, slow.ci_low_ms / fast.ci_high_ms, slow.ci_high_ms / fast.ci_low_ms  # type: ignore[operator]


# --- replayed simplifications ----------------------------------------------------------------------------


def _replay_apply(find: str, replace: str, code: str) -> Callable[[str], str | None]:
    def apply(current: str) -> str | None:
        if code:
            return code if code != current else None
        return current.replace(find, replace) if find in current else None

    return apply


def read_replay_simplifications(path: str | Path, problem_id: str) -> list[Simplification]:
    """Recorded simplifications for `problem_id`: rows `{problem_id, name, description, reverse_intent, pattern,
    find, replace}` (or `code` instead of find/replace)."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFound(f"replay file {path} does not exist", "pass --replay FILE (JSONL of recorded simplifications) or leave it out")
    fix = "each line: {problem_id, name, description, reverse_intent, pattern, and code or find+replace}"
    out = []
    for n, row in enumerate(read_jsonl(path), 1):
        keys = ("problem_id", "name", "description", "reverse_intent", "pattern")
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) and row[k] for k in keys):
            raise MalformedInput(f"{path}:{n} lacks one of {', '.join(keys)}", fix)
        if not (isinstance(row.get("code"), str) or (isinstance(row.get("find"), str) and isinstance(row.get("replace"), str))):
            raise MalformedInput(f"{path}:{n} has neither code nor find/replace", fix)
        if row["problem_id"] == problem_id:
            apply = _replay_apply(row.get("find", ""), row.get("replace", ""), row.get("code", ""))
            out.append(Simplification(f"replay:{row['name']}", row["description"], row["reverse_intent"], row["pattern"], apply))
    return out


# --- deriving ---------------------------------------------------------------------------------------------


def _evaluate(expert: Expert, code: str, evaluate: EvaluateFn, gym: Any, seed: int) -> Timed:
    overrides = dict(expert.cpu_shapes) if expert.cpu_shapes and not on_gpu(gym) else None
    config = with_config_fields(gym, measure_performance=True, baselines=("eager",))
    cand = Candidate(expert.problem.id, code, "cuda" if "load_inline" in code else "triton", Provenance(agent="skills-lineage"))
    return Timed.of(evaluate(expert.problem, cand, config, seed=seed, shape_overrides=overrides))


def derive_lineage(expert: Expert, simplifications: Sequence[Simplification], evaluate: EvaluateFn, gym: Any,
                   *, seed: int = 0) -> LineageResult:
    """See the module docstring. Raises `DavinciError` when the expert itself is not correct."""
    top = _evaluate(expert, expert.code, evaluate, gym, seed)
    if not top.correct:
        raise DavinciError(f"the expert kernel ({expert.origin}) is not correct on {expert.problem.id}: {top.error}",
                           "start from a kernel that `davinci-kernel eval` finds correct")
    steps: list[Step] = []
    for simp in simplifications:
        simpler = simp.apply(expert.code)
        if simpler is None or simpler == expert.code:
            steps.append(Step(simp.name, simp.description, expert.code, expert.code, False, NOT_APPLICABLE))
            continue
        t = _evaluate(expert, simpler, evaluate, gym, seed)
        steps.append(Step(simp.name, simp.description, expert.code, simpler, t.correct,
                          "kept: still correct" if t.correct else f"dropped: {t.error}", top, t))
    # On a GPU a kept step (the simpler kernel is correct) whose reverse step is not faster beyond the noise (its
    # speedup CI above 1) teaches no optimisation: no skill. On the CPU the interpreter's timing says nothing
    # about speed, so every kept step is a candidate.
    gpu = on_gpu(gym)
    ratios = [ratio_ci(s.slow, s.fast) if s.kept and s.slow and s.fast else None for s in steps]
    gains = [not gpu or (r is not None and r[1] > 1.0) for r in ratios]
    steps = [s if g or not s.kept else _no_gain(s, r) for s, g, r in zip(steps, gains, ratios)]
    # each step with its own simplification (two replayed ones may share a name)
    cands = tuple(lineage_skill(expert, step, simp) for step, simp, gain in zip(steps, simplifications, gains)
                  if step.kept and gain)
    return LineageResult(expert, top, tuple(steps), cands)


def _no_gain(step: Step, ratio: tuple[float, float, float] | None) -> Step:
    measured = f"{ratio[0]:.3g}x, CI [{ratio[1]:.3g}, {ratio[2]:.3g}]" if ratio else "not timed"
    return replace(step, reason=f"kept: still correct; the reverse step has no gain beyond noise ({measured}): no skill")


def _diff(simple: str, fast: str, limit: int = 6000) -> str:
    lines = difflib.unified_diff(simple.splitlines(), fast.splitlines(), "simpler", "expert", lineterm="", n=3)
    return "\n".join(lines)[:limit]


def _effect(expert: Expert, step: Step) -> tuple[Effect, str]:
    assert step.fast is not None and step.slow is not None
    ratio = ratio_ci(step.slow, step.fast)
    device, label = step.fast.device or "unknown device", step.fast.timing_label
    if ratio is None:
        return Effect(f"reverse step not timed on {device}", None, ()), "not timed"
    speedup, low, high = ratio
    text = f"{speedup:.3g}x (CI [{low:.3g}, {high:.3g}]) on {device} ({label} timing)"
    m = Measurement(expert.problem.id, speedup, low, high, device, label, _version("torch"), _version("triton"), expert.cpu_shapes if label != "cuda" else ())
    return Effect(f"the reverse step (simpler -> expert) measured {text}", round(speedup, 4), (m,)), text


def lineage_skill(expert: Expert, step: Step, simp: Simplification) -> Skill:
    """The candidate skill of one kept step, every field filled (see the module docstring)."""
    problem = expert.problem
    info = extract_ops(apply_shape_overrides(problem.code, dict(expert.cpu_shapes)) if expert.cpu_shapes else problem.code)
    effect, measured = _effect(expert, step)
    sizes = ", ".join(f"{k}={v}" for k, v in module_constants(problem.code).items()) or "the example's sizes"
    digest = hashlib.sha256((step.expert_code + step.simple_code).encode()).hexdigest()[:6]
    name = simp.name.split(":")[-1]
    where = f"a {'/'.join(info.ops[:4]) or problem.name} kernel" + (f" ({expert.context[:300]})" if expert.context else "")
    guidance = (f"Lineage of {expert.origin} on {problem.id}; undoing {name} is this diff:\n\n"
                f"```diff\n{_diff(step.simple_code, step.expert_code)}\n```")
    return Skill(
        id=slugify(f"lineage {name} {problem.name}", digest),
        title=f"Reverse of {name} on {problem.name}: {simp.pattern}",
        intent=f"{simp.reverse_intent}, in {where}",
        applies_to=AppliesTo(ops=info.ops or (problem.name.lower(),), patterns=tuple(dict.fromkeys((simp.pattern, *info.categories)))),
        preconditions=Preconditions(dtypes=info.dtypes or ("fp32",), shapes=f"measured at {sizes}",
                                    layout="contiguous inputs, as in the example", hardware=f"measured on {step.fast.device if step.fast else 'unknown'}"),
        guidance=guidance,
        backend="cuda" if "load_inline" in step.expert_code else "triton",
        example=Example(before=problem.code, after=step.expert_code, cpu_shapes=expert.cpu_shapes),
        effect=effect,
        failure_modes=(f"{simp.description}: correct on {problem.name} but slower, {measured}",),
        provenance=SkillProvenance(kind="lineage", problem_id=problem.id, author=f"lineage:{simp.name} from {expert.origin}"),
    )
