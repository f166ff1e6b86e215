"""Rewards: per-turn scores of an evaluation, turn returns that prefer early success, the agents' rewards.

Everything here is a pure function over typed data: an evaluation arrives as a `kernelgym.EvalResult` (or
None when the turn produced no code) and each score reads its typed fields by name (`correct`, `compiled`,
`flags`, `speedup`, `speedup_compile`, `sol_percent`, `kernel_coverage`). A field the evaluator did not
measure is None and earns nothing; there are no fallback names, so a renamed field fails type checks and
tests instead of silently zeroing a term.

Per-turn scores, registered by name in `REWARDS` (`RLConfig.reward`):
  correct_plus_speedup  Dr. Kernel's PR reward: w_c*1[correct] + w_p*clip(speedup, 0, cap)*1[correct]
                        + w_cov*kernel_coverage*1[correct] (0 when the evaluator measured no coverage).
  kevin                 Kevin-32B: 0.3*1[correct] + speedup*1[correct]; default gamma 0.4.
  sol                   w_c*1[correct] + w_sol*clip(%SOL/100, 0, 1)*1[correct] (roofline, not baseline).
  milestone             CUDA Agent: -1 fail, +1 correct, +2 faster than eager, +3 faster than both.
A result with any hack flag always scores `hack_penalty`, whatever the reward (a flagged "correct and
fast" kernel must never out-earn an honest failure).

Turn returns, with success absorbing. Episodes stop at the first turn that meets `agents.stop_when`
(a correct, or a fast, kernel), so an episode that succeeds early plays fewer turns. Summing only the
turns played would pay for slowness: three slow-but-correct turns out-earn one fast kernel at turn 0.
So the stopping turn is treated as an absorbing state: the episode keeps its final kernel for the turns
it skipped, and its scores are padded to the horizon T with the last played score before discounting:

    s'_k = s_k (k < n),  s'_k = s_{n-1} (n <= k < T);   R_t = sum_{k=t}^{T-1} gamma^(k-t) s'_k

(Kevin's "sum" aggregation; gamma = 1 is Dr. Kernel's G_t). Why this and not the alternatives: turning
early stopping off in training spends generation and evaluation on episodes already solved; a best-so-far
reward keeps the stop but changes every reward's scale. Padding keeps the stop (the compute saving), keeps
each reward's own scale per turn, and makes "solved at turn 0" worth at least as much as any trajectory
that reaches the same kernel later, for every gamma in [0, 1] and every estimator that is monotone in the
return within a group (trloo, grpo, reinforce_baseline). Only played turns are trained; padding changes
returns, not samples. `tests/rl/test_early_success.py` checks the property over every profile.

Agents (each trained on its own reward, with advantages computed over its own group):
  policy     turn t of an episode gets the return R_t.
  selection  the episode's best turn score (`Episode.best_turn`'s score). Its advantage (e.g. TRLOO over
             the episodes of the same problem and epoch) is "best-turn score minus the mean of the
             others' best turns". A selection whose rerank answer failed to parse is not trained (its
             skills were BM25's, not its own choice).
  summary    delayed credit (`credit.py`): w_admit*1[admitted] + w_use*(solve rate of the next epoch's
             episodes that selected the skill minus that of the episodes of the same problems that did
             not): the difference the skill made, not how often it was picked.

    >>> from davinci.rl.config import RLConfig
    >>> REWARDS.get("correct_plus_speedup")(minimal_result(True, 2.0), RLConfig())
    1.5
    >>> discounted_returns([1.0, 0.0, 2.0], gamma=0.5)
    [1.5, 1.0, 2.0]
    >>> absorbing_scores([0.0, 1.0], horizon=4)
    [0.0, 1.0, 1.0, 1.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from davinci.registry import Registry
from davinci.rl.config import RLConfig

if TYPE_CHECKING:  # the trainer imports this module; it must not pull the evaluator package in at runtime
    from davinci.kernelgym.result import EvalResult

# ---------------------------------------------------------------------------------------------------
# Typed reads of an EvalResult


def _finite(v: float | None) -> float | None:
    """The value when it is a finite number, else None (an unmeasured or broken measurement)."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def is_flagged(result: EvalResult | None) -> bool:
    """True when the evaluator flagged a reward hack (any entry in `flags`)."""
    return result is not None and bool(result.flags)


def is_correct(result: EvalResult | None) -> bool:
    """Correct means compiled and correct."""
    return result is not None and result.correct and result.compiled


def speedup_of(result: EvalResult, baseline: str = "eager") -> float | None:
    """Speedup vs eager (`speedup`) or vs torch.compile (`speedup_compile`); None when not measured."""
    return _finite(result.speedup_compile if baseline == "compile" else result.speedup)


def coverage_of(result: EvalResult) -> float:
    """`kernel_coverage` clipped to [0, 1] (the candidate's kernels' share of device time); 0 if unmeasured."""
    cov = _finite(result.kernel_coverage)
    return 0.0 if cov is None else min(max(cov, 0.0), 1.0)


def minimal_result(correct: bool, speedup: float | None, **fields: Any) -> EvalResult:
    """A minimal EvalResult (doctests and hand-computed tests): the fields rewards read, the rest empty."""
    from davinci.kernelgym.result import EvalResult

    base = dict(problem_id="p", candidate_hash="h", backend="triton", compiled=True, correct=correct,
                numerics_ok=correct, flags=(), error_kind=None if correct else "mismatch", error="", feedback="",
                device="cpu", timing_label="cpu", speedup=speedup)
    return EvalResult(**{**base, **fields})


# ---------------------------------------------------------------------------------------------------
# Per-turn scores


@dataclass(frozen=True)
class RewardSpec:
    """A registered per-turn score and the discount its recipe uses by default."""

    score: Callable[[EvalResult, RLConfig], float]
    fail_score: float  # the score of a turn that produced no code (or any failed evaluation)
    default_gamma: float

    def __call__(self, result: EvalResult | None, cfg: RLConfig) -> float:
        if result is None:
            return self.fail_score  # no code extracted: scored as a failed evaluation
        if is_flagged(result):
            return cfg.hack_penalty  # flagged hacks always get the penalty
        return self.fail_score if not is_correct(result) else self.score(result, cfg)


REWARDS: Registry[RewardSpec] = Registry("reward")


def _register(name: str, default_gamma: float, fail_score: float = 0.0) -> Callable[[Callable], Callable]:
    def deco(fn: Callable[[EvalResult, RLConfig], float]) -> Callable:
        REWARDS.register(name)(RewardSpec(fn, fail_score, default_gamma))
        return fn

    return deco


@_register("correct_plus_speedup", default_gamma=1.0)
def correct_plus_speedup(result: EvalResult, cfg: RLConfig) -> float:
    """Dr. Kernel's PR reward of a correct result (failures score 0 through `RewardSpec`).

    >>> correct_plus_speedup(minimal_result(True, 5.0, kernel_coverage=0.5), RLConfig(w_coverage=0.5))
    2.25
    """
    clipped = min(max(speedup_of(result, cfg.speedup_baseline) or 0.0, 0.0), cfg.speedup_cap)
    return cfg.w_correct + cfg.w_speedup * clipped + cfg.w_coverage * coverage_of(result)


@_register("kevin", default_gamma=0.4)
def kevin(result: EvalResult, cfg: RLConfig) -> float:
    """Kevin's per-kernel score 0.3 + speedup of a correct result (speedup unclipped, 0 if unmeasured).

    >>> kevin(minimal_result(True, 1.2), RLConfig())
    1.5
    """
    return 0.3 + max(speedup_of(result, cfg.speedup_baseline) or 0.0, 0.0)


@_register("sol", default_gamma=1.0)
def sol(result: EvalResult, cfg: RLConfig) -> float:
    """Correctness plus the fraction of speed-of-light reached: w_c + w_sol*clip(%SOL/100, 0, 1).

    >>> sol(minimal_result(True, None, sol_percent=40.0), RLConfig())
    0.9
    """
    pct = _finite(result.sol_percent) or 0.0
    return cfg.w_correct + cfg.w_sol * min(max(pct / 100.0, 0.0), 1.0)


@_register("milestone", default_gamma=1.0, fail_score=-1.0)
def milestone(result: EvalResult, cfg: RLConfig) -> float:
    """CUDA Agent's discrete reward of a correct result: +1, +2 faster than eager, +3 faster than both.

    >>> milestone(minimal_result(True, 1.3, speedup_compile=0.9), RLConfig())
    2.0
    """
    eager, comp = _finite(result.speedup) or 0.0, _finite(result.speedup_compile) or 0.0
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


def absorbing_scores(scores: Sequence[float], horizon: int) -> list[float]:
    """Scores padded to `horizon` turns with the last played score (an early stop is absorbing)."""
    scores = list(scores)
    if not scores:
        return scores
    return scores + [scores[-1]] * max(horizon - len(scores), 0)


@dataclass(frozen=True)
class EpisodeRewards:
    """Rewards of one episode: per-turn scores s_t, turn returns R_t (played turns only), selection reward."""

    turn_scores: tuple[float, ...]
    turn_returns: tuple[float, ...]
    selection: float

    def to_dict(self) -> dict[str, Any]:
        return {"turn_scores": list(self.turn_scores), "turn_returns": list(self.turn_returns), "selection": self.selection}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EpisodeRewards":
        return cls(tuple(d["turn_scores"]), tuple(d["turn_returns"]), float(d["selection"]))


@dataclass(frozen=True)
class Parent:
    """The program a revision episode starts from (an RL start state): its code hash and measured speedup."""

    code_hash: str
    speedup: float

    @classmethod
    def of(cls, code_hash: str | None, speedup: float | None) -> "Parent | None":
        """The parent of an episode that began from a start state; None when it began from scratch (or its
        parent's speedup was never measured: nothing to improve on)."""
        return None if code_hash is None or speedup is None else cls(code_hash, speedup)


# A revision must beat the parent's speedup by this factor at the lower end of its CI: the parent's figure
# comes from another run (another time, maybe another host), whose drift a within-run CI does not cover, and
# an echo of the parent with a blank line added is other code by hash.
REVISION_MARGIN = 1.05


def improves(result: EvalResult | None, parent: Parent) -> bool:
    """A revision turn's success: correct, unflagged, other code than the parent, and faster than the parent
    beyond the timing noise and the drift between runs (the lower end of its speedup CI above REVISION_MARGIN
    times the parent's speedup; the point estimate when the evaluator gave no CI). Speedups are over eager.

    >>> p = Parent("h0", 2.0)
    >>> improves(minimal_result(True, 2.4, speedup_ci=(2.2, 2.6)), p), improves(minimal_result(True, 2.1, speedup_ci=(1.9, 2.3)), p)
    (True, False)
    >>> improves(minimal_result(True, 2.4, candidate_hash="h0"), p)  # the parent sent back
    False
    """
    if not is_correct(result) or is_flagged(result) or result.candidate_hash == parent.code_hash:
        return False
    point = speedup_of(result)
    low = _finite(result.speedup_ci[0]) if result.speedup_ci else point
    return point is not None and low is not None and low > REVISION_MARGIN * parent.speedup


def revision_score(result: EvalResult | None, parent: Parent, cfg: RLConfig) -> float:
    """Per-turn score of an episode that starts from `parent` (a kept revision's parent, shown as turn 0's history).

    An improvement (`improves`) earns what a correct answer earns from scratch plus its gain over the parent
    in the reward's own terms; anything else, the parent sent back, a correct kernel no faster than it, a
    failure, earns the failure score; a flagged hack the hack penalty. Scoring such episodes like scratch
    ones would pay the parent's speedup for echoing it: copying out-earned every failed attempt to improve.

    >>> cfg = RLConfig(reward="kevin")
    >>> revision_score(minimal_result(True, 2.0, candidate_hash="h0"), Parent("h0", 2.0), cfg)  # the copy
    0.0
    >>> round(revision_score(minimal_result(True, 2.5), Parent("h0", 2.0), cfg), 6)  # 0.3 for correct + 0.5 gained
    0.8
    """
    spec = REWARDS.get(cfg.reward)
    if is_flagged(result):
        return cfg.hack_penalty
    if not improves(result, parent):
        return spec.fail_score
    correct_credit = spec(minimal_result(True, None), cfg) - spec.fail_score
    gain = spec(result, cfg) - spec(minimal_result(True, parent.speedup), cfg)
    return spec.fail_score + correct_credit + max(gain, 0.0)


def episode_rewards(turn_results: Sequence[EvalResult | None], cfg: RLConfig, horizon: int = 0,
                    parent: Parent | None = None) -> EpisodeRewards:
    """Score each turn, pad to `horizon` turns (absorbing early stop; 0 = no padding), discount. An episode that
    starts from `parent` (an RL start state) is scored by `revision_score`.

    >>> r = episode_rewards([None, minimal_result(True, 1.0)], RLConfig(reward="kevin"), horizon=3)
    >>> r.turn_scores, [round(x, 6) for x in r.turn_returns], r.selection
    ((0.0, 1.3), [0.728, 1.82], 1.3)
    """
    spec = REWARDS.get(cfg.reward)
    scores = [float(spec(res, cfg) if parent is None else revision_score(res, parent, cfg)) for res in turn_results]
    returns = discounted_returns(absorbing_scores(scores, horizon), resolve_gamma(cfg))[: len(scores)]
    best = max(scores) if scores else 0.0
    return EpisodeRewards(tuple(scores), tuple(returns), best)


def summary_reward(admitted: bool, use_effect: float, cfg: RLConfig) -> float:
    """Delayed reward of a summary generation: admission, plus the effect of using its skill in [-1, 1].

    >>> summary_reward(True, 0.25, RLConfig())
    1.25
    >>> summary_reward(False, 0.9, RLConfig())
    0.0
    """
    if not admitted:
        return 0.0
    return cfg.w_summary_admit + cfg.w_summary_use * min(max(use_effect, -1.0), 1.0)
