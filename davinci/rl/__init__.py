"""Multi-turn, multi-agent REINFORCE on the shared backbone: rewards, advantages, losses, trainer, epoch driver.

Modules (each opens with its own docstring):
  config      `RLConfig` (the profile's `rl:` section)
  rewards     per-turn scores registered in `REWARDS` (correct_plus_speedup, kevin, sol, milestone),
              discounted turn returns, the selection and summary agents' rewards
  advantages  estimators registered in `ADVANTAGES` (trloo, grpo, reinforce_baseline), per-agent groups
  losses      policy losses registered in `LOSSES` (reinforce_clip, reinforce), KL, normalization
  samples     Episodes -> `TrainSample`s (prompt + response ids; only the response is trained)
  credit      the summary agent's delayed credit from the skills stage's admission decisions
  trainer     scoring passes, one optimizer step with gradient accumulation, the update loop
  checkpoint  exact-resume checkpoints (weights, AdamW, RNG, progress) and the per-epoch trainer state
  rollout     the rollout phase of an epoch (timing, metrics, files)
  epoch       `run_rl_epoch(EpochInputs) -> EpochOutputs`, what the rl Prefect task calls

Importing `davinci.rl` (as `davinci.config` does for `RLConfig`) loads nothing heavy: the names below are
resolved on first use.

    from davinci.rl import run_rl_epoch, EpochInputs
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RLConfig": "config",
    "REWARDS": "rewards",
    "ADVANTAGES": "advantages",
    "LOSSES": "losses",
    "compute_advantages": "advantages",
    "episode_rewards": "rewards",
    "discounted_returns": "rewards",
    "TrainSample": "samples",
    "build_samples": "samples",
    "write_admissions": "credit",
    "train_step": "trainer",
    "run_updates": "trainer",
    "Progress": "checkpoint",
    "EpochInputs": "epoch",
    "EpochOutputs": "epoch",
    "EpochTiming": "epoch",
    "run_rl_epoch": "epoch",
    "load_epoch_outputs": "epoch",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'davinci.rl' has no attribute {name!r}")
    return getattr(importlib.import_module(f"davinci.rl.{module}"), name)
