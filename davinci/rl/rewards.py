"""Rewards: per-turn scores of an evaluation, discounted turn returns, and the three agents' rewards.

Everything here is a pure function over plain data: an evaluation arrives as the JSON dict of
`kernelgym.EvalResult.to_dict()` (or None when the turn produced no code) and every field is read
defensively (missing or non-finite -> a stated default), so a change in the evaluator's fields degrades
to "no credit for that term", never to a crash.

Per-turn scores, registered by name in `REWARDS` (`RLConfig.reward`):
  correct_plus_speedup  Dr. Kernel's PR reward: w_c*1[correct] + w_p*clip(speedup, 0, cap)*1[correct]
                        (+ w_cov*coverage*1[correct] when the evaluator reports a time coverage).
  kevin                 Kevin-32B: 0.3*1[correct] + speedup*1[correct]; default gamma 0.4.
  sol                   w_c*1[correct] + w_sol*clip(%SOL/100, 0, 1)*1[correct] (roofline, not baseline).
  milestone             CUDA Agent: -1 fail, +1 correct, +2 faster than eager, +3 faster than both.
A result with any hack flag always scores `hack_penalty`, whatever the reward (a flagged "correct and
fast" kernel must never out-earn an honest failure).

Turn returns: R_t = sum_{k>=t} gamma^(k-t) s_k (Kevin's "sum" aggregation; gamma=1 is Dr. Kernel's G_t).

Agents (each trained on its own reward, with advantages computed over its own group):
  policy     turn t of an episode gets the return R_t.
  selection  the episode's best turn score. Its advantage (e.g. TRLOO over the episodes of the same
             problem and epoch) is then exactly "best-turn score minus the mean of the others' best
             turns": how this choice of skills moved the policy's result relative to its group. The
             estimator supplies the baseline, so the reward itself is not centred twice.
  summary    delayed credit. Admission is decided by the skills stage *after* epoch e, so the summary
             generations of epoch e are stored with their behaviour log-probs and trained in epoch
             e+1: reward = w_admit*1[admitted] + w_use*(fraction of epoch e+1's episodes that selected
             the skill). A summary whose JSON was rejected, or whose skill was not admitted, gets 0.
             The last epoch's summaries are never trained (their admission is never known in time).

    >>> from davinci.rl.config import RLConfig
    >>> REWARDS.get("correct_plus_speedup")({"compiled": True, "correct": True, "speedup": 2.0}, RLConfig())
    1.5
    >>> discounted_returns([1.0, 0.0, 2.0], gamma=0.5)
    [1.5, 1.0, 2.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from davinci.registry import Registry
from davinci.rl.config import RLConfig

# ---------------------------------------------------------------------------------------------------
# Reading an EvalResult dict defensively


def _num(d: Mapping[str, Any], *keys: str) -> float | None:
    """First finite number found under any of `keys` (None when absent, None, NaN or not a number)."""
    for key in keys:
        v = d.get(key)
        if isinstance(v, bool) or v is None:
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            return f
    return None


def is_flagged(result: Mapping[str, Any] | None) -> bool:
    """True when the evaluator flagged a reward hack (any entry in `flags`)."""
    return bool(result) and bool(result.get("flags"))


def is_correct(result: Mapping[str, Any] | None) -> bool:
    """Correct means compiled and correct (a missing `compiled` field is taken as True when correct)."""
    return bool(result) and bool(result.get("correct")) and bool(result.get("compiled", True))


def speedup_of(result: Mapping[str, Any], baseline: str = "eager") -> float | None:
    """Speedup vs eager (`speedup`) or vs torch.compile (`speedup_compile`); None when not measured."""
    return _num(result, "speedup_compile") if baseline == "compile" else _num(result, "speedup")


def coverage_of(result: Mapping[str, Any]) -> float:
    """Kernel time coverage in [0, 1] (the generated kernels' share of profiled kernel time); 0 if absent."""
    cov = _num(result, "time_coverage", "coverage", "kernel_coverage")
    return 0.0 if cov is None else min(max(cov, 0.0), 1.0)


# ---------------------------------------------------------------------------------------------------
# Per-turn scores


@dataclass(frozen=True)
class RewardSpec:
    """A registered per-turn score and the discount its recipe uses by default."""

    score: Callable[[Mapping[str, Any], RLConfig], float]
    default_gamma: float

    def __call__(self, result: Mapping[str, Any] | None, cfg: RLConfig) -> float:
        if result is None:
            return self.score({}, cfg)  # no code extracted: scored as a failed evaluation
        if is_flagged(result):
            return cfg.hack_penalty  # flagged hacks always get the penalty
        return self.score(result, cfg)


REWARDS: Registry[RewardSpec] = Registry("reward")


def _register(name: str, default_gamma: float) -> Callable[[Callable], Callable]:
    def deco(fn: Callable[[Mapping[str, Any], RLConfig], float]) -> Callable:
        REWARDS.register(name)(RewardSpec(fn, default_gamma))
        return fn

    return deco


@_register("correct_plus_speedup", default_gamma=1.0)
def correct_plus_speedup(result: Mapping[str, Any], cfg: RLConfig) -> float:
    """Dr. Kernel's PR reward; failures score 0.

    >>> cfg = RLConfig(w_coverage=0.5)
    >>> correct_plus_speedup({"correct": True, "speedup": 5.0, "time_coverage": 0.5}, cfg)
    2.25
    >>> correct_plus_speedup({"compiled": True, "correct": False, "speedup": 5.0}, cfg)
    0.0
    """
    if not is_correct(result):
        return 0.0
    sp = speedup_of(result, cfg.speedup_baseline) or 0.0
    clipped = min(max(sp, 0.0), cfg.speedup_cap)
    return cfg.w_correct + cfg.w_speedup * clipped + cfg.w_coverage * coverage_of(result)


@_register("kevin", default_gamma=0.4)
def kevin(result: Mapping[str, Any], cfg: RLConfig) -> float:
    """Kevin's per-kernel score 0.3*1[correct] + speedup*1[correct] (speedup unclipped, 0 if unmeasured).

    >>> kevin({"correct": True, "speedup": 1.2}, RLConfig())
    1.5
    >>> kevin({"correct": False, "speedup": 1.2}, RLConfig())
    0.0
    """
    if not is_correct(result):
        return 0.0
    return 0.3 + max(speedup_of(result, cfg.speedup_baseline) or 0.0, 0.0)


@_register("sol", default_gamma=1.0)
def sol(result: Mapping[str, Any], cfg: RLConfig) -> float:
    """Correctness plus the fraction of speed-of-light reached: w_c + w_sol*clip(%SOL/100, 0, 1).

    >>> sol({"correct": True, "sol_percent": 40.0}, RLConfig())
    0.9
    """
    if not is_correct(result):
        return 0.0
    pct = _num(result, "sol_percent") or 0.0
    return cfg.w_correct + cfg.w_sol * min(max(pct / 100.0, 0.0), 1.0)


@_register("milestone", default_gamma=1.0)
def milestone(result: Mapping[str, Any], cfg: RLConfig) -> float:
    """CUDA Agent's discrete reward: -1 fail, +1 correct, +2 faster than eager, +3 faster than both.

    >>> milestone({"correct": True, "speedup": 1.3, "speedup_compile": 0.9}, RLConfig())
    2.0
    >>> milestone({}, RLConfig())
    -1.0
    """
    if not is_correct(result):
        return -1.0
    eager, comp = _num(result, "speedup") or 0.0, _num(result, "speedup_compile") or 0.0
    if eager > 1.0 and comp > 1.0:
        return 3.0
    return 2.0 if eager > 1.0 else 1.0


def resolve_gamma(cfg: RLConfig) -> float:
    """The discount in use: `cfg.gamma`, or the registered reward's own default when None."""
    return REWARDS.get(cfg.reward).default_gamma if cfg.gamma is None else cfg.gamma


# ---------------------------------------------------------------------------------------------------
# Returns and per-agent rewards


def discounted_returns(scores: Sequence[float], gamma: float) -> list[float]:
    """R_t = sum_{k>=t} gamma^(k-t) s_k, computed backwards (R_T = s_T; R_t = s_t + gamma R_{t+1}).

    >>> [round(r, 6) for r in discounted_returns([0.0, 1.0, 1.0], gamma=0.4)]
    [0.56, 1.4, 1.0]
    """
    out: list[float] = [0.0] * len(scores)
    running = 0.0
    for t in range(len(scores) - 1, -1, -1):
        running = scores[t] + gamma * running
        out[t] = running
    return out


@dataclass(frozen=True)
class EpisodeRewards:
    """Rewards of one episode: per-turn scores s_t, turn returns R_t, and the selection agent's reward."""

    turn_scores: tuple[float, ...]
    turn_returns: tuple[float, ...]
    selection: float

    def to_dict(self) -> dict[str, Any]:
        return {"turn_scores": list(self.turn_scores), "turn_returns": list(self.turn_returns), "selection": self.selection}


def episode_rewards(turn_results: Sequence[Mapping[str, Any] | None], cfg: RLConfig) -> EpisodeRewards:
    """Score each turn's evaluation, discount into returns, and take the best turn for the selection agent.

    >>> r = episode_rewards([None, {"correct": True, "speedup": 1.0}], RLConfig(reward="kevin"))
    >>> r.turn_scores, [round(x, 6) for x in r.turn_returns], r.selection
    ((0.0, 1.3), [0.52, 1.3], 1.3)
    """
    spec = REWARDS.get(cfg.reward)
    scores = [float(spec(res, cfg)) for res in turn_results]
    returns = discounted_returns(scores, resolve_gamma(cfg))
    best = max(scores) if scores else 0.0
    return EpisodeRewards(tuple(scores), tuple(returns), best)


def summary_reward(admitted: bool, use_rate: float, cfg: RLConfig) -> float:
    """Delayed reward of a summary generation: admission, plus how often its skill was selected later.

    >>> summary_reward(True, 0.25, RLConfig())
    1.25
    >>> summary_reward(False, 0.9, RLConfig())
    0.0
    """
    if not admitted:
        return 0.0
    return cfg.w_summary_admit + cfg.w_summary_use * min(max(use_rate, 0.0), 1.0)
