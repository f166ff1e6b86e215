"""The RL optimizer: AdamW over the trainable parameters, float32 masters when they are bf16/fp16.

The optimizer itself lives in `davinci.llm.optim` (SFT uses it too); this module maps `RLConfig` onto it.

    opt = make_optimizer(model, cfg)   # AdamW, or MasterWeightAdamW when a trainable param is bf16/fp16
    set_lr(opt, warmup_lr(cfg.lr, cfg.warmup_steps, global_step))   # before each optimizer step
"""

from __future__ import annotations

from typing import Any

from davinci.llm.optim import MasterWeightAdamW, adamw
from davinci.rl.config import RLConfig

__all__ = ["MasterWeightAdamW", "make_optimizer", "set_lr", "warmup_lr"]


def make_optimizer(model: Any, cfg: RLConfig) -> Any:
    """AdamW over the trainable parameters (all of them, or only LoRA adapters); float32 masters if needed."""
    params = [p for p in model.parameters() if p.requires_grad]
    return adamw(params, lr=cfg.lr, betas=tuple(cfg.adam_betas), weight_decay=cfg.weight_decay)


def warmup_lr(lr: float, warmup_steps: int, global_step: int) -> float:
    """The learning rate of the optimizer step that follows `global_step` finished steps: lr * (global_step + 1) /
    warmup_steps during the warmup, then lr. A function of the global step alone, so a resumed run takes the same."""
    if warmup_steps <= 0 or global_step >= warmup_steps:
        return lr
    return lr * (global_step + 1) / warmup_steps


def set_lr(optimizer: Any, lr: float) -> None:
    """Set every parameter group's learning rate (AdamW and MasterWeightAdamW alike)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
