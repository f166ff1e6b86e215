"""Supervised fine-tuning (the cold start): next-token loss on the assistant's tokens of role-tagged chats.

Choices:
- Each `ChatExample` is rendered through the backbone's chat template (`Backbone.encode_chat_masked`); the
  loss covers exactly the assistant's tokens (content + end-of-turn), never the system/user text.
- An example longer than `cfg.max_len` tokens keeps its last `max_len` tokens: the start of the prompt is
  dropped, the answer is kept (the tiny profile's prompts put the instruction and the problem last).
- Batches group examples of similar length (sorted inside windows of 8 batches of a seeded shuffle), padded
  on the right; AdamW with linear warm-up and cosine decay, gradient-norm clipping.
- Deterministic for `cfg.seed`: the example order comes from `random.Random(seed + epoch)`; the global RNG
  is not used (the tiny Llama has no dropout).
- Logs `sft/loss`, `sft/lr`, `sft/grad_norm`, `sft/tokens` with `step=` through the MetricLogger.

    stats = train_sft(backbone, examples, profile.sft, logger)
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from davinci.errors import MalformedInput
from davinci.llm.attention import attention_kernels
from davinci.llm.backbone import Backbone, is_lora
from davinci.llm.config import SFTConfig
from davinci.llm.optim import adamw, set_lr, warmup_lr
from davinci.llm.types import ChatExample
from davinci.tracking import MetricLogger

IGNORE = -100  # label value cross-entropy skips
# Architectures whose logits are exactly lm_head(final hidden state): for them the loss computes the LM
# head only at trained positions (most positions are prompt tokens; the head dominates a tiny model's cost).
PLAIN_HEAD_MODELS = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM")


@dataclass(frozen=True)
class TokenizedExample:
    ids: tuple[int, ...]
    mask: tuple[int, ...]  # 1 = assistant token (trained on), 0 = context
    agent: str
    truncated: bool


@dataclass(frozen=True)
class SFTStats:
    steps: int
    epochs: int
    examples: int
    truncated: int
    dropped: int  # examples left with no assistant token after truncation
    tokens: int  # tokens processed (all positions, all epochs)
    assistant_tokens: int  # trained-on tokens (all epochs)
    first_loss: float
    final_loss: float
    seconds: float
    losses: tuple[float, ...]


def tokenize_example(backbone: Backbone, example: ChatExample, max_len: int) -> TokenizedExample:
    """Render one example to (ids, mask), keeping its last `max_len` tokens."""
    if not any(m["role"] == "assistant" for m in example.messages):
        raise MalformedInput(
            f"SFT example for problem {example.problem_id!r} (agent {example.agent}) has no assistant message",
            "every ChatExample needs the answer to train on as an assistant message",
        )
    ids, mask = backbone.encode_chat_masked(example.messages)
    truncated = len(ids) > max_len
    if truncated:
        ids, mask = ids[-max_len:], mask[-max_len:]
    return TokenizedExample(tuple(ids), tuple(mask), example.agent, truncated)


def make_batches(lengths: Sequence[int], batch_size: int, seed: int) -> list[list[int]]:
    """Seeded shuffle, then sort by length inside windows of 8 batches so a batch pads little."""
    order = list(range(len(lengths)))
    rng = random.Random(seed)
    rng.shuffle(order)
    window = batch_size * 8
    batches: list[list[int]] = []
    for w in range(0, len(order), window):
        chunk = sorted(order[w : w + window], key=lambda i: lengths[i])
        batches.extend(chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


def collate(items: Sequence[TokenizedExample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad to the longest item. Returns input_ids, attention_mask, labels, each [B, L]."""
    width = max(len(x.ids) for x in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE, dtype=torch.long)
    for row, x in enumerate(items):
        n = len(x.ids)
        ids[row, :n] = torch.tensor(x.ids)
        # attention mask: padding is invisible to every real token.
        attn[row, :n] = 1
        # labels: only assistant tokens carry a target; prompts and padding are IGNORE (no loss, no gradient).
        labels[row, :n] = torch.where(torch.tensor(x.mask) == 1, torch.tensor(x.ids), IGNORE)
    return ids, attn, labels


def assistant_loss(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over labelled positions (ids, attn, labels: [B, L]).

    Equal to `model(input_ids, attention_mask, labels=labels).loss`; for `PLAIN_HEAD_MODELS` the LM head
    runs only on the N positions that have a target ([N, H] -> [N, V] instead of [B, L, V]).
    """
    base = model.get_base_model() if is_lora(model) else model
    if type(base).__name__ not in PLAIN_HEAD_MODELS:
        return model(input_ids=ids, attention_mask=attn, labels=labels).loss
    hidden = base.get_decoder()(input_ids=ids, attention_mask=attn).last_hidden_state  # [B, L, H]
    targets = labels[:, 1:]  # [B, L-1]: position i predicts token i + 1
    # keep: only positions whose next token is an assistant token get logits and loss.
    keep = targets != IGNORE
    logits = base.get_output_embeddings()(hidden[:, :-1][keep])  # [N, V]
    return F.cross_entropy(logits.float(), targets[keep])


def lr_at(step: int, total: int, cfg: SFTConfig) -> float:
    """Linear warm-up over `warmup_steps`, then cosine decay to lr * min_lr_ratio at the last step."""
    if step < cfg.warmup_steps:
        return warmup_lr(cfg.lr, cfg.warmup_steps, step)
    span = max(1, total - cfg.warmup_steps - 1)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def epoch_members(agents: Sequence[str], cfg: SFTConfig, epoch: int) -> list[int]:
    """Indices of the examples trained in `epoch`: an agent listed in `cfg.agent_epochs` stops after that many."""
    return [i for i, agent in enumerate(agents) if epoch < cfg.agent_epochs.get(agent, cfg.epochs)]


def plan_steps(agents: Sequence[str], cfg: SFTConfig) -> int:
    total = sum(math.ceil(len(epoch_members(agents, cfg, e)) / cfg.batch_size) for e in range(cfg.epochs))
    return min(total, cfg.max_steps) if cfg.max_steps > 0 else total


def train_sft(
    backbone: Backbone,
    examples: Sequence[ChatExample],
    cfg: SFTConfig,
    logger: MetricLogger,
    *,
    progress: bool = True,
    stop: Callable[[int], bool] | None = None,
) -> SFTStats:
    """Fine-tune `backbone` in place on `examples` (loss on assistant tokens only); returns the statistics.

    `stop(steps_done)`, asked after every optimizer step, ends training there when it returns True (the
    learning demonstration stops once a calibration split is partly solved); it may put the model in eval
    mode to generate, and training switches it back."""
    start = time.perf_counter()
    tokenized = [tokenize_example(backbone, ex, cfg.max_len) for ex in examples]
    kept = [x for x in tokenized if any(x.mask)]
    if not kept:
        raise MalformedInput("no SFT example has an assistant token left to train on", "check the SFT dataset")
    agents = [x.agent for x in kept]
    total = plan_steps(agents, cfg)
    params = backbone.trainable_parameters()
    # bf16 weights on a GPU: float32 masters, or steps of lr ~1e-5 round away (see davinci.llm.optim)
    opt = adamw(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    backbone.model.train()
    losses: list[float] = []
    counts = [0, 0]  # tokens processed, assistant tokens trained on
    stopped = False
    with tqdm(total=total, desc="sft", disable=not progress) as bar:
        for epoch in range(cfg.epochs):
            members = epoch_members(agents, cfg, epoch)
            for batch in make_batches([len(kept[i].ids) for i in members], cfg.batch_size, cfg.seed + epoch):
                if len(losses) >= total or stopped:
                    break
                items = [kept[members[j]] for j in batch]
                loss, grad_norm = _step(backbone, opt, params, items, lr_at(len(losses), total, cfg), cfg, counts)
                losses.append(loss)
                logger.log_metrics(
                    {"sft/loss": loss, "sft/lr": opt.param_groups[0]["lr"], "sft/grad_norm": grad_norm, "sft/tokens": counts[0]},
                    step=len(losses) - 1,
                )
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}")
                if stop is not None:
                    stopped = stop(len(losses))
                    backbone.model.train()
    backbone.model.eval()
    return SFTStats(
        steps=len(losses),
        epochs=cfg.epochs,
        examples=len(examples),
        truncated=sum(x.truncated for x in tokenized),
        dropped=len(tokenized) - len(kept),
        tokens=counts[0],
        assistant_tokens=counts[1],
        first_loss=losses[0],
        final_loss=losses[-1],
        seconds=time.perf_counter() - start,
        losses=tuple(losses),
    )


def _step(backbone: Backbone, opt: Any, params: list, items: Sequence[TokenizedExample], lr: float, cfg: SFTConfig, counts: list[int]) -> tuple[float, float]:
    """One optimizer step on one batch; returns (loss, gradient norm before clipping)."""
    ids, attn, labels = (t.to(backbone.device) for t in collate(items, backbone.pad_token_id))
    set_lr(opt, lr)
    with attention_kernels(backbone.device):  # no per-shape cuDNN graph builds (davinci.llm.attention)
        loss = assistant_loss(backbone.model, ids, attn, labels)
    opt.zero_grad(set_to_none=True)
    with attention_kernels(backbone.device):  # a checkpointed forward is recomputed here: same kernels
        loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
    opt.step()
    counts[0] += int(attn.sum())
    counts[1] += int((labels != IGNORE).sum())
    return float(loss.detach()), grad_norm
