"""Configuration of RL training: rewards, advantages, loss and optimizer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RLConfig:
    epochs: int = 2
    # Problems per epoch (0 = all training problems).
    problems_per_epoch: int = 4
    reward: str = "correct_plus_speedup"
    advantage: str = "trloo"
    lr: float = 1e-4
    kl_coef: float = 0.0
    clip_ratio: float = 0.2
    grad_accum: int = 1
    max_grad_norm: float = 1.0
