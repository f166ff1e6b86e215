"""The RL optimizer: AdamW, with float32 master weights when the trained parameters are bf16/fp16.

Why: the backbone runs in bfloat16 on a GPU. bf16 keeps 8 significant bits, so an AdamW step of
lr * (~1) = 1e-6 on a weight of magnitude 1e-2 (a relative change of 1e-4, far below bf16's 2^-8
resolution) rounds back to the same weight: plain AdamW on bf16 parameters silently does not train at
RL learning rates. `MasterWeightAdamW` keeps a float32 copy of every low-precision trainable parameter,
steps AdamW on the copies, and writes the rounded result back into the model. Its state dict holds the
masters, so exact resume and the epoch-to-epoch trainer state keep full precision. (LoRA adapters are
created in float32 by peft, so they take the plain AdamW path.)

    opt = make_optimizer(model, cfg)   # AdamW, or MasterWeightAdamW when a trainable param is bf16/fp16
"""

from __future__ import annotations

from typing import Any

import torch

from davinci.rl.config import RLConfig


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


def make_optimizer(model: Any, cfg: RLConfig) -> Any:
    """AdamW over the trainable parameters (all of them, or only LoRA adapters); float32 masters if needed."""
    params = [p for p in model.parameters() if p.requires_grad]
    kwargs = {"lr": cfg.lr, "betas": tuple(cfg.adam_betas), "weight_decay": cfg.weight_decay}
    if any(p.dtype in (torch.bfloat16, torch.float16) for p in params):
        return MasterWeightAdamW(params, **kwargs)
    return torch.optim.AdamW(params, **kwargs)
