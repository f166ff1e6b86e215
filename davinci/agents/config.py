"""Configuration of the three agents and the episode runner."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AgentsConfig:
    # Policy turns per episode (T) and rollouts per problem (G, the group for advantages).
    turns: int = 2
    group_size: int = 2
    max_new_tokens: int = 768
    temperature: float = 1.0
    top_p: float = 1.0
    # Summarize successful episodes into candidate skills.
    summarize: bool = True
