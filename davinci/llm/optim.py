"""AdamW for the shared backbone, with float32 master weights when the trained parameters are bf16/fp16.

Why: the backbone runs in bfloat16 on a GPU. bf16 keeps 8 significant bits, so an AdamW step of
lr * (~1) = 1e-6 on a weight of magnitude 1e-2 (a relative change of 1e-4, far below bf16's 2^-8
resolution) rounds back to the same weight: plain AdamW on bf16 parameters silently does not train at
RL or SFT learning rates (1e-6 / 1e-5 in the h100 profile). `MasterWeightAdamW` keeps a float32 copy of
every low-precision trainable parameter, steps AdamW on the copies, and writes the rounded result back into
the model. Its state dict holds the masters, so exact resume keeps full precision. LoRA adapters are
created in float32 by peft, so they take the plain AdamW path. Used by SFT (`davinci.llm.sft`) and RL
(`davinci.rl.optim`).

    opt = adamw(params, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0)
    set_lr(opt, warmup_lr(1e-5, 20, step))   # before each optimizer step: linear warmup, then the lr
"""

from __future__ import annotations

from typing import Any

import torch


class MasterWeightAdamW:
    """AdamW over float32 master copies of `params`; the model's own (low-precision) tensors mirror them.

    Offers what the trainer and checkpoints use of an optimizer: `zero_grad`, `step`, `state_dict`,
    `load_state_dict`, `param_groups`.
    """

    def __init__(self, params: list[torch.nn.Parameter], **adamw_kwargs: Any) -> None:
        self.params = params
        self.masters = [p.detach().float().clone().requires_grad_(True) for p in params]
        self.inner = torch.optim.AdamW(self.masters, **adamw_kwargs)
        self.param_groups = self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
        self.inner.zero_grad(set_to_none=True)

    @torch.no_grad()
    def step(self) -> None:
        for p, m in zip(self.params, self.masters):
            m.grad = None if p.grad is None else p.grad.float()
        self.inner.step()
        for p, m in zip(self.params, self.masters):
            p.copy_(m)  # round the float32 master into the model's dtype

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "masters": [m.detach().cpu().clone() for m in self.masters]}

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "masters" not in state or len(state["masters"]) != len(self.masters):
            # a plain AdamW state (e.g. saved from a float32 run): adopt it, masters from the current weights
            self.inner.load_state_dict(state.get("inner", state))
            return
        self.inner.load_state_dict(state["inner"])
        for p, m, saved in zip(self.params, self.masters, state["masters"]):
            m.copy_(saved.to(m.device))
            p.copy_(m)


def adamw(params: list[torch.nn.Parameter], **adamw_kwargs: Any) -> Any:
    """AdamW over `params`; MasterWeightAdamW when any of them is bf16/fp16."""
    if any(p.dtype in (torch.bfloat16, torch.float16) for p in params):
        return MasterWeightAdamW(params, **adamw_kwargs)
    return torch.optim.AdamW(params, **adamw_kwargs)


def warmup_lr(lr: float, warmup_steps: int, step: int) -> float:
    """The learning rate of the optimizer step that follows `step` finished steps: lr * (step + 1) / warmup_steps
    during the warmup, then lr. A function of the step alone, so a resumed run takes the same."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return lr
    return lr * (step + 1) / warmup_steps


def set_lr(optimizer: Any, lr: float) -> None:
    """Set every parameter group's learning rate (AdamW and MasterWeightAdamW alike)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
