"""Paired comparison of two checkpoints on the same held-out problems: SFT (before RL) vs RL (after).

What it computes (`compare_records(before, after)`): per problem whether each checkpoint's best turn was
correct (and fast_1: correct and faster than eager, strict `>` as KernelBench), the two means, their
difference and a paired percentile-bootstrap 95% CI of the difference (`paired_bootstrap_ci`: the problem's
pair is the unit of resampling, since both checkpoints saw the same problems).

Choices:
- Pairs are matched by problem id; the two record lists must cover the same problems (anything else is
  not a paired comparison and raises).
- fast_1 is compared only where timing means something: a GPU timing label (`cuda`) on some record. On the
  CPU the Triton interpreter is orders of magnitude slower than eager, so fast_1 is 0 by construction there
  and reporting its "difference" would only look like a result.
- The bootstrap is seeded: the same records always give the same CI.

    comparison = compare_records(sft_records, rl_records, seed=0)
    print(format_comparison(comparison))
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from davinci.agents.evaluation import paired_bootstrap_ci

GPU_TIMING = "cuda"


@dataclass(frozen=True)
class PairedScore:
    """One metric of both checkpoints over the same problems, with the CI of after - before."""

    metric: str  # "correct" or "fast_1"
    n: int
    before: float
    after: float
    diff: float
    ci95_low: float
    ci95_high: float


@dataclass(frozen=True)
class ProblemPair:
    """One held-out problem's outcome under each checkpoint."""

    problem_id: str
    name: str
    before_correct: bool
    after_correct: bool
    before_fast_1: bool
    after_fast_1: bool


@dataclass(frozen=True)
class CheckpointComparison:
    before_label: str
    after_label: str
    timing_label: str
    scores: tuple[PairedScore, ...]
    problems: tuple[ProblemPair, ...]

    def score(self, metric: str) -> PairedScore | None:
        return next((s for s in self.scores if s.metric == metric), None)

    def metrics(self, prefix: str = "heldout/") -> dict[str, float]:
        """Flat metrics for MLflow: `heldout/<metric>_<label>`, `heldout/<metric>_diff`, CI bounds, n."""
        out: dict[str, float] = {}
        for s in self.scores:
            out[f"{prefix}{s.metric}_{self.before_label}"] = s.before
            out[f"{prefix}{s.metric}_{self.after_label}"] = s.after
            out[f"{prefix}{s.metric}_diff"] = s.diff
            out[f"{prefix}{s.metric}_diff_ci95_low"] = s.ci95_low
            out[f"{prefix}{s.metric}_diff_ci95_high"] = s.ci95_high
        out[f"{prefix}n"] = float(len(self.problems))
        return out

    def rows(self) -> list[dict[str, Any]]:
        """The per-problem table (one row per held-out problem)."""
        return [asdict(p) for p in self.problems]

    def to_dict(self) -> dict[str, Any]:
        return {"before_label": self.before_label, "after_label": self.after_label, "timing_label": self.timing_label,
                "scores": [asdict(s) for s in self.scores], "problems": self.rows()}


def fast_1(record: Mapping[str, Any]) -> bool:
    """Correct and strictly faster than eager (KernelBench's fast_1 for one problem).

    >>> fast_1({"correct": True, "speedup": 1.2}), fast_1({"correct": True, "speedup": 1.0}), fast_1({"correct": False, "speedup": 3.0})
    (True, False, False)
    """
    speedup = record["speedup"]
    return bool(record["correct"]) and speedup is not None and speedup > 1.0


def paired_score(metric: str, before: Sequence[bool], after: Sequence[bool], *, seed: int = 0,
                 n_boot: int = 10_000) -> PairedScore:
    """Means of two paired 0/1 lists and the bootstrap CI of their difference.

    >>> paired_score("correct", [False, False], [True, True])
    PairedScore(metric='correct', n=2, before=0.0, after=1.0, diff=1.0, ci95_low=1.0, ci95_high=1.0)
    """
    b, a = [float(x) for x in before], [float(x) for x in after]
    diff, lo, hi = paired_bootstrap_ci(b, a, n_boot=n_boot, seed=seed)
    return PairedScore(metric, len(b), sum(b) / len(b), sum(a) / len(a), diff, lo, hi)


def _timing_label(records: Sequence[Mapping[str, Any]]) -> str:
    labels = {r["timing_label"] for r in records if r["timing_label"]}
    return GPU_TIMING if GPU_TIMING in labels else (sorted(labels)[0] if labels else "none")


def compare_records(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], *,
                    before_label: str = "sft", after_label: str = "rl", seed: int = 0,
                    n_boot: int = 10_000) -> CheckpointComparison:
    """Pair the eval records (`evaluation.problem_record` rows) of two checkpoints by problem id and compare."""
    by_id = {r["problem_id"]: r for r in after}
    if len(by_id) != len(after) or {r["problem_id"] for r in before} != set(by_id) or not before:
        raise ValueError(f"a paired comparison needs the same non-empty problems on both sides "
                         f"({len(before)} {before_label} records, {len(after)} {after_label} records)")
    pairs = tuple(ProblemPair(b["problem_id"], b["name"], bool(b["correct"]), bool(by_id[b["problem_id"]]["correct"]),
                              fast_1(b), fast_1(by_id[b["problem_id"]])) for b in before)
    timing = _timing_label([*before, *after])
    scores = [paired_score("correct", [p.before_correct for p in pairs], [p.after_correct for p in pairs],
                           seed=seed, n_boot=n_boot)]
    if timing == GPU_TIMING:
        scores.append(paired_score("fast_1", [p.before_fast_1 for p in pairs], [p.after_fast_1 for p in pairs],
                                   seed=seed, n_boot=n_boot))
    return CheckpointComparison(before_label, after_label, timing, tuple(scores), pairs)


def format_comparison(c: CheckpointComparison) -> str:
    """A markdown table: one row per metric, both checkpoints, the difference and its 95% CI."""
    lines = [f"## held-out: {c.before_label.upper()} vs {c.after_label.upper()} (same {len(c.problems)} problems, paired)",
             "", f"| metric | {c.before_label} | {c.after_label} | {c.after_label} - {c.before_label} | 95% CI (paired bootstrap) |",
             "|---|---|---|---|---|"]
    for s in c.scores:
        lines.append(f"| {s.metric} | {s.before:.3f} ({round(s.before * s.n)}/{s.n}) | {s.after:.3f} ({round(s.after * s.n)}/{s.n}) "
                     f"| {s.diff:+.3f} | [{s.ci95_low:+.3f}, {s.ci95_high:+.3f}] |")
    if c.score("fast_1") is None:
        lines += ["", f"fast_1 not compared: timings are `{c.timing_label}` (the CPU's Triton interpreter is never "
                      "faster than eager), so correctness is the held-out score here."]
    return "\n".join(lines) + "\n"


__all__ = ["PairedScore", "ProblemPair", "CheckpointComparison", "compare_records", "paired_score", "fast_1",
           "format_comparison"]
