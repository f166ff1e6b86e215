"""The REINFORCE trainer: scoring passes, one optimizer step, and the epoch's update loop with resume.

A step reads like a table of contents: split the step's samples into micro-batches -> forward ->
response log-probs -> registered loss (`LOSSES`) -> backward (gradient accumulation) -> clip -> AdamW ->
log metrics (`step=` = global optimizer step) -> checkpoint. Each piece is a small function.

Shape notation: B = samples in a micro-batch; S = padded sequence length (prompt + response);
R = padded response length; V = vocabulary.

Choices:
- One optimizer step per `cfg.batch_size` samples, cut into micro-batches by a padded-token budget
  (`rl.micro_batch_tokens`: B * S <= budget, longest first) or, when 0, into `cfg.grad_accum` equal
  chunks. The loss's per-sample scale is computed over the whole step, so accumulation equals one big
  batch exactly, whatever the cut.
- Log-probs come from `logprobs.response_logprobs`: decoder body, then the LM head over chunks of response
  rows under activation checkpointing (no full-vocabulary float32 logits), at the sampling temperature.
- Off-policy correction: when the backend reported its own log-probs (`TrainSample.rollout_logprobs`),
  each token's loss is weighted by the truncated importance ratio min(exp(old - rollout), rl.tis_cap)
  (TIS, as verl / OpenRLHF), and the rollout-vs-trainer KL is a metric of every step.
- Metrics per step: loss, KL to the reference (SFT) policy when its log-probs exist, entropy, and per
  agent the clip fraction, mean ratio and entropy.
- Behaviour log-probs are recomputed by a no-grad pass of the same weights before the first update
  (`score_samples`), so the first step is on-policy (ratio = 1 up to float rounding) and later steps on
  the same rollouts are clipped against them. A sample without behaviour log-probs is treated as
  on-policy (its ratio is exactly 1).
- AdamW (`optim.make_optimizer`), with float32 master weights when the model trains in bf16.
- The sample order of the epoch is a plan fixed up front from (seed, epoch) and stored in every resume
  checkpoint, so a resumed run trains on the same batches in the same order.

    opt = make_optimizer(model, cfg)
    progress = Progress.start(epoch=0, global_step=0, plan=plan_updates(len(samples), cfg, seed=0, epoch=0))
    history, progress = run_updates(model, opt, samples, progress, cfg, pad_id=0, logger=MemoryLogger())
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from davinci.llm.attention import attention_kernels
from davinci.rl.checkpoint import Progress, save_resume
from davinci.rl.logprobs import response_logprobs
from davinci.rl.config import RLConfig
from davinci.rl.losses import LOSSES, LossInputs, normalization_scale
from davinci.rl.optim import make_optimizer, set_lr, warmup_lr
from davinci.rl.samples import TrainSample
from davinci.tracking import MetricLogger, NullLogger


@dataclass(frozen=True)
class MicroBatch:
    input_ids: Tensor  # [B, S] prompt + response, right-padded with pad_id
    attention_mask: Tensor  # [B, S] 1 on real tokens; 0 on padding so no real token attends to it
    resp_pos: Tensor  # [B, R] index into the log-prob row of response token j (prompt_len - 1 + j)
    # [B, R] True on the sample's own response tokens; False on response padding. The prompt (problem,
    # skill text, earlier attempts, evaluator feedback) is not in the response span at all: never trained.
    resp_mask: Tensor
    old_logprobs: Tensor  # [B, R] behaviour log-probs, NaN where the sample had none (-> on-policy)
    ref_logprobs: Tensor | None  # [B, R] reference log-probs when every sample has them
    advantages: Tensor  # [B]
    token_scale: Tensor  # [B]
    rollout_logprobs: Tensor | None = None  # [B, R] the backend's own log-probs, NaN where it gave none
    agents: tuple[str, ...] = ()  # [B] which agent made each sample


def _pad(rows: Sequence[Sequence[float]], width: int, fill: float, dtype: torch.dtype) -> Tensor:
    out = torch.full((len(rows), width), fill, dtype=dtype)
    for i, row in enumerate(rows):
        if len(row):
            out[i, : len(row)] = torch.tensor(list(row), dtype=dtype)
    return out


def collate(samples: Sequence[TrainSample], scales: Sequence[float], pad_id: int, device: torch.device) -> MicroBatch:
    """Right-pad a micro-batch and locate each response inside its sequence."""
    seq = max(len(s.input_ids) for s in samples)
    rlen = max(s.response_len for s in samples)
    ids = _pad([s.input_ids for s in samples], seq, pad_id, torch.long)
    attn = _pad([[1] * len(s.input_ids) for s in samples], seq, 0, torch.long)
    pos = torch.stack([torch.arange(rlen) + (s.prompt_len - 1) for s in samples]).clamp(max=seq - 2)
    mask = torch.arange(rlen)[None, :] < torch.tensor([s.response_len for s in samples])[:, None]
    old = [s.old_logprobs if len(s.old_logprobs) == s.response_len else () for s in samples]
    has_ref = all(len(s.ref_logprobs) == s.response_len for s in samples)
    rollout = [s.rollout_logprobs if len(s.rollout_logprobs) == s.response_len else () for s in samples]
    return MicroBatch(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        resp_pos=pos.to(device),
        resp_mask=mask.to(device),
        old_logprobs=_pad(old, rlen, math.nan, torch.float32).to(device),
        ref_logprobs=_pad([s.ref_logprobs for s in samples], rlen, 0.0, torch.float32).to(device) if has_ref else None,
        advantages=torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device),
        token_scale=torch.tensor(list(scales), dtype=torch.float32, device=device),
        rollout_logprobs=_pad(rollout, rlen, math.nan, torch.float32).to(device) if any(rollout) else None,
        agents=tuple(s.agent for s in samples),
    )


def _chunks(items: Sequence[Any], n_chunks: int) -> list[list[Any]]:
    size = max(1, math.ceil(len(items) / max(1, n_chunks)))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def token_budget_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices cut into micro-batches whose padded size (count * longest) stays within `budget` tokens.

    Longest first, greedy; a sequence longer than the budget gets a micro-batch of its own.

    >>> token_budget_batches([5, 1, 4, 2], budget=8)
    [[0], [2, 3], [1]]
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    out: list[list[int]] = []
    for i in order:
        if out and (len(out[-1]) + 1) * lengths[out[-1][0]] <= budget:
            out[-1].append(i)  # the batch's first member is its longest
        else:
            out.append([i])
    return out


def micro_batches(items: Sequence[Any], lengths: Sequence[int], cfg: RLConfig) -> list[list[Any]]:
    """The step's micro-batches: by token budget when `rl.micro_batch_tokens` > 0, else grad_accum chunks."""
    if cfg.micro_batch_tokens > 0:
        return [[items[i] for i in idx] for idx in token_budget_batches(lengths, cfg.micro_batch_tokens)]
    return _chunks(items, cfg.grad_accum)


@torch.no_grad()
def score_samples(model: Any, samples: Sequence[TrainSample], *, pad_id: int, micro_batch: int = 8,
                  temperature: float = 1.0, chunk_rows: int = 1024) -> list[list[float]]:
    """Response log-probs of every sample under `model` at `temperature` (behaviour or reference pass)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[list[float]] = []
    for i in range(0, len(samples), micro_batch):
        chunk = samples[i : i + micro_batch]
        batch = collate(chunk, [0.0] * len(chunk), pad_id, device)
        lp = response_logprobs(model, batch, temperature=temperature, chunk_rows=chunk_rows).cpu()
        out += [lp[b, : s.response_len].tolist() for b, s in enumerate(chunk)]
    model.train(was_training)
    return out


def plan_updates(n_samples: int, cfg: RLConfig, *, seed: int, epoch: int) -> tuple[tuple[int, ...], ...]:
    """The epoch's sample order: `update_passes` shuffled passes, cut into steps of `batch_size` samples."""
    batch = cfg.batch_size or n_samples
    steps: list[tuple[int, ...]] = []
    for p in range(cfg.update_passes):
        perm = np.random.default_rng([seed, epoch, p]).permutation(n_samples)
        steps += [tuple(int(i) for i in perm[j : j + batch]) for j in range(0, n_samples, batch)]
    return tuple(steps)


def tis_weights(old: Tensor, rollout: Tensor | None, cap: float) -> Tensor | None:
    """[B, R] truncated importance weights min(exp(old - rollout), cap); 1 where the backend gave none."""
    if rollout is None or cap <= 0:
        return None
    log_w = torch.where(torch.isnan(rollout), 0.0, old - rollout)  # NaN: no rollout log-prob -> weight 1
    return torch.exp(log_w).clamp(max=cap).detach()


def _token_stats(lp: Tensor, old: Tensor, ent: Tensor, batch: MicroBatch, cfg: RLConfig) -> Counter[str]:
    """Per-agent sums over trained tokens: tokens, clipped, ratio, entropy; rollout-vs-trainer KL terms."""
    lo, hi = cfg.clip_ratio, (cfg.clip_ratio_high if cfg.clip_ratio_high > 0 else cfg.clip_ratio)
    ratio = torch.exp(torch.where(batch.resp_mask, lp.detach() - old, 0.0))  # [B, R] 1 on padding
    adv = batch.advantages[:, None]  # [B, 1]
    clipped = ((ratio > 1 + hi) & (adv > 0)) | ((ratio < 1 - lo) & (adv < 0))  # the clip bound is active
    out: Counter[str] = Counter()
    for b, agent in enumerate(batch.agents):
        m = batch.resp_mask[b]  # [R] the sample's own response tokens
        out[f"tokens_{agent}"] += float(m.sum())
        out[f"clipped_{agent}"] += float((clipped[b] & m).sum())
        out[f"ratio_sum_{agent}"] += float(ratio[b][m].sum())
        out[f"entropy_sum_{agent}"] += float(ent[b][m].sum())
    if batch.rollout_logprobs is not None:
        have = batch.resp_mask & ~torch.isnan(batch.rollout_logprobs)  # tokens with a backend log-prob
        diff = torch.where(have, batch.rollout_logprobs - old, 0.0)  # log(pi_rollout / pi_trainer)
        out["rollout_tokens"] += float(have.sum())
        out["rollout_kl_sum"] += float((torch.exp(-diff) + diff - 1.0)[have].sum())  # k3 of KL(rollout || trainer)
    return out


def step_scales(samples: Sequence[TrainSample], cfg: RLConfig) -> list[float]:
    """[B_step] per-sample loss scale over the whole optimizer step (`losses.normalization_scale`)."""
    return normalization_scale([s.agent for s in samples], [s.response_len for s in samples], cfg.agent_weights, cfg.normalization)


def step_micro_batches(samples: Sequence[TrainSample], cfg: RLConfig) -> list[list[tuple[TrainSample, float]]]:
    """The step's micro-batches of (sample, scale) pairs; the same cut on every rank of a distributed step."""
    return micro_batches(list(zip(samples, step_scales(samples, cfg))), [len(s.input_ids) for s in samples], cfg)


def micro_step(logprob_fn: Callable[[MicroBatch], tuple[Tensor, Tensor]], batch: MicroBatch, cfg: RLConfig,
               device: torch.device) -> tuple[float, Counter[str]]:
    """Forward, loss and backward of one micro-batch; returns (its loss, its additive statistics).

    `logprob_fn(batch)` gives ([B, R] log-probs with grad, [B, R] entropies): the plain model's
    `response_logprobs`, or the FSDP-sharded module's forward (`davinci.rl.distributed`).
    """
    lp, ent = logprob_fn(batch)  # [B, R]
    old = torch.where(torch.isnan(batch.old_logprobs), lp.detach(), batch.old_logprobs)  # no behaviour lp -> on-policy
    weights = tis_weights(old, batch.rollout_logprobs, cfg.tis_cap)
    inputs = LossInputs(lp, old, batch.advantages, batch.resp_mask, batch.token_scale, batch.ref_logprobs, weights)
    out = LOSSES.get(cfg.loss)(inputs, cfg)
    with attention_kernels(device):  # a checkpointed forward is recomputed here: same kernels as forward
        out.loss.backward()
    stats: Counter[str] = Counter(out.stats)
    stats.update(_token_stats(lp, old, ent, batch, cfg))
    return float(out.loss.detach()), stats


def train_step(model: Any, optimizer: Any, samples: Sequence[TrainSample], cfg: RLConfig, *, pad_id: int,
               temperature: float = 1.0) -> dict[str, float]:
    """One optimizer step over `samples` with gradient accumulation; returns the step's metrics."""
    device = next(model.parameters()).device
    model.train()
    optimizer.zero_grad(set_to_none=True)

    def logprob_fn(batch: MicroBatch) -> tuple[Tensor, Tensor]:
        return response_logprobs(model, batch, temperature=temperature, chunk_rows=cfg.logprob_chunk_rows, with_entropy=True)

    stats: Counter[str] = Counter()
    total = 0.0
    for chunk in step_micro_batches(samples, cfg):
        batch = collate([s for s, _ in chunk], [c for _, c in chunk], pad_id, device)
        loss, micro_stats = micro_step(logprob_fn, batch, cfg, device)
        total += loss
        stats.update(micro_stats)
    params = [p for p in model.parameters() if p.requires_grad]
    max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return step_metrics(samples, total, stats, grad_norm)


def step_metrics(samples: Sequence[TrainSample], loss: float, stats: Counter[str], grad_norm: float) -> dict[str, float]:
    tokens = max(stats["tokens"], 1.0)
    m = {
        "loss": loss,
        "pg_loss": stats["pg_loss"],
        "kl_loss": stats["kl_loss"],
        "kl": stats["kl_sum"] / tokens,  # to the reference (SFT) policy; 0 when no reference log-probs
        "clip_frac": stats["clipped"] / tokens,
        "ratio_mean": stats["ratio_sum"] / tokens,
        "grad_norm": grad_norm,
        "tokens": stats["tokens"],
        "samples": float(len(samples)),
        "advantage_mean": float(np.mean([s.advantage for s in samples])),
        "return_mean": float(np.mean([s.ret for s in samples])),
    }
    agents = sorted({s.agent for s in samples})
    m["entropy"] = sum(stats[f"entropy_sum_{a}"] for a in agents) / tokens
    for agent in agents:
        n = max(stats[f"tokens_{agent}"], 1.0)
        m[f"samples_{agent}"] = float(sum(s.agent == agent for s in samples))
        m[f"clip_frac_{agent}"] = stats[f"clipped_{agent}"] / n
        m[f"ratio_mean_{agent}"] = stats[f"ratio_sum_{agent}"] / n
        m[f"entropy_{agent}"] = stats[f"entropy_sum_{agent}"] / n
    if stats["rollout_tokens"]:
        m["rollout_kl"] = stats["rollout_kl_sum"] / stats["rollout_tokens"]
    return m


def run_updates(
    model: Any,
    optimizer: Any,
    samples: Sequence[TrainSample],
    progress: Progress,
    cfg: RLConfig,
    *,
    pad_id: int,
    logger: MetricLogger | None = None,
    resume_dir: Path | None = None,
    desc: str = "rl update",
    temperature: float = 1.0,
) -> tuple[list[dict[str, float]], Progress]:
    """Run the plan's remaining steps (from `progress.step_in_epoch`), logging and checkpointing each.

    Metrics go to `logger` as `rl/<name>` with `step=progress.global_step` after the step. A resume
    checkpoint is written to `resume_dir` every `cfg.checkpoint_every` steps (after logging), so a crash
    between two checkpoints repeats at most those steps, with the same batches and the same result.
    """
    from tqdm.auto import tqdm

    logger = logger or NullLogger()
    history: list[dict[str, float]] = []
    steps = range(progress.step_in_epoch, len(progress.plan))
    for step in tqdm(steps, desc=desc, disable=len(steps) < 2, leave=False):
        t0 = time.perf_counter()
        lr = warmup_lr(cfg.lr, cfg.warmup_steps, progress.global_step)
        set_lr(optimizer, lr)
        metrics = train_step(model, optimizer, [samples[i] for i in progress.plan[step]], cfg, pad_id=pad_id, temperature=temperature)
        metrics["update_s"], metrics["lr"] = time.perf_counter() - t0, lr
        metrics["train_tokens_per_s"] = metrics["tokens"] / max(metrics["update_s"], 1e-9)
        progress = replace(progress, step_in_epoch=step + 1, global_step=progress.global_step + 1)
        history.append(metrics)
        logger.log_metrics({f"rl/{k}": v for k, v in metrics.items()}, step=progress.global_step)
        every = cfg.checkpoint_every
        if resume_dir is not None and every > 0 and (step + 1) % every == 0 and step + 1 < len(progress.plan):
            save_resume(resume_dir, model, optimizer, progress, keep=cfg.checkpoint_keep)
    return history, progress


__all__ = ["MicroBatch", "collate", "response_logprobs", "score_samples", "make_optimizer", "plan_updates", "train_step", "run_updates",
           "micro_batches", "token_budget_batches", "tis_weights", "micro_step", "step_metrics", "step_micro_batches",
           "step_scales"]
