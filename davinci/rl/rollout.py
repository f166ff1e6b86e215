"""The rollout phase of an RL epoch: episodes -> rewards -> advantages -> scored samples, written to disk.

`run_rollout_phase` runs the agents' episodes with the live backbone, times generation and evaluation
separately (wrappers around the backend and the evaluate function), turns the episodes into training
samples (`samples.build_samples`), scores behaviour log-probs with the current weights (and reference
log-probs when `rl.kl_coef > 0`), and writes everything to the epoch's output folder. `rollout_meta.json`
is written last: its presence means the phase is complete, so a retried epoch never regenerates (the
rollouts are random; regenerating them would break exact resume of the update that follows).

Files (JSONL = one JSON object per line):
  rollouts.jsonl            RolloutRecord per episode (`records.py` reads and writes it)
  samples.jsonl             TrainSample.to_dict() per trained generation (its digest pins the resume)
  pending_summaries.jsonl   this epoch's summary generations, trained next epoch (delayed credit)
  candidates.jsonl          {"episode_id", "problem_id", "epoch", "skill": Skill dict} for the skills stage
  rollout_meta.json         timing, metrics, samples digest, library version
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from davinci.rl.config import RLConfig
from davinci.rl.onpolicy import rollout_kl
from davinci.rl.records import RolloutRecord
from davinci.rl.rewards import EpisodeRewards
from davinci.rl.samples import TrainSample, with_logprobs
from davinci.rl.trainer import score_samples

ROLLOUTS, SAMPLES, PENDING, CANDIDATES, META = (
    "rollouts.jsonl",
    "samples.jsonl",
    "pending_summaries.jsonl",
    "candidates.jsonl",
    "rollout_meta.json",
)


# ---------------------------------------------------------------------------------------------------
# Timing wrappers (generation vs evaluation seconds, generated tokens)


class TimedBackend:
    """Wraps a `GenerationBackend`: same `generate` (and `generate_batches` when the inner backend streams),
    plus seconds spent, tokens generated and the (start, end) interval of every generation."""

    def __init__(self, inner: Any, count_tokens: Callable[[str], int]) -> None:
        self.inner = inner
        self.count_tokens = count_tokens
        self.seconds = 0.0
        self.tokens = 0
        self.calls = 0
        self.intervals: list[tuple[float, float]] = []
        if callable(getattr(inner, "generate_batches", None)):
            self.generate_batches = self._generate_batches

    def _record(self, t0: float, outs: Sequence[Any]) -> None:
        t1 = time.perf_counter()
        self.seconds += t1 - t0
        self.intervals.append((t0, t1))
        self.tokens += sum(len(o.response_ids) or self.count_tokens(o.text) for o in outs)

    def generate(self, prompts: Sequence[Any], sampling: Any) -> list[Any]:
        t0 = time.perf_counter()
        outs = self.inner.generate(prompts, sampling)
        self._record(t0, outs)
        self.calls += 1
        return outs

    def _generate_batches(self, prompts: Sequence[Any], sampling: Any) -> Iterator[list[tuple[int, Any]]]:
        """The inner backend's batches, each timed from the request for it to its arrival."""
        self.calls += 1
        batches = iter(self.inner.generate_batches(prompts, sampling))
        while True:
            t0 = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                return
            self._record(t0, [out for _, out in batch])
            yield batch

    def __getattr__(self, name: str) -> Any:  # anything else the runner asks of the backend
        return getattr(self.inner, name)


class TimedCall:
    """Wraps the evaluate function the episode runner calls: same call, plus seconds, items (and how many of
    them were copies, `copy_of`) and intervals.

    Thread-safe: the runner may call it from its overlap thread while generation runs."""

    def __init__(self, fn: Callable[..., list[Any]]) -> None:
        self.fn = fn
        self.seconds = 0.0
        self.items = 0
        self.copies = 0
        self.intervals: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def __call__(self, items: Sequence[Any], *args: Any, **kwargs: Any) -> list[Any]:
        t0 = time.perf_counter()
        results: list[Any] = []
        try:
            results = list(self.fn(items, *args, **kwargs))  # (a generator would be spent by the count below)
            return results
        finally:
            t1 = time.perf_counter()
            with self._lock:
                self.seconds += t1 - t0
                self.items += len(items)
                # copies of an item evaluated in the same batch (kernelgym's `dedup_batch`): not evaluated again
                self.copies += sum("copy_of" in (getattr(r, "details", None) or {}) for r in results)
                self.intervals.append((t0, t1))


def overlap_seconds(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Seconds during which some interval of `a` and some interval of `b` both ran (each set may overlap itself).

    >>> overlap_seconds([(0.0, 2.0), (3.0, 5.0)], [(1.0, 4.0)])
    2.0
    >>> overlap_seconds([(0.0, 1.0)], [(1.0, 2.0)])
    0.0
    """
    def merged(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        out: list[tuple[float, float]] = []
        for lo, hi in sorted(intervals):
            if out and lo <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], hi))
            else:
                out.append((lo, hi))
        return out

    total = 0.0
    for lo_a, hi_a in merged(a):
        for lo_b, hi_b in merged(b):
            total += max(0.0, min(hi_a, hi_b) - max(lo_a, lo_b))
    return total


# ---------------------------------------------------------------------------------------------------
# Problems


def select_problems(problems: Sequence[Any], cfg: RLConfig, *, seed: int, epoch: int) -> list[Any]:
    """`cfg.problems_per_epoch` problems (0 = all), a seeded choice per epoch (or the same every epoch with
    `rl.fixed_problems`, so a reward curve tracks the policy, not the draw), in a stable order.

    >>> cfg = RLConfig(problems_per_epoch=2, fixed_problems=True)
    >>> select_problems("abcde", cfg, seed=0, epoch=0) == select_problems("abcde", cfg, seed=0, epoch=5)
    True
    """
    k = cfg.problems_per_epoch
    if k <= 0 or k >= len(problems):
        return list(problems)
    draw = 0 if cfg.fixed_problems else epoch
    order = np.random.default_rng([seed, draw, 7]).permutation(len(problems))[:k]
    return [problems[int(i)] for i in sorted(order)]


@dataclass(frozen=True)
class StartAssignment:
    """Which groups of an epoch begin from an RL start state (`davinci.agents.starts`)."""

    starts: dict[str, Any]  # problem id -> the StartState its whole group begins from
    available: int = 0  # start states of this epoch's problems
    heldout: int = 0  # start states dropped because their problem is held out
    unmeasured: int = 0  # start states dropped because their parent has no measured speedup to improve on


def assign_start_states(problems: Sequence[Any], states: Sequence[Any], fraction: float, *, seed: int, epoch: int,
                        heldout_ids: frozenset[str] | set[str] = frozenset()) -> StartAssignment:
    """Each of `problems` with start states begins from one with probability `fraction` (whole group).

    A state whose problem is held out (`heldout_ids`, the data stage's eval split) is never used, even if its
    problem were among `problems`; nor is one whose parent has no measured speedup (a revision episode is
    scored by its gain over the parent, `rewards.revision_score`). The draw for a problem depends only on (seed, epoch, problem id), so a
    retried epoch, or an epoch with other problems beside it, assigns the same.

    >>> from davinci.agents.starts import StartState
    >>> s = [StartState("a", "h1", "code", "correct", 1.5), StartState("b", "h2", "code", "correct", 1.2)]
    >>> sorted(assign_start_states([type("P", (), {"id": i}) for i in "ab"], s, 1.0, seed=0, epoch=0, heldout_ids={"b"}).starts)
    ['a']
    """
    by_problem: dict[str, list[Any]] = {}
    heldout = unmeasured = 0
    for state in states:
        if state.problem_id in heldout_ids:
            heldout += 1
            continue
        if state.speedup is None:
            unmeasured += 1
            continue
        by_problem.setdefault(state.problem_id, []).append(state)
    starts, available = {}, 0
    for p in problems:
        mine = by_problem.get(p.id, [])
        available += len(mine)
        rng = np.random.default_rng([seed, epoch, 13, zlib.crc32(p.id.encode())])
        if mine and rng.random() < fraction:
            starts[p.id] = mine[int(rng.integers(len(mine)))]
    return StartAssignment(starts, available, heldout, unmeasured)


# ---------------------------------------------------------------------------------------------------
# Metrics


def rollout_metrics(episodes: Sequence[Any], rewards: Sequence[EpisodeRewards], samples: Sequence[TrainSample]) -> dict[str, float]:
    """Reward / correctness / parse / hack statistics of the epoch's rollouts (all floats)."""
    m: dict[str, float] = {"episodes": float(len(episodes)), "samples": float(len(samples))}
    turns = [t for ep in episodes for t in ep.turns]
    m["turns"] = float(len(turns))
    m["compiled_rate"] = _rate(t.result is not None and t.result.compiled for t in turns)
    m["correct_rate"] = _rate(t.correct for t in turns)
    m["flagged_rate"] = _rate(t.result is not None and bool(t.result.flags) for t in turns)
    m["no_code_rate"] = _rate(t.result is None for t in turns)
    m["episode_solved_rate"] = _rate(ep.solved for ep in episodes)
    m["reward_turn_mean"] = _mean(s for r in rewards for s in r.turn_scores)
    m["reward_best_turn_mean"] = _mean(r.selection for r in rewards)
    gens = [(t.generation.agent, t.generation.parse_ok) for t in turns]
    gens += [(ep.selection.agent, ep.selection.parse_ok) for ep in episodes if ep.selection is not None]
    gens += [(ep.summary.agent, ep.summary.parse_ok) for ep in episodes if ep.summary is not None]
    for agent, n in Counter(a for a, _ in gens).items():
        m[f"parse_fail_rate_{agent}"] = _rate(not ok for a, ok in gens if a == agent)
        m[f"generations_{agent}"] = float(n)
    for agent in sorted({s.agent for s in samples}):
        mine = [s for s in samples if s.agent == agent]
        m[f"return_mean_{agent}"] = _mean(s.ret for s in mine)
        m[f"advantage_mean_{agent}"] = _mean(s.advantage for s in mine)
        m[f"advantage_std_{agent}"] = float(np.std([s.advantage for s in mine]))
    m["skill_candidates"] = float(sum(ep.skill_candidate is not None for ep in episodes))
    m["skill_rejections"] = float(sum(bool(ep.skill_rejection) for ep in episodes))
    return m


def _rate(values: Any) -> float:
    vals = [bool(v) for v in values]
    return sum(vals) / len(vals) if vals else 0.0


def _mean(values: Any) -> float:
    vals = list(values)
    return float(np.mean(vals)) if vals else 0.0


# ---------------------------------------------------------------------------------------------------
# Scoring and writing


@dataclass(frozen=True)
class ScoredRollout:
    samples: list[TrainSample]  # trained this epoch (policy, selection, previous epoch's summaries)
    summaries: list[TrainSample]  # this epoch's summary generations (scored, trained next epoch)
    scoring_s: float
    rollout_kl: float = 0.0  # mean per-token KL(rollout || trainer) where the backend gave log-probs
    rollout_kl_tokens: int = 0


def score_all(model: Any, samples: list[TrainSample], summaries: list[TrainSample], *, pad_id: int, micro_batch: int,
              ref_model: Any = None, temperature: float = 1.0, chunk_rows: int = 1024) -> ScoredRollout:
    """Trainer log-probs of every sample at `temperature`: behaviour log-probs where missing, the
    rollout-vs-trainer KL where the backend gave its own, reference log-probs when a ref model is given."""
    t0 = time.perf_counter()
    everything = samples + summaries
    # score what lacks behaviour log-probs, and what the backend scored itself (to compare)
    need = [i for i, s in enumerate(everything) if not s.old_logprobs or s.rollout_logprobs]
    kw = dict(pad_id=pad_id, micro_batch=micro_batch, temperature=temperature, chunk_rows=chunk_rows)
    mine = dict(zip(need, score_samples(model, [everything[i] for i in need], **kw)))
    old = [s.old_logprobs or mine[i] for i, s in enumerate(everything)]
    kl, kl_tokens = rollout_kl([everything[i] for i in mine], list(mine.values()))
    ref = score_samples(ref_model, everything, **kw) if ref_model is not None else None
    scored = with_logprobs(everything, old, ref)
    n = len(samples)
    return ScoredRollout(scored[:n], scored[n:], time.perf_counter() - t0, kl, kl_tokens)


def rollout_records(episodes: Sequence[Any], rewards: Sequence[EpisodeRewards], samples: Sequence[TrainSample]) -> list[RolloutRecord]:
    """One record per episode: the episode, its rewards and the advantage of each of its trained generations."""
    adv = {s.key: s.advantage for s in samples}
    records = []
    for ep, r in zip(episodes, rewards):
        prefix = f"{ep.episode_id}/"
        mine = {k[len(prefix) :]: a for k, a in adv.items() if k.startswith(prefix)}
        records.append(RolloutRecord(ep, r, mine))
    return records


def candidate_rows(episodes: Sequence[Any]) -> list[dict[str, Any]]:
    return [
        {"episode_id": ep.episode_id, "problem_id": ep.problem_id, "epoch": ep.epoch, "skill": ep.skill_candidate}
        for ep in episodes
        if ep.skill_candidate is not None
    ]
