"""The skill schema: one reusable kernel-optimization technique with its example, evidence and usage.

A `Skill` is a frozen tree of plain data (strings, numbers, tuples of records) so it crosses process
boundaries, JSON files and MLflow artifacts unchanged. Choices:

- Construction validates (`validate_skill`) and raises `MalformedInput` listing every problem; the
  parser of model output (`parse.parse_skill_json`) turns that into a `SkillRejection` instead.
- The example is runnable KernelBench format: `before` is a reference problem (`Model`, `get_inputs`,
  `get_init_inputs`, module-level int size constants sized for GPU timing), `after` is a `ModelNew`
  solution that uses the skill. `cpu_shapes` overrides the size constants with small values so the
  example also runs under the Triton interpreter on a CPU.
- Effect and evidence are data: `Measurement`s (speedup with CI, device, versions) and
  `EvidenceRecord`s (every admission / retirement / merge decision with its checks), never prose only.
- `to_dict` / `from_dict` round-trip exactly (`Skill.from_dict(s.to_dict()) == s`).

    skill = Skill.from_dict(json.loads(text))
    print(skill.effect.best_lower, skill.status)
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import lru_cache
from typing import Any, Literal, Mapping, get_args

from davinci.errors import MalformedInput

SkillStatus = Literal["candidate", "admitted", "retired"]
SkillBackend = Literal["triton", "cuda"]
ProvenanceKind = Literal["seed", "summary", "merge", "lineage"]
EvidenceKind = Literal["admission", "retirement", "merge", "usage"]
CheckKind = Literal["rerun", "shape", "transfer"]

STATUSES: tuple[str, ...] = get_args(SkillStatus)
BACKENDS: tuple[str, ...] = get_args(SkillBackend)
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{2,79}$")

# Size limits keep one hostile summary from bloating every prompt that retrieves it.
MAX_TITLE = 160
MAX_TEXT = 4000
MAX_GUIDANCE = 12000
MAX_CODE = 40000
MAX_LIST = 40


def _tuple_of_str(values: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in (values or ()))


@dataclass(frozen=True)
class AppliesTo:
    """Where the skill applies: operator names (`gelu`, `softmax`, `linear`) and patterns (`epilogue`)."""

    ops: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Preconditions:
    """When the skill is valid: dtypes, shape constraints, memory layout, hardware (free text each)."""

    dtypes: tuple[str, ...] = ()
    shapes: str = ""
    layout: str = ""
    hardware: str = ""


@dataclass(frozen=True)
class Example:
    """Runnable before/after pair in KernelBench format plus small CPU sizes for the interpreter."""

    before: str
    after: str
    cpu_shapes: tuple[tuple[str, int], ...] = ()

    @property
    def cpu_overrides(self) -> dict[str, int]:
        return dict(self.cpu_shapes)

    @property
    def content_hash(self) -> str:
        text = json.dumps([self.before, self.after, list(self.cpu_shapes)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Measurement:
    """One measured speedup (vs eager) of a solution on one problem: the CI and where it was taken."""

    problem_id: str
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    device: str = ""
    timing_label: str = ""
    torch_version: str = ""
    triton_version: str = ""
    shape_overrides: tuple[tuple[str, int], ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class Effect:
    """Claimed effect (free text + number, from the author) and the measurements that back it."""

    summary: str = ""
    claimed_speedup: float | None = None
    measurements: tuple[Measurement, ...] = ()

    @property
    def best_lower(self) -> float:
        """Conservative strength: the smallest CI lower bound over GPU measurements (0 when none)."""
        lows = [m.ci_low for m in self.measurements if m.timing_label == "cuda" and m.ci_low is not None]
        return min(lows) if lows else 0.0

    @property
    def median_speedup(self) -> float | None:
        vals = sorted(m.speedup for m in self.measurements if m.timing_label == "cuda" and m.speedup is not None)
        return vals[len(vals) // 2] if vals else None


@dataclass(frozen=True)
class SkillProvenance:
    """Where a skill came from: written by the project (seed), summarized from an episode, merged, or derived by
    lineage (the reverse of a simplification of an expert kernel, `skills.lineage`)."""

    kind: ProvenanceKind = "seed"
    episode_id: str = ""
    epoch: int = -1
    problem_id: str = ""
    author: str = ""


@dataclass(frozen=True)
class UsageStats:
    """How the skill did when used. `*_without` counts episodes where it was retrieved but not selected.

    Sums of rewards and squared rewards give means and variances without keeping every sample.
    """

    times_selected: int = 0
    times_succeeded: int = 0
    reward_sum: float = 0.0
    reward_sq_sum: float = 0.0
    times_without: int = 0
    reward_sum_without: float = 0.0
    reward_sq_sum_without: float = 0.0

    @property
    def success_rate(self) -> float | None:
        return self.times_succeeded / self.times_selected if self.times_selected else None

    @property
    def mean_with(self) -> float | None:
        return self.reward_sum / self.times_selected if self.times_selected else None

    @property
    def mean_without(self) -> float | None:
        return self.reward_sum_without / self.times_without if self.times_without else None

    def var_with(self) -> float:
        return _variance(self.reward_sum, self.reward_sq_sum, self.times_selected)

    def var_without(self) -> float:
        return _variance(self.reward_sum_without, self.reward_sq_sum_without, self.times_without)


def _variance(total: float, sq_total: float, n: int) -> float:
    """Unbiased sample variance from sums (0 for n < 2; clamped at 0 against rounding)."""
    if n < 2:
        return 0.0
    return max(0.0, (sq_total - total * total / n) / (n - 1))


@dataclass(frozen=True)
class CheckRecord:
    """One evaluator run made to decide admission: what ran, what came back, and whether it passed."""

    kind: CheckKind
    problem_id: str
    passed: bool
    correct: bool
    seed: int | None = None
    shape_overrides: tuple[tuple[str, int], ...] = ()
    timed: bool = True
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    flags: tuple[str, ...] = ()
    device: str = ""
    timing_label: str = ""
    error: str = ""
    note: str = ""


@dataclass(frozen=True)
class EvidenceRecord:
    """A decision about the skill with everything it rested on (kept with the skill forever)."""

    kind: EvidenceKind
    decision: str
    reasons: tuple[str, ...] = ()
    checks: tuple[CheckRecord, ...] = ()
    created_at: str = ""
    environment: tuple[tuple[str, str], ...] = ()
    config: tuple[tuple[str, str], ...] = ()
    stats: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Skill:
    """One skill. Invalid content raises `MalformedInput` naming every problem (see `validate_skill`)."""

    id: str
    title: str
    intent: str
    applies_to: AppliesTo
    preconditions: Preconditions
    guidance: str
    backend: SkillBackend
    example: Example
    effect: Effect = field(default_factory=Effect)
    failure_modes: tuple[str, ...] = ()
    provenance: SkillProvenance = field(default_factory=SkillProvenance)
    status: SkillStatus = "candidate"
    usage: UsageStats = field(default_factory=UsageStats)
    evidence: tuple[EvidenceRecord, ...] = ()

    def __post_init__(self) -> None:
        problems = validate_skill(self)
        if problems:
            raise MalformedInput(
                f"invalid skill {self.id!r}: " + "; ".join(problems),
                "fix the listed fields (see davinci/skills/schema.py for the schema)",
            )

    @property
    def content_hash(self) -> str:
        """Hash of the whole skill (text, example, evidence, usage): store identity and idempotency."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def with_status(self, status: SkillStatus, evidence: EvidenceRecord | None = None) -> "Skill":
        extra = (evidence,) if evidence is not None else ()
        return replace(self, status=status, evidence=self.evidence + extra)

    def to_dict(self) -> dict[str, Any]:
        return _to_jsonable(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Skill":
        """Inverse of `to_dict`. Wrong shapes raise `MalformedInput` naming the field."""
        try:
            return _skill_from_dict(d)
        except MalformedInput:
            raise
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise MalformedInput(
                f"skill record is malformed: {type(exc).__name__}: {exc}",
                "the record must come from Skill.to_dict(); re-export it or fix the field named above",
            ) from None


# --- (de)serialization -------------------------------------------------------------------------


_PAIR_FIELDS = {"cpu_shapes", "shape_overrides", "environment", "config", "stats"}


def _to_jsonable(value: Any) -> Any:
    """Records -> JSON-safe dicts: tuples become lists, pair fields become dicts, non-finite floats None."""
    if is_dataclass(value):
        out = {}
        for f in fields(value):
            item = getattr(value, f.name)
            out[f.name] = {k: _to_jsonable(v) for k, v in item} if f.name in _PAIR_FIELDS else _to_jsonable(item)
        return out
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _pairs(value: Any, cast: type) -> tuple[tuple[str, Any], ...]:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((str(k), cast(v)) for k, v in items)


def _record(cls: type, d: Mapping[str, Any], nested: Mapping[str, Any] | None = None) -> Any:
    """Build a flat record dataclass from a dict: lists -> tuples, pair fields -> sorted-as-given pairs."""
    nested = nested or {}
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in d:
            continue
        value = d[f.name]
        if f.name in nested:
            value = nested[f.name](value)
        elif f.name in _PAIR_FIELDS:
            cast = {"cpu_shapes": int, "shape_overrides": int, "stats": float}.get(f.name, str)
            value = _pairs(value, cast)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def _evidence_from(d: Mapping[str, Any]) -> EvidenceRecord:
    checks = lambda xs: tuple(_record(CheckRecord, c) for c in (xs or ()))  # noqa: E731
    return _record(EvidenceRecord, d, {"checks": checks})


def _skill_from_dict(d: Mapping[str, Any]) -> Skill:
    effect = d.get("effect") or {}
    measurements = tuple(_record(Measurement, m) for m in effect.get("measurements") or ())
    return Skill(
        id=d["id"],
        title=d["title"],
        intent=d["intent"],
        applies_to=_record(AppliesTo, d.get("applies_to") or {}),
        preconditions=_record(Preconditions, d.get("preconditions") or {}),
        guidance=d["guidance"],
        backend=d["backend"],
        example=_record(Example, d["example"]),
        effect=Effect(effect.get("summary", ""), effect.get("claimed_speedup"), measurements),
        failure_modes=_tuple_of_str(d.get("failure_modes")),
        provenance=_record(SkillProvenance, d.get("provenance") or {}),
        status=d.get("status", "candidate"),
        usage=_record(UsageStats, d.get("usage") or {}),
        evidence=tuple(_evidence_from(e) for e in d.get("evidence") or ()),
    )


# --- validation --------------------------------------------------------------------------------


@lru_cache(maxsize=512)
def _defines(code: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """Names from `names` that `code` does not define at module level (or a syntax error message).

    Memoized: the same example source is validated on every `replace()` of its skill.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as exc:
        return (f"syntax error: {exc}",)
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return tuple(f"missing {name}" for name in names if name not in defined)


def _text_problems(skill: Skill) -> list[str]:
    out = []
    checks = (("title", skill.title, MAX_TITLE), ("intent", skill.intent, MAX_TEXT), ("guidance", skill.guidance, MAX_GUIDANCE))
    for name, value, limit in checks:
        if not isinstance(value, str) or not value.strip():
            out.append(f"{name} must be a non-empty string")
        elif len(value) > limit:
            out.append(f"{name} is {len(value)} chars (limit {limit})")
    return out


def _list_problems(skill: Skill) -> list[str]:
    out = []
    lists = {
        "applies_to.ops": skill.applies_to.ops,
        "applies_to.patterns": skill.applies_to.patterns,
        "preconditions.dtypes": skill.preconditions.dtypes,
        "failure_modes": skill.failure_modes,
    }
    for name, values in lists.items():
        if not isinstance(values, tuple) or not all(isinstance(v, str) and v.strip() for v in values):
            out.append(f"{name} must be a list of non-empty strings")
        elif len(values) > MAX_LIST or any(len(v) > MAX_TEXT for v in values):
            out.append(f"{name} is too long (at most {MAX_LIST} items of {MAX_TEXT} chars)")
    if isinstance(skill.applies_to.ops, tuple) and not skill.applies_to.ops:
        out.append("applies_to.ops must name at least one operator")
    return out


def _example_problems(example: Example) -> list[str]:
    if not isinstance(example, Example):
        return ["example must be an Example"]
    out = []
    for name, code, required in (("before", example.before, ("Model", "get_inputs", "get_init_inputs")), ("after", example.after, ("ModelNew",))):
        if not isinstance(code, str) or not code.strip():
            out.append(f"example.{name} must be non-empty source code")
        elif len(code) > MAX_CODE:
            out.append(f"example.{name} is {len(code)} chars (limit {MAX_CODE})")
        else:
            out.extend(f"example.{name}: {p}" for p in _defines(code, required))
    if not all(isinstance(k, str) and isinstance(v, int) and v > 0 for k, v in example.cpu_shapes):
        out.append("example.cpu_shapes must map constant names to positive ints")
    return out


def validate_skill(skill: Skill) -> list[str]:
    """Every problem with `skill` as a short phrase (empty list = valid)."""
    out = []
    if not isinstance(skill.id, str) or not ID_PATTERN.match(skill.id):
        out.append(f"id {skill.id!r} must match {ID_PATTERN.pattern} (lowercase slug)")
    out.extend(_text_problems(skill))
    if skill.backend not in BACKENDS:
        out.append(f"backend {skill.backend!r} must be one of {', '.join(BACKENDS)}")
    if skill.status not in STATUSES:
        out.append(f"status {skill.status!r} must be one of {', '.join(STATUSES)}")
    out.extend(_list_problems(skill))
    out.extend(_example_problems(skill.example))
    return out


def slugify(text: str, suffix: str = "") -> str:
    """`"Fuse GELU + bias!"` -> `"fuse-gelu-bias"`; a suffix (e.g. a short hash) keeps ids unique."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60].strip("-") or "skill"
    slug = slug if len(slug) >= 3 else f"skill-{slug}"
    return f"{slug}-{suffix}" if suffix else slug


def record_to_dict(record: Any) -> dict[str, Any]:
    """JSON-safe dict of any schema record (`EvidenceRecord`, `Measurement`, ...)."""
    return _to_jsonable(record)


def evidence_from_dict(d: Mapping[str, Any]) -> EvidenceRecord:
    return _evidence_from(d)


def measurement_from_dict(d: Mapping[str, Any]) -> Measurement:
    return _record(Measurement, d)
