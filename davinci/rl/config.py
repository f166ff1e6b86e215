"""Configuration of RL training: rewards, advantages, loss, optimizer, batching and checkpoints.

Defaults are the tiny CPU profile. Names (`reward`, `advantage`, `loss`) are looked up in the registries
of `davinci.rl.rewards`, `davinci.rl.advantages` and `davinci.rl.losses`; an unknown name raises
`UnknownName` listing the valid ones when the epoch starts (not at profile load).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


def _default_agent_weights() -> dict[str, float]:
    return {"policy": 1.0, "selection": 0.5, "summary": 0.5}


@dataclass(frozen=True)
class RLConfig:
    epochs: int = 2
    # Problems per epoch (0 = all training problems).
    problems_per_epoch: int = 4
    # Draw the same problems every epoch (a fixed probe set: the reward curve then tracks the policy, not
    # the draw) instead of a new seeded draw per epoch.
    fixed_problems: bool = False
    # Share of the epoch's groups that begin from an RL start state (the parent of a kept evolution revision,
    # from the data stage's evolution/start_states.jsonl) instead of from scratch: each training problem that
    # has start states gets one with this probability (seeded by seed and epoch), for its whole group. In
    # [0, 1]; 0 = never. No effect when the data stage wrote no start states.
    start_state_fraction: float = 0.25
    # Per-turn reward (davinci.rl.rewards.REWARDS): correct_plus_speedup (Dr. Kernel), kevin, sol, milestone.
    reward: str = "correct_plus_speedup"
    # Advantage estimator (davinci.rl.advantages.ADVANTAGES): trloo, grpo, reinforce_baseline.
    advantage: str = "trloo"
    lr: float = 1e-4
    kl_coef: float = 0.0
    clip_ratio: float = 0.2
    grad_accum: int = 1
    max_grad_norm: float = 1.0

    # --- rewards -------------------------------------------------------------------------------
    # Weight of 1[correct] in correct_plus_speedup and sol.
    w_correct: float = 0.5
    # Weight of clip(speedup, 0, speedup_cap) in correct_plus_speedup (only when correct).
    w_speedup: float = 0.5
    # Upper clip of the speedup term (Dr. Kernel: 3.0; larger speedups are suspicious, not better).
    speedup_cap: float = 3.0
    # Weight of the kernel time-coverage term (Dr. Kernel: 0.5); 0 when the evaluator reports no coverage.
    w_coverage: float = 0.0
    # Weight of clip(%SOL / 100, 0, 1) in the sol reward.
    w_sol: float = 1.0
    # Which speedup the rewards read: vs PyTorch eager or vs torch.compile.
    speedup_baseline: Literal["eager", "compile"] = "eager"
    # Reward of a turn whose result carries any hack flag (always applied, whatever the reward).
    hack_penalty: float = 0.0
    # Discount of later turns' scores in the turn returns R_t = sum_k gamma^(k-t) s_k; None = the reward's
    # own default (correct_plus_speedup and sol: 1.0 as Dr. Kernel; kevin: 0.4; milestone: 1.0).
    gamma: float | None = None
    # Summary agent (delayed credit, trained one epoch later): reward for an admitted skill, plus
    # w_summary_use times the skill's effect in the next epoch: the solve rate of episodes that selected it
    # minus that of the episodes of the same problems that did not (in [-1, 1]; rl.credit).
    w_summary_admit: float = 1.0
    w_summary_use: float = 1.0

    # --- loss ----------------------------------------------------------------------------------
    # Policy loss (davinci.rl.losses.LOSSES): reinforce_clip (ratio-clipped; REINFORCE on-policy) or reinforce.
    loss: str = "reinforce_clip"
    # Upper clip of the ratio (1 + clip_ratio_high); 0 = symmetric (Dr. Kernel uses 0.2 / 0.28).
    clip_ratio_high: float = 0.0
    # KL estimator to the frozen reference model, used when kl_coef > 0 (k1 = log ratio, k3 = Schulman's).
    kl_estimator: Literal["k1", "k3"] = "k3"
    # token: every trained token of an agent weighs the same; sequence: every generation weighs the same.
    normalization: Literal["token", "sequence"] = "token"
    # Loss weight of each agent; an agent's loss is normalized over its own tokens, then weighted.
    agent_weights: dict[str, float] = field(default_factory=_default_agent_weights)
    # Behaviour log-probs for the ratio: recompute with the trainer's model before the update
    # (ratio = 1 up to float rounding on the first step) or take the backend's (recomputed when absent).
    behaviour_logprobs: Literal["recompute", "backend"] = "recompute"

    # --- optimizer and batching ----------------------------------------------------------------
    # Generations per optimizer step (0 = all of the epoch's samples in one step).
    batch_size: int = 8
    # Passes over the epoch's samples (each pass reshuffles; later passes are off-policy, hence the clip).
    update_passes: int = 1
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    # Linear learning-rate warmup over the first this many optimizer steps of RL (0 = none): a fresh AdamW's
    # first steps move every parameter by about lr whatever its gradient's size (on the learning
    # demonstration's 4M-parameter model, lr 5e-4 with no warmup diverged within 8 steps).
    warmup_steps: int = 0
    # Processes the update runs on: 1 = in this process on its device; N > 1 = N torchrun ranks with FSDP2, one per
    # visible GPU (gloo processes on the CPU), started per epoch after the rollouts (davinci.rl.torchrun_update).
    update_processes: int = 1
    # Save a resume checkpoint every this many optimizer steps inside the epoch (0 = only at the end).
    # A full fine-tuning checkpoint of a 1.5B model is ~21 GB (weights + AdamW), so large profiles space them.
    checkpoint_every: int = 1
    # Resume checkpoints kept in the epoch's _resume/ (oldest deleted first; a resume takes the newest
    # readable one, so keep >= 2 survives a crash while writing).
    checkpoint_keep: int = 1
    # Keep the optimizer state in the epoch checkpoint, so the next epoch continues AdamW exactly.
    save_optimizer: bool = True
    # Generations longer than this (prompt + response tokens) are skipped and counted (0 = model max).
    max_train_tokens: int = 0
    # Groups whose returns are all equal carry no policy gradient: keep them (they still count in the
    # per-agent token normaliser, diluting the others) or drop them from the update. Their share is
    # logged either way (rollout/zero_adv_group_share_<agent>).
    zero_advantage_groups: Literal["keep", "drop"] = "keep"

    # --- memory ---------------------------------------------------------------------------------
    # Padded tokens (micro-batch size x longest sequence) per forward/backward; 0 = grad_accum equal chunks.
    micro_batch_tokens: int = 0
    # Response rows per chunk of the LM head in the log-prob computation (davinci.rl.logprobs): peak extra
    # memory is one float32 [chunk, vocabulary] block instead of the whole [batch, length, vocabulary].
    logprob_chunk_rows: int = 1024

    # --- on-policy checks -------------------------------------------------------------------------
    # Truncated importance sampling: each token's policy-gradient term is weighted by
    # min(pi_old / pi_rollout, tis_cap) where the backend reported its own log-probs (0 = off).
    tis_cap: float = 2.0
    # Stop the run (OffPolicyError) when the mean per-token KL(rollout || trainer) of an epoch's samples
    # exceeds this: the server generated with other weights than the ones being trained (0 = no bound).
    max_rollout_kl: float = 0.5
    # Score the reference (SFT) policy's log-probs even when kl_coef = 0, so the KL to it is logged every
    # step (a second copy of the model during scoring; off for 14B LoRA).
    ref_kl_metric: bool = True
