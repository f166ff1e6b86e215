"""Policy losses over the shared backbone, registered by name in `LOSSES` (`RLConfig.loss`).

Shape notation: B = generations in a micro-batch; L = padded response length (target positions only:
column j is the j-th response token). All inputs are plain tensors; the loss is a pure function.

    fn(inputs: LossInputs, cfg: RLConfig) -> LossOutput

Per-token loss l_bj (then masked, scaled per sample and summed):
  reinforce_clip  (default) PPO-style clipped surrogate against the behaviour log-probs:
                  r = exp(logp - old_logp); l = -min(r*A, clip(r, 1-eps_lo, 1+eps_hi)*A). On-policy r = 1
                  and the gradient is exactly REINFORCE's -A * grad logp; later (off-policy) steps of the
                  same rollouts, and summaries trained one epoch late, are kept in a trust region.
  reinforce       plain -A * logp (behaviour log-probs unused).
  + kl_coef * KL  to a frozen reference model when kl_coef > 0: k1 = logp - ref_logp, or
                  k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1 (Schulman's unbiased, always >= 0;
                  per token, the log ratio is clamped to [-20, 20] and k3 to <= 10, as verl's low_var_kl).

Normalization and per-agent weights (`normalization_scale`): each agent's loss is normalized over its
own tokens, then weighted, so a long summary never drowns the policy's signal:
  token     loss = sum_a w_a * (sum_{b in a, j} l_bj) / T_a           T_a = trained tokens of agent a
  sequence  loss = sum_a w_a * (1/N_a) sum_{b in a} (1/len_b) sum_j l_bj
The scale is computed over the whole optimizer step (all its micro-batches), so the micro-batch losses add
up exactly to the step's loss and gradient accumulation equals one big batch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
from torch import Tensor

from davinci.errors import ConfigError
from davinci.registry import Registry
from davinci.rl.config import RLConfig


@dataclass(frozen=True)
class LossInputs:
    """One micro-batch of response tokens. Only `logprobs` carries gradient."""

    logprobs: Tensor  # [B, L] log pi_theta(token) at each response position
    old_logprobs: Tensor  # [B, L] behaviour policy's log-probs (the rollout's policy), no grad
    advantages: Tensor  # [B] one advantage per generation, shared by all its tokens
    # [B, L] True exactly on the generation's own response tokens: right padding is False, and prompt,
    # evaluator feedback and retrieved skill text never appear here at all (they are context only).
    mask: Tensor
    token_scale: Tensor  # [B] agent weight / normalizer (see normalization_scale)
    ref_logprobs: Tensor | None = None  # [B, L] frozen reference model's log-probs, needed when kl_coef > 0
    # [B, L] truncated importance weights min(pi_old / pi_rollout, cap) correcting for a sampler whose
    # log-probs differ from the trainer's (TIS); None = 1 everywhere. No grad.
    is_weight: Tensor | None = None


@dataclass(frozen=True)
class LossOutput:
    """The scalar loss to backprop and additive statistics (sum over micro-batches for a whole step)."""

    loss: Tensor  # [] scalar
    stats: dict[str, float]  # pg_loss, kl_loss (scaled contributions), tokens, clipped, ratio_sum, kl_sum


LossFn = Callable[[LossInputs, RLConfig], LossOutput]
LOSSES: Registry[LossFn] = Registry("loss")


def kl_per_token(logprobs: Tensor, ref_logprobs: Tensor, estimator: str) -> Tensor:
    """[B, L] KL(pi || ref) estimate per sampled token: k1 = log ratio, k3 = e^-x + x - 1 (x = log ratio)."""
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k3":
        # bounded as verl's low_var_kl, OpenRLHF and SkyRL bound it: the log ratio to [-20, 20] before exp and
        # the estimate to <= 10 nats per token. Measured on tokens the policy sampled before this epoch's
        # updates, one token pushed 13 nats down made a step's mean 300 (learning demo, CPU, lr 1e-4) while
        # every other step read ~0.01; with kl_coef > 0 such a token would dominate the loss.
        x = log_ratio.clamp(-20.0, 20.0)
        return (torch.exp(-x) + x - 1.0).clamp(max=10.0)
    raise ConfigError(f"unknown kl_estimator {estimator!r}", "set rl.kl_estimator to k1 or k3")


def _finish(pg: Tensor, inputs: LossInputs, cfg: RLConfig, extra: dict[str, float]) -> LossOutput:
    """Add the KL term, apply mask and per-sample scale, sum; shared by every registered loss."""
    mask = inputs.mask.to(pg.dtype)  # [B, L] 1 on trained response tokens, 0 on padding
    scale = inputs.token_scale.to(pg.dtype)[:, None] * mask  # [B, L]
    if inputs.is_weight is not None:
        pg = pg * inputs.is_weight.to(pg.dtype)  # TIS: the policy-gradient term only, not the KL penalty
    pg_loss = (torch.where(inputs.mask, pg, 0.0) * scale).sum()
    kl_loss = pg.new_zeros(())
    kl_sum = 0.0
    if cfg.kl_coef > 0 and inputs.ref_logprobs is None:
        raise ConfigError("rl.kl_coef > 0 but no reference log-probs were computed", "pass a reference model")
    if inputs.ref_logprobs is not None:  # the KL metric whenever reference log-probs exist; a loss when kl_coef > 0
        # padding slots get logp = ref (KL 0) before the estimator, so no inf/NaN can leak through them
        ref = torch.where(inputs.mask, inputs.ref_logprobs, inputs.logprobs.detach())
        kl = kl_per_token(inputs.logprobs, ref, cfg.kl_estimator)  # [B, L]
        if cfg.kl_coef > 0:
            kl_loss = cfg.kl_coef * (kl * scale).sum()
        kl_sum = float((kl.detach() * mask).sum())
    stats = {"pg_loss": float(pg_loss.detach()), "kl_loss": float(kl_loss.detach()), "kl_sum": kl_sum}
    stats["tokens"] = float(mask.sum())
    return LossOutput(pg_loss + kl_loss, {**stats, **extra})


@LOSSES.register("reinforce_clip")
def reinforce_clip(inputs: LossInputs, cfg: RLConfig) -> LossOutput:
    """Clipped-ratio REINFORCE: l = max(-r*A, -clip(r, 1-lo, 1+hi)*A); r = 1 on-policy."""
    lo = cfg.clip_ratio
    hi = cfg.clip_ratio_high if cfg.clip_ratio_high > 0 else cfg.clip_ratio
    adv = inputs.advantages.to(inputs.logprobs.dtype)[:, None]  # [B, 1]
    # log ratio forced to 0 on padding slots, so their (meaningless) log-probs cannot overflow exp()
    log_ratio = torch.where(inputs.mask, inputs.logprobs - inputs.old_logprobs.detach(), 0.0)
    ratio = torch.exp(log_ratio)  # [B, L]
    clipped = torch.clamp(ratio, 1.0 - lo, 1.0 + hi)
    unclipped_loss, clipped_loss = -ratio * adv, -clipped * adv
    pg = torch.maximum(unclipped_loss, clipped_loss)  # [B, L]
    mask = inputs.mask
    was_clipped = (clipped_loss > unclipped_loss) & mask  # the clip bound is active (no gradient)
    extra = {"clipped": float(was_clipped.sum()), "ratio_sum": float((ratio.detach() * mask).sum())}
    return _finish(pg, inputs, cfg, extra)


@LOSSES.register("reinforce")
def reinforce(inputs: LossInputs, cfg: RLConfig) -> LossOutput:
    """Plain REINFORCE: l = -A * logp (no ratio, no clip)."""
    adv = inputs.advantages.to(inputs.logprobs.dtype)[:, None]  # [B, 1]
    pg = -adv * inputs.logprobs  # [B, L]
    ratio = torch.exp(torch.where(inputs.mask, inputs.logprobs.detach() - inputs.old_logprobs, 0.0))
    return _finish(pg, inputs, cfg, {"clipped": 0.0, "ratio_sum": float((ratio * inputs.mask).sum())})


def normalization_scale(
    agents: Sequence[str], lengths: Sequence[int], weights: Mapping[str, float], mode: str
) -> list[float]:
    """Per-sample token scale [B_step] for one optimizer step (see the module docstring).

    >>> normalization_scale(["policy", "policy", "summary"], [2, 4, 5], {"policy": 1.0, "summary": 0.5}, "token")
    [0.16666666666666666, 0.16666666666666666, 0.1]
    >>> normalization_scale(["policy", "policy"], [2, 4], {"policy": 1.0}, "sequence")
    [0.25, 0.125]
    """
    missing = sorted(set(agents) - set(weights))
    if missing:
        raise ConfigError(f"rl.agent_weights has no weight for agent(s) {missing}", "give every agent a weight")
    if mode not in ("token", "sequence"):
        raise ConfigError(f"unknown normalization {mode!r}", "set rl.normalization to token or sequence")
    tokens: Counter[str] = Counter()
    seqs: Counter[str] = Counter()
    for agent, n in zip(agents, lengths):
        tokens[agent] += n
        seqs[agent] += 1
    out = []
    for agent, n in zip(agents, lengths):
        denom = tokens[agent] if mode == "token" else seqs[agent] * n
        out.append(weights[agent] / denom if denom > 0 else 0.0)
    return out
