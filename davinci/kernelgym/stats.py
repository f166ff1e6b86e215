"""Timing statistics: medians with bootstrap CIs, speedup CIs and the stop rule. Pure numpy, no torch.

- `summarize(samples)`: median, 95% bootstrap CI of the median (percentile method, 2000 resamples, seeded),
  mean/std/min/max -> `TimingStats`.
- `ratio_ci(base, cand)`: speedup = median(base) / median(cand) with a 95% CI from independent bootstrap
  resamples of both sample sets (the programs are timed in interleaved rounds, not in pairs).
- `median_ci_rel(samples)`: cheap distribution-free CI of the median from order statistics
  (ranks n/2 -+ 0.98 sqrt(n)), as a relative half-width; the stop rule uses it after every round.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

import numpy as np

from davinci.kernelgym.result import TimingLabel, TimingStats

BOOTSTRAP = 2000


def summarize(samples: Sequence[float], *, host: Sequence[float] | None = None, label: TimingLabel = "cpu",
              seed: int = 0) -> TimingStats:
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no timing samples")
    rng = np.random.default_rng(seed)
    boot = np.median(rng.choice(x, size=(BOOTSTRAP, x.size), replace=True), axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return TimingStats(
        median_ms=float(np.median(x)), ci_low_ms=float(lo), ci_high_ms=float(hi), mean_ms=float(x.mean()),
        std_ms=float(x.std(ddof=1)) if x.size > 1 else 0.0, min_ms=float(x.min()), max_ms=float(x.max()),
        trials=int(x.size), host_median_ms=float(np.median(host)) if host is not None and len(host) else None,
        label=label,
    )


def ratio_ci(base: Sequence[float], cand: Sequence[float], *, seed: int = 0) -> tuple[float, tuple[float, float]]:
    b = np.asarray(base, dtype=np.float64)
    c = np.asarray(cand, dtype=np.float64)
    rng = np.random.default_rng(seed)
    mb = np.median(rng.choice(b, size=(BOOTSTRAP, b.size), replace=True), axis=1)
    mc = np.median(rng.choice(c, size=(BOOTSTRAP, c.size), replace=True), axis=1)
    ratios = mb / np.maximum(mc, 1e-12)
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return float(np.median(b) / max(np.median(c), 1e-12)), (float(lo), float(hi))


def median_ci_rel(samples: Sequence[float]) -> float:
    """Relative half-width of a ~95% order-statistic CI of the median (inf with fewer than 3 samples)."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = x.size
    if n < 3:
        return math.inf
    half = 0.98 * math.sqrt(n)
    j = max(0, int(math.floor(n / 2 - half)))
    k = min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    med = float(np.median(x))
    return (x[k] - x[j]) / 2 / med if med > 0 else math.inf


def should_stop(samples: dict[str, list[float]], *, min_reps: int, max_reps: int, ci_rel: float,
                elapsed_s: float, max_s: float) -> bool:
    """Stop timing when every program has a tight median, or any cap (reps, time) is reached."""
    counts = [len(v) for v in samples.values()]
    if not counts:
        return True
    if min(counts) >= max_reps or elapsed_s >= max_s:
        return True
    return min(counts) >= min_reps and all(median_ci_rel(v) <= ci_rel for v in samples.values())


def launch_allowance(events: Sequence[float], hosts: Sequence[float]) -> float:
    """Median host-minus-event ms of a trusted program's calls (0.0 without calls).

    What the host clock adds to a call whose work is all on the timed stream: the loop's own cost, the
    Python and launch path before the first kernel, the wake-up from the synchronize. Measured on the
    reference program in the same evaluation, it is the allowance every program gets in `defended`.
    """
    gaps = [float(h) - float(e) for e, h in zip(events, hosts)]
    return statistics.median(gaps) if gaps else 0.0


def defended(events: Sequence[float], hosts: Sequence[float], allowance_ms: float, cuda: bool,
             launches: Sequence[float] | None = None, launch_overhead_ms: float = 0.0) -> list[float]:
    """Per-call times the evaluator stands behind; the host clock alone on the CPU. On the GPU, the longest of

    - the event time: the call's span on the timed stream;
    - the launch path, host ms from the call to its return (`launches`) minus the timer's own share
      (`launch_overhead_ms`): what a caller that does not wait for the GPU pays per call, so Python and
      launcher cost counts where it exceeds the GPU work (a 5 us kernel behind 40 us of Python costs 40);
    - the host time through a device-wide synchronize minus `allowance_ms`, what the host clock adds to the
      trusted reference's own calls in this evaluation (`launch_allowance`): work on a side stream, left
      running past the end event or done on the CPU counts, the serial launch-and-wait gap every honest call
      has does not. An honest call with kernels longer than its launch path is measured by its events, the
      precise clock, instead of by the host's few-microsecond jitter.
    """
    if not cuda:
        return [float(h) for h in hosts]
    ls = launches if launches is not None and len(launches) == len(events) else [0.0] * len(events)
    return [max(float(e), float(ln) - launch_overhead_ms, float(h) - allowance_ms) for e, h, ln in zip(events, hosts, ls)]
