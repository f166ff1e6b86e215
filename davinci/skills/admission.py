"""Verified admission: a candidate skill enters the library only when its effect reproduces.

For each candidate the gate plans evaluator runs (each `evaluate` call is a fresh process):
- `rerun` x `admission_reruns`: the example (`before` as the problem, `after` as the solution) at its own
  sizes with unseen seeds, timed against eager. On a CPU (Triton interpreter) the sizes are the
  example's `cpu_shapes` and the timing is labelled CPU.
- `shape` x `admission_shape_variants`: unseen sizes from `kernelgym.shape_variants` (on a CPU, proposed
  around `cpu_shapes`), checked for correctness only (small shapes may legitimately not be faster).
- `transfer`: other problems the skill was used on. `problems` is a pool of `TransferCase`s, i.e.
  (problem, solution) pairs from successful episodes with the skill ids the episode used; a case counts
  for a skill when it lists the skill and is not the problem the skill was summarized from. Timed.
  `min_transfer_cases` > 0 makes a candidate wait (`pending`) until enough such cases exist; the
  library keeps it as a candidate meanwhile (retrievable when `retrieve_statuses` includes it).

A check passes when the result is correct, carries no hack flags, and (timed checks, when
`min_speedup_lower` > 0) the lower bound of the speedup CI is above `min_speedup_lower`. All checks must
pass. Untimed checks run first, in parallel; timed checks run only for candidates that passed them, at
most `admission_timed_workers` at once. A passing candidate is then compared with the admitted skills:
a near-duplicate of a better one is merged into it (outcome `merged`); if the candidate is the better
one it is admitted and the older skill is retired as superseded. Every decision carries an
`EvidenceRecord` with all checks, the environment (device, torch, triton) and the config used.

    decisions = admit(candidates, library, cases, profile.gym, profile.skills)
    new_skills = apply_decisions(library.skills, decisions)
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Callable, Literal, Mapping, Sequence

from davinci.errors import InputNotFound
from davinci.skills.codeinfo import apply_shape_overrides
from davinci.skills.config import SkillsConfig
from davinci.skills.dedup import is_better, merge_skills, near_duplicates
from davinci.skills.schema import CheckKind, CheckRecord, EvidenceRecord, Measurement, Skill
from davinci.types import Candidate, Problem, Provenance

EvaluateFn = Callable[..., Any]
ShapeVariantsFn = Callable[[str, int, int], list]
Outcome = Literal["admitted", "rejected", "merged"]


@dataclass(frozen=True)
class TransferCase:
    """A solved problem from an episode, and the ids of the skills that episode used."""

    problem: Problem
    candidate: Candidate
    skill_ids: tuple[str, ...]


@dataclass(frozen=True)
class PlannedCheck:
    kind: CheckKind
    problem: Problem
    candidate: Candidate
    seed: int
    overrides: tuple[tuple[str, int], ...]
    timed: bool


@dataclass(frozen=True)
class AdmissionDecision:
    """What happened to one candidate. `skill` has the new status and the evidence appended;
    `updated` holds library skills this decision changed (a merged keeper, a superseded skill);
    `pending` is True when the only missing piece is transfer evidence (keep it as a candidate)."""

    skill_id: str
    outcome: Outcome
    skill: Skill
    reasons: tuple[str, ...]
    evidence: EvidenceRecord
    updated: tuple[Skill, ...] = ()
    pending: bool = False

    @property
    def admitted(self) -> bool:
        return self.outcome == "admitted"


# --- environment --------------------------------------------------------------------------------


def _default_evaluate() -> EvaluateFn:
    try:
        from davinci.kernelgym import evaluate  # type: ignore[attr-defined]
    except ImportError as exc:
        raise InputNotFound(f"davinci.kernelgym.evaluate is not importable ({exc})", "pass evaluate_fn= explicitly") from None
    return evaluate


def _default_shape_variants() -> ShapeVariantsFn:
    try:
        from davinci.kernelgym import shape_variants  # type: ignore[attr-defined]
    except ImportError as exc:
        raise InputNotFound(f"davinci.kernelgym.shape_variants is not importable ({exc})", "pass shape_variants_fn= explicitly") from None
    return shape_variants


def on_gpu(gym_config: Any) -> bool:
    device = getattr(gym_config, "device", "auto")
    if device in ("cpu", "cuda"):
        return device == "cuda"
    import torch

    return bool(torch.cuda.is_available())


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def with_config_fields(config: Any, **changes: Any) -> Any:
    """`dataclasses.replace` limited to the fields `config` has (the gym config may evolve)."""
    if not dataclasses.is_dataclass(config):
        return config
    names = {f.name for f in dataclasses.fields(config)}
    return replace(config, **{k: v for k, v in changes.items() if k in names})


# --- planning -----------------------------------------------------------------------------------


def example_problem(skill: Skill) -> tuple[Problem, Candidate]:
    problem = Problem(id=f"skill-example/{skill.id}", source="synthetic", level=0, name=skill.id, code=skill.example.before)
    return problem, Candidate(problem.id, skill.example.after, skill.backend, Provenance(agent="skills-admission"))


def _shape_variants(skill: Skill, cfg: SkillsConfig, gpu: bool, variants_fn: ShapeVariantsFn, seed: int) -> list[tuple[tuple[str, int], ...]]:
    base = skill.example.cpu_overrides if not gpu else {}
    code = apply_shape_overrides(skill.example.before, base) if base else skill.example.before
    try:
        proposed = variants_fn(code, cfg.admission_shape_variants, seed) or []
    except Exception:  # noqa: BLE001 - a variant generator bug must not stop admission of the batch
        proposed = []
    out = []
    for variant in proposed:
        merged = {**base, **{str(k): int(v) for k, v in dict(variant).items()}}
        pairs = tuple(sorted(merged.items()))
        if merged != base and pairs not in out:
            out.append(pairs)
    return out[: cfg.admission_shape_variants]


def plan_checks(skill: Skill, cases: Sequence[TransferCase], cfg: SkillsConfig, gpu: bool, variants_fn: ShapeVariantsFn) -> list[PlannedCheck]:
    problem, candidate = example_problem(skill)
    base = () if gpu else tuple(sorted(skill.example.cpu_overrides.items()))
    seed0 = cfg.admission_seed + sum(map(ord, skill.id)) % 997 * 31
    plan = [PlannedCheck("rerun", problem, candidate, seed0 + i, base, True) for i in range(max(1, cfg.admission_reruns))]
    for j, shape in enumerate(_shape_variants(skill, cfg, gpu, variants_fn, seed0)):
        plan.append(PlannedCheck("shape", problem, candidate, seed0 + 100 + j, shape, False))
    for j, case in enumerate(transfer_cases(skill, cases)[: cfg.max_transfer_cases]):
        plan.append(PlannedCheck("transfer", case.problem, case.candidate, seed0 + 200 + j, (), True))
    return plan


def transfer_cases(skill: Skill, cases: Sequence[TransferCase]) -> list[TransferCase]:
    """Cases that used `skill` on a problem other than the one it came from (most recent first)."""
    origin = skill.provenance.problem_id
    return [c for c in reversed(cases) if skill.id in c.skill_ids and c.problem.id != origin]


# --- running ------------------------------------------------------------------------------------


def _ci(result: Any) -> tuple[float | None, float | None]:
    ci = getattr(result, "speedup_ci", None)
    if ci is None:
        return None, None
    if isinstance(ci, Mapping):
        return ci.get("low"), ci.get("high")
    low, high = (getattr(ci, "low", None), getattr(ci, "high", None)) if hasattr(ci, "low") else tuple(ci)[:2]
    return (None if low is None else float(low), None if high is None else float(high))


def _judge(check: PlannedCheck, result: Any, bar: float) -> CheckRecord:
    correct = bool(getattr(result, "correct", False))
    flags = tuple(str(f) for f in (getattr(result, "flags", ()) or ()))
    speedup = getattr(result, "speedup", None)
    low, high = _ci(result) if check.timed else (None, None)
    notes = []
    if not correct:
        notes.append(f"incorrect ({getattr(result, 'error_kind', '') or 'mismatch'})")
    if flags:
        notes.append(f"hack flags: {', '.join(flags)}")
    timing_ok = not check.timed or bar <= 0 or (low is not None and low > bar)
    if correct and not flags and not timing_ok:
        notes.append(f"speedup CI lower bound {low if low is None else round(low, 3)} does not clear the bar {bar}")
    return CheckRecord(
        kind=check.kind,
        problem_id=check.problem.id,
        passed=correct and not flags and timing_ok,
        correct=correct,
        seed=check.seed,
        shape_overrides=check.overrides,
        timed=check.timed,
        speedup=None if speedup is None or not check.timed else float(speedup),
        ci_low=low,
        ci_high=high,
        flags=flags,
        device=str(getattr(result, "device", "") or ""),
        timing_label=str(getattr(result, "timing_label", "") or ""),
        error=str(getattr(result, "error", "") or "")[:500],
        note="; ".join(notes),
    )


def _run_one(check: PlannedCheck, gym: Any, evaluate_fn: EvaluateFn, bar: float, deadline: float | None) -> CheckRecord:
    if deadline is not None and time.monotonic() > deadline:
        return CheckRecord(check.kind, check.problem.id, False, False, check.seed, check.overrides, check.timed, note="not run: time budget spent")
    config = with_config_fields(gym, measure_performance=check.timed, baselines=("eager",))
    try:
        result = evaluate_fn(check.problem, check.candidate, config, seed=check.seed, shape_overrides=dict(check.overrides) or None)
    except Exception as exc:  # noqa: BLE001 - the contract says evaluate never raises; if it does, it is a failed check
        return CheckRecord(check.kind, check.problem.id, False, False, check.seed, check.overrides, check.timed, error=f"evaluator raised {type(exc).__name__}: {exc}"[:500], note="evaluator error")
    return _judge(check, result, bar)


def run_checks(checks: Sequence[PlannedCheck], gym: Any, evaluate_fn: EvaluateFn, bar: float, workers: int, deadline: float | None = None, progress: bool = False) -> list[CheckRecord]:
    """Run `checks` with `workers` threads (each evaluator call runs its own process); same order out."""
    if not checks:
        return []
    bar_iter = None
    if progress:
        from tqdm import tqdm

        bar_iter = tqdm(total=len(checks), desc="admission checks", leave=False)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(_run_one, c, gym, evaluate_fn, bar, deadline) for c in checks]
        out = []
        for f in futures:
            out.append(f.result())
            if bar_iter is not None:
                bar_iter.update(1)
    if bar_iter is not None:
        bar_iter.close()
    return out


# --- deciding -----------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _environment(records: Sequence[CheckRecord]) -> tuple[tuple[str, str], ...]:
    device = next((r.device for r in records if r.device), "")
    label = next((r.timing_label for r in records if r.timing_label), "")
    return (("device", device), ("timing_label", label), ("torch", _version("torch")), ("triton", _version("triton")))


def _config_pairs(cfg: SkillsConfig, gpu: bool) -> tuple[tuple[str, str], ...]:
    keys = ("min_speedup_lower", "admission_reruns", "admission_shape_variants", "min_transfer_cases", "duplicate_threshold")
    return tuple((k, str(getattr(cfg, k))) for k in keys) + (("on_gpu", str(gpu)),)


def measurements_of(records: Sequence[CheckRecord], env: Mapping[str, str]) -> tuple[Measurement, ...]:
    """Measurements from the timed, correct checks (the effect the evidence backs)."""
    return tuple(
        Measurement(r.problem_id, r.speedup, r.ci_low, r.ci_high, r.device, r.timing_label, env.get("torch", ""), env.get("triton", ""), r.shape_overrides, r.seed)
        for r in records
        if r.timed and r.correct and r.speedup is not None
    )


def _gate_reasons(records: Sequence[CheckRecord], cfg: SkillsConfig, n_transfer: int) -> tuple[list[str], bool]:
    """Failure reasons (empty = passed) and whether the only failure is missing transfer evidence."""
    reasons = [f"{r.kind} check on {r.problem_id} (seed {r.seed}, shapes {dict(r.shape_overrides) or 'default'}): {r.note or r.error or 'failed'}" for r in records if not r.passed]
    pending = False
    if n_transfer < cfg.min_transfer_cases:
        pending = not reasons
        reasons.append(f"needs {cfg.min_transfer_cases} transfer case(s) on other problems, has {n_transfer}")
    return reasons, pending


def _evidence(decision: str, reasons: Sequence[str], records: Sequence[CheckRecord], cfg: SkillsConfig, gpu: bool) -> EvidenceRecord:
    timed = [r for r in records if r.timed and r.ci_low is not None]
    stats = (("n_checks", float(len(records))), ("n_passed", float(sum(r.passed for r in records))))
    if timed:
        stats += (("min_ci_low", min(r.ci_low for r in timed)),)  # type: ignore[type-var]
    if not gpu:
        reasons = list(reasons) + ["timings were taken on the CPU (Triton interpreter): speedup not meaningful; correctness and reproducibility checked"]
    return EvidenceRecord("admission", decision, tuple(reasons), tuple(records), _now(), _environment(records), _config_pairs(cfg, gpu), stats)


def _verdict(skill: Skill, records: list[CheckRecord], cases: Sequence[TransferCase], cfg: SkillsConfig, gpu: bool) -> AdmissionDecision:
    """Admit-or-reject on the checks alone (near-duplicates are resolved afterwards)."""
    n_transfer = len(transfer_cases(skill, cases)[: cfg.max_transfer_cases])
    reasons, pending = _gate_reasons(records, cfg, n_transfer)
    env = dict(_environment(records))
    if reasons:
        evidence = _evidence("rejected", reasons, records, cfg, gpu)
        return AdmissionDecision(skill.id, "rejected", skill.with_status("candidate", evidence), tuple(reasons), evidence, (), pending)
    ok = [f"{len(records)} checks passed ({sum(r.kind == 'rerun' for r in records)} reruns, {sum(r.kind == 'shape' for r in records)} unseen shapes, {n_transfer} transfer)"]
    evidence = _evidence("admitted", ok, records, cfg, gpu)
    effect = replace(skill.effect, measurements=skill.effect.measurements + measurements_of(records, env))
    return AdmissionDecision(skill.id, "admitted", replace(skill, effect=effect).with_status("admitted", evidence), tuple(ok), evidence)


def _resolve_duplicate(decision: AdmissionDecision, pool: dict[str, Skill], cfg: SkillsConfig) -> AdmissionDecision:
    """Merge an admitted candidate into a better near-duplicate, or supersede a worse one."""
    cand = decision.skill
    dupes = near_duplicates(cand, [s for s in pool.values() if s.status == "admitted"], cfg.duplicate_threshold)
    if not dupes:
        return decision
    other, sim = dupes[0]
    if is_better(cand, other):
        why = f"supersedes near-duplicate {other.id} (similarity {sim:.2f}; CI lower {cand.effect.best_lower:.3f} > {other.effect.best_lower:.3f})"
        retired_ev = EvidenceRecord("retirement", f"superseded by {cand.id}", (why,), (), _now(), stats=(("similarity", sim),))
        merged = merge_skills(cand, other, reason=why)
        return replace(decision, skill=merged, reasons=decision.reasons + (why,), updated=(other.with_status("retired", retired_ev),))
    why = f"near-duplicate of admitted {other.id} (similarity {sim:.2f}) whose evidence is at least as strong; merged into it"
    evidence = replace(decision.evidence, decision=f"merged into {other.id}", reasons=decision.evidence.reasons + (why,))
    rejected = replace(decision.skill, status="candidate", evidence=decision.skill.evidence[:-1] + (evidence,))
    keeper = merge_skills(other, rejected, reason=why)
    return AdmissionDecision(cand.id, "merged", rejected, decision.reasons + (why,), evidence, (keeper,))


def admit(
    candidates: Sequence[Skill],
    library: Any,
    problems: Sequence[TransferCase],
    gym_config: Any,
    skills_config: SkillsConfig,
    *,
    evaluate_fn: EvaluateFn | None = None,
    shape_variants_fn: ShapeVariantsFn | None = None,
    progress: bool = False,
    deadline: float | None = None,
) -> list[AdmissionDecision]:
    """Decide every candidate (same order as `candidates`). `library` is a `LibraryVersion` or skills.

    `evaluate_fn` / `shape_variants_fn` default to `davinci.kernelgym.evaluate` / `.shape_variants`.
    `deadline` (a `time.monotonic()` value) stops starting new checks; unrun checks fail the candidate.
    """
    evaluate_fn = evaluate_fn or _default_evaluate()
    shape_variants_fn = shape_variants_fn or _default_shape_variants()
    cfg, gpu, bar = skills_config, on_gpu(gym_config), skills_config.min_speedup_lower
    plans = [plan_checks(c, problems, cfg, gpu, shape_variants_fn) for c in candidates]
    untimed = [(i, chk) for i, plan in enumerate(plans) for chk in plan if not chk.timed]
    results: dict[int, list[CheckRecord]] = {i: [] for i in range(len(candidates))}
    for (i, _), rec in zip(untimed, run_checks([c for _, c in untimed], gym_config, evaluate_fn, bar, cfg.admission_workers, deadline, progress)):
        results[i].append(rec)
    survivors = {i for i in results if all(r.passed for r in results[i])}
    timed = [(i, chk) for i, plan in enumerate(plans) for chk in plan if chk.timed and i in survivors]
    for (i, _), rec in zip(timed, run_checks([c for _, c in timed], gym_config, evaluate_fn, bar, cfg.admission_timed_workers, deadline, progress)):
        results[i].append(rec)
    verdicts = [_verdict(c, results[i], problems, cfg, gpu) for i, c in enumerate(candidates)]
    return _resolve_all(verdicts, library, cfg)


def _resolve_all(verdicts: list[AdmissionDecision], library: Any, cfg: SkillsConfig) -> list[AdmissionDecision]:
    """Resolve near-duplicates, strongest admitted candidates first, against the evolving library."""
    skills = library.skills if hasattr(library, "skills") else tuple(library)
    pool = {s.id: s for s in skills}
    order = sorted(range(len(verdicts)), key=lambda i: -verdicts[i].skill.effect.best_lower)
    out = list(verdicts)
    for i in order:
        if not verdicts[i].admitted:
            continue
        decision = _resolve_duplicate(verdicts[i], pool, cfg)
        out[i] = decision
        for changed in decision.updated:
            pool[changed.id] = changed
        if decision.admitted:
            pool[decision.skill.id] = decision.skill
    return out


def apply_decisions(skills: Sequence[Skill], decisions: Sequence[AdmissionDecision], *, keep_rejected: bool = False) -> list[Skill]:
    """The next library content: `skills` with admitted candidates added, changed skills replaced,
    and pending candidates kept (rejected ones too with `keep_rejected`). Order: library order, then new."""
    current = {s.id: s for s in skills}
    for d in decisions:
        for changed in d.updated:
            current[changed.id] = changed
        if d.admitted or d.pending or keep_rejected:
            current[d.skill.id] = d.skill
    return list(current.values())
