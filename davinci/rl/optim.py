"""The RL optimizer: AdamW over the trainable parameters, float32 masters when they are bf16/fp16.

The optimizer itself lives in `davinci.llm.optim` (SFT uses it too); this module maps `RLConfig` onto it.

    opt = make_optimizer(model, cfg)   # AdamW, or MasterWeightAdamW when a trainable param is bf16/fp16
    set_lr(opt, warmup_lr(cfg.lr, cfg.warmup_steps, global_step))   # before each optimizer step
"""

from __future__ import annotations

from typing import Any

from davinci.llm.optim import MasterWeightAdamW, adamw, set_lr, warmup_lr
from davinci.rl.config import RLConfig

__all__ = ["MasterWeightAdamW", "make_optimizer", "set_lr", "warmup_lr"]


def make_optimizer(model: Any, cfg: RLConfig) -> Any:
    """AdamW over the trainable parameters (all of them, or only LoRA adapters); float32 masters if needed."""
    params = [p for p in model.parameters() if p.requires_grad]
    return adamw(params, lr=cfg.lr, betas=tuple(cfg.adam_betas), weight_decay=cfg.weight_decay)

