"""Hack checks: named static (AST) and runtime (evidence) checks, and the presets that select them.

    names = resolve_checks("strict")              # or "default", "runtime", "none", or "streams,decoy_kernel"
    static_findings(names, candidate_code, problem_code, backend_info) -> list[Finding]
    runtime_findings(names, evidence) -> list[Finding]

An unknown preset or check name raises `davinci.errors.UnknownName` listing the valid ones (a typo never
silently disables a check). A finding becomes a flag on the `EvalResult`; a flagged candidate is not
correct (`error_kind="hack"`), and rewards that read `correct` give it nothing.

Presets:
- "strict":  every check (the default of GymConfig);
- "default": every check except `try_except_any` (any try/except) and `precision_downgrade` (fp16/TF32
             in an fp32 problem), which also catch some honest code;
- "runtime": runtime checks only (for torch-only candidates, e.g. calibration with the reference renamed);
- "none":    nothing (timing-fidelity benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass

from davinci.errors import UnknownName
from davinci.kernelgym.backend import BackendInfo
from davinci.kernelgym.checks.runtime import RUNTIME_CHECKS, Evidence
from davinci.kernelgym.checks.source import Source
from davinci.kernelgym.checks.static import STATIC_CHECKS, StaticContext

__all__ = ["ADVISORY", "Finding", "Evidence", "PRESETS", "resolve_checks", "static_findings", "runtime_findings", "all_check_names"]

_LENIENT = ("try_except_any", "precision_downgrade")
# Static findings that rest on names alone (an attribute called `half`, a try/except, a torch call, no
# decorator found): feedback text, never a flag. The runtime evidence decides instead: `torch_compute`
# (PyTorch computed the answer), `no_kernel_launched` (nothing custom ran), `decoy_kernel`.
ADVISORY = frozenset({"precision_downgrade", "try_except_any", "try_fallback", "torch_fallback",
                      "reference_fallback", "no_custom_kernel"})


def all_check_names() -> tuple[str, ...]:
    return STATIC_CHECKS.names() + RUNTIME_CHECKS.names()


PRESETS: dict[str, tuple[str, ...]] = {
    "strict": all_check_names(),
    "default": tuple(n for n in all_check_names() if n not in _LENIENT),
    "runtime": RUNTIME_CHECKS.names(),
    "none": (),
}


@dataclass(frozen=True)
class Finding:
    check: str
    reason: str


def resolve_checks(spec: str) -> tuple[str, ...]:
    """A preset name or a comma-separated list of check names -> the check names to run."""
    spec = spec.strip()
    if spec in PRESETS:
        return PRESETS[spec]
    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    valid = set(all_check_names())
    for name in names or (spec,):
        if name not in valid:
            raise UnknownName("hack check or preset", name, sorted(valid) + sorted(PRESETS))
    return names


def static_findings(names: tuple[str, ...], code: str, problem_code: str | None, backend: BackendInfo) -> list[Finding]:
    try:
        src = Source(code)
    except SyntaxError:
        return []  # the compile phase reports it
    try:
        problem = Source(problem_code) if problem_code else None
    except SyntaxError:
        problem = None
    ctx = StaticContext(src, problem, backend)
    out = []
    for name in names:
        if name in STATIC_CHECKS:
            reason = STATIC_CHECKS.get(name)(ctx)
            if reason:
                out.append(Finding(name, reason))
    return out


def runtime_findings(names: tuple[str, ...], evidence: Evidence) -> list[Finding]:
    out = []
    for name in names:
        if name in RUNTIME_CHECKS:
            reason = RUNTIME_CHECKS.get(name)(evidence)
            if reason:
                out.append(Finding(name, reason))
    return out
