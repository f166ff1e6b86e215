"""The verdict of one evaluation: `EvalResult` (frozen, JSON-safe), with its timing statistics.

Every failure is a field, never an exception: `error_kind` says which stage stopped the evaluation and
`error` says why. `correct` is true only when every correctness trial passed AND no hack check flagged
the candidate (`flags` non-empty => `correct` False, `error_kind` "hack"); `numerics_ok` keeps the
numerical verdict alone so a reward can tell "right answer, flagged" from "wrong answer".

    r = evaluate(problem, candidate, GymConfig())
    r.correct, r.speedup, r.speedup_ci, r.flags, r.feedback
    EvalResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

ErrorKind = Literal[
    "compile",     # import of the candidate or ModelNew(...) failed, or the build timed out
    "runtime",     # forward raised (CUDA errors included)
    "timeout",     # the run phase exceeded its wall-clock limit
    "crash",       # the candidate process died (segfault, exit, kill, illegal memory access)
    "mismatch",    # wrong output (value, shape, dtype, type) in a correctness trial
    "needs_gpu",   # a CUDA candidate or device="cuda" without a visible GPU
    "hack",        # a hack check flagged the candidate (see `flags`)
    "reference",   # the problem itself failed (reference raised, bad shape override)
    "internal",    # the evaluator failed; the candidate is not to blame
]
TimingLabel = Literal["cuda", "cpu"]
ERROR_KINDS: tuple[str, ...] = ErrorKind.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TimingStats:
    """Per-call times of one program in ms: median with a bootstrap 95% CI, plus the usual moments.

    `host_median_ms` is the host-clock median of the same calls (device-wide sync inside), the cross-check
    of the device events; `label` says whether the numbers are GPU ("cuda") or CPU timings.
    """

    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    trials: int
    host_median_ms: float | None = None
    label: TimingLabel = "cpu"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TimingStats":
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass(frozen=True)
class EvalResult:
    problem_id: str
    candidate_hash: str
    backend: str                      # detected from the source: "triton", "cuda" or "torch" (no kernel)
    compiled: bool
    correct: bool
    numerics_ok: bool                 # every correctness trial passed (before hack flags)
    flags: tuple[str, ...]            # named hack detections; non-empty => correct is False
    error_kind: ErrorKind | None
    error: str
    feedback: str                     # concise text for the policy's next turn
    device: str                       # e.g. "NVIDIA H100 80GB HBM3" or "cpu"
    timing_label: TimingLabel
    level: int = 0
    flag_reasons: dict[str, str] = field(default_factory=dict)
    trials_passed: int = 0
    trials_run: int = 0
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    runtime: TimingStats | None = None
    baselines: dict[str, TimingStats] = field(default_factory=dict)
    speedup: float | None = None                      # eager median / candidate median
    speedup_ci: tuple[float, float] | None = None     # bootstrap 95% CI of the ratio of medians
    speedup_compile: float | None = None
    speedup_compile_ci: tuple[float, float] | None = None
    sol_percent: float | None = None                  # 100 * speed-of-light time / candidate median
    kernel_coverage: float | None = None              # share of device time spent in the candidate's kernels
    kernels_launched: tuple[str, ...] = ()
    seed: int | None = None
    shape_overrides: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def speedups(self) -> dict[str, float | None]:
        return {"eager": self.speedup, "compile": self.speedup_compile}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flags"] = list(self.flags)
        d["kernels_launched"] = list(self.kernels_launched)
        d["speedup_ci"] = list(self.speedup_ci) if self.speedup_ci else None
        d["speedup_compile_ci"] = list(self.speedup_compile_ci) if self.speedup_compile_ci else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalResult":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["flags"] = tuple(d.get("flags", ()))
        kw["kernels_launched"] = tuple(d.get("kernels_launched", ()))
        for key in ("speedup_ci", "speedup_compile_ci"):
            kw[key] = tuple(d[key]) if d.get(key) else None
        kw["runtime"] = TimingStats.from_dict(d["runtime"]) if d.get("runtime") else None
        kw["baselines"] = {k: TimingStats.from_dict(v) for k, v in (d.get("baselines") or {}).items()}
        return cls(**kw)
