"""Rollout records: the one reader and writer of `rollouts.jsonl` (an episode, its rewards, its advantages).

Everything downstream of an RL epoch (the skills stage's transfer cases and usage, the rl flow's tables,
benchmarks) reads rollouts through `read_rollouts`, which returns typed `RolloutRecord`s (`Episode` with
typed `EvalResult`s, `EpisodeRewards`), so no caller parses the JSON by hand.

    write_rollouts(path, [RolloutRecord(episode, rewards, {"policy/0": 0.5})])
    for rec in read_rollouts([path]): rec.episode.best_turn(), rec.rewards.turn_scores
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from davinci.agents.episode import Episode
from davinci.errors import MalformedInput
from davinci.jsonl import read_jsonl, write_jsonl
from davinci.rl.rewards import EpisodeRewards


@dataclass(frozen=True)
class RolloutRecord:
    """One episode of an epoch with its rewards and the advantage of each trained generation.

    `advantages` maps "<agent>/<turn>" (the sample key after "<episode_id>/") to its advantage.
    """

    episode: Episode
    rewards: EpisodeRewards
    advantages: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"episode": self.episode.to_dict(), "rewards": self.rewards.to_dict(), "advantages": dict(self.advantages)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RolloutRecord":
        return cls(Episode.from_dict(d["episode"]), EpisodeRewards.from_dict(d["rewards"]), dict(d.get("advantages", {})))


def write_rollouts(path: str | Path, records: Iterable[RolloutRecord]) -> str:
    """Atomic write; returns the digest of the bytes."""
    return write_jsonl(path, [r.to_dict() for r in records])


def read_rollouts(paths: str | Path | Iterable[str | Path]) -> list[RolloutRecord]:
    """Records of one file or several, in order; missing files are skipped, malformed rows raise."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    out = []
    for path in paths:
        for n, row in enumerate(read_jsonl(path), 1):
            try:
                out.append(RolloutRecord.from_dict(row))
            except (KeyError, TypeError, ValueError) as exc:
                raise MalformedInput(f"{path} row {n} is not a rollout record ({exc!r})", "regenerate it with the rl stage") from None
    return out


def rollout_table(records: Iterable[RolloutRecord]) -> list[dict[str, Any]]:
    """One row per policy turn (the rl stage's MLflow table): verdict, score and advantage of each turn."""
    rows = []
    for rec in records:
        ep = rec.episode
        for turn in ep.turns:
            res = turn.result
            rows.append({
                "episode": ep.episode_id, "problem": ep.problem_id, "sample": ep.sample_index, "turn": turn.index,
                "skills": ",".join(ep.selected_ids), "compiled": res.compiled if res else None,
                "correct": res.correct if res else None, "speedup": res.speedup if res else None,
                "flags": ",".join(res.flags) if res else "",
                "score": rec.rewards.turn_scores[turn.index] if turn.index < len(rec.rewards.turn_scores) else None,
                "advantage": rec.advantages.get(f"policy/{turn.index}"), "error": res.error if res else "",
            })  # fmt: skip
    return rows
