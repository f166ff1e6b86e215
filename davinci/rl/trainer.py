"""The REINFORCE trainer: scoring passes, one optimizer step, and the epoch's update loop with resume.

A step reads like a table of contents: split the step's samples into micro-batches -> forward ->
response log-probs -> registered loss (`LOSSES`) -> backward (gradient accumulation) -> clip -> AdamW ->
log metrics (`step=` = global optimizer step) -> checkpoint. Each piece is a small function.

Shape notation: B = samples in a micro-batch; S = padded sequence length (prompt + response);
R = padded response length; V = vocabulary.

Choices:
- One optimizer step per `cfg.batch_size` samples; `cfg.grad_accum` micro-batches per step. The loss's
  per-sample scale is computed over the whole step, so accumulation equals one big batch exactly.
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
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from davinci.llm.attention import attention_kernels
from davinci.rl.checkpoint import Progress, save_resume
from davinci.rl.config import RLConfig
from davinci.rl.losses import LOSSES, LossInputs, normalization_scale
from davinci.rl.optim import make_optimizer
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
    return MicroBatch(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        resp_pos=pos.to(device),
        resp_mask=mask.to(device),
        old_logprobs=_pad(old, rlen, math.nan, torch.float32).to(device),
        ref_logprobs=_pad([s.ref_logprobs for s in samples], rlen, 0.0, torch.float32).to(device) if has_ref else None,
        advantages=torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device),
        token_scale=torch.tensor(list(scales), dtype=torch.float32, device=device),
    )


def response_logprobs(model: Any, batch: MicroBatch) -> Tensor:
    """[B, R] log pi(response token j | everything before it), float32; garbage where resp_mask is False."""
    start = int(batch.resp_pos.min())
    with attention_kernels(batch.input_ids.device):  # no per-shape cuDNN graph builds (davinci.llm.attention)
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # [B, S, V]
    logits = logits[:, start:-1].float()  # [B, S', V] only rows that predict some response token
    targets = batch.input_ids[:, start + 1 :]  # [B, S'] token predicted by each row
    row_lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # [B, S']
    return row_lp.gather(1, batch.resp_pos - start)  # [B, R]


def _chunks(items: Sequence[Any], n_chunks: int) -> list[list[Any]]:
    size = max(1, math.ceil(len(items) / max(1, n_chunks)))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


@torch.no_grad()
def score_samples(model: Any, samples: Sequence[TrainSample], *, pad_id: int, micro_batch: int = 8) -> list[list[float]]:
    """Response log-probs of every sample under `model` (behaviour or reference scoring pass)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[list[float]] = []
    for i in range(0, len(samples), micro_batch):
        chunk = samples[i : i + micro_batch]
        batch = collate(chunk, [0.0] * len(chunk), pad_id, device)
        lp = response_logprobs(model, batch).cpu()
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


def train_step(model: Any, optimizer: Any, samples: Sequence[TrainSample], cfg: RLConfig, *, pad_id: int) -> dict[str, float]:
    """One optimizer step over `samples` with gradient accumulation; returns the step's metrics."""
    device = next(model.parameters()).device
    loss_fn = LOSSES.get(cfg.loss)
    scales = normalization_scale([s.agent for s in samples], [s.response_len for s in samples], cfg.agent_weights, cfg.normalization)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    stats: Counter[str] = Counter()
    total = 0.0
    for chunk in _chunks(list(zip(samples, scales)), cfg.grad_accum):
        batch = collate([s for s, _ in chunk], [c for _, c in chunk], pad_id, device)
        lp = response_logprobs(model, batch)  # [B, R]
        old = torch.where(torch.isnan(batch.old_logprobs), lp.detach(), batch.old_logprobs)  # no behaviour lp -> on-policy
        inputs = LossInputs(lp, old, batch.advantages, batch.resp_mask, batch.token_scale, batch.ref_logprobs)
        out = loss_fn(inputs, cfg)
        out.loss.backward()
        total += float(out.loss.detach())
        stats.update(out.stats)
    params = [p for p in model.parameters() if p.requires_grad]
    max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return _step_metrics(samples, total, stats, grad_norm)


def _step_metrics(samples: Sequence[TrainSample], loss: float, stats: Counter[str], grad_norm: float) -> dict[str, float]:
    tokens = max(stats["tokens"], 1.0)
    m = {
        "loss": loss,
        "pg_loss": stats["pg_loss"],
        "kl_loss": stats["kl_loss"],
        "kl": stats["kl_sum"] / tokens,
        "clip_frac": stats["clipped"] / tokens,
        "ratio_mean": stats["ratio_sum"] / tokens,
        "grad_norm": grad_norm,
        "tokens": stats["tokens"],
        "samples": float(len(samples)),
        "advantage_mean": float(np.mean([s.advantage for s in samples])),
        "return_mean": float(np.mean([s.ret for s in samples])),
    }
    for agent, n in Counter(s.agent for s in samples).items():
        m[f"samples_{agent}"] = float(n)
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
        metrics = train_step(model, optimizer, [samples[i] for i in progress.plan[step]], cfg, pad_id=pad_id)
        metrics["update_s"] = time.perf_counter() - t0
        metrics["train_tokens_per_s"] = metrics["tokens"] / max(metrics["update_s"], 1e-9)
        progress = replace(progress, step_in_epoch=step + 1, global_step=progress.global_step + 1)
        history.append(metrics)
        logger.log_metrics({f"rl/{k}": v for k, v in metrics.items()}, step=progress.global_step)
        every = cfg.checkpoint_every
        if resume_dir is not None and every > 0 and (step + 1) % every == 0 and step + 1 < len(progress.plan):
            save_resume(resume_dir, model, optimizer, progress)
    return history, progress


__all__ = ["MicroBatch", "collate", "response_logprobs", "score_samples", "make_optimizer", "plan_updates", "train_step", "run_updates"]
