"""Generation through transformers `generate` on the in-process backbone (the default backend; runs anywhere).

Choices:
- Prompts are chat-template encoded (`Backbone.encode_chat(..., add_generation_prompt=True)`), sorted by
  length, cut into batches of `cfg.gen_batch_size`, left-padded (decoder-only models continue at the right
  edge), and generated with the KV cache; outputs come back in the caller's order. `gen_batch_size: 0`
  sizes batches from the free GPU memory (`auto_batch_size`: KV cache + logits rows per sequence).
- `gen_cache` picks the decoder: `graph` (`backends.graphgen`: static KV cache, one decoding step captured
  in a CUDA graph and replayed; Llama-family layouts), `dynamic` (transformers `generate`, the cache grows per
  step), `static` (`generate` with a preallocated cache, which lets transformers compile the step); `auto`
  (the default) is `graph` on a GPU for a layout graphgen supports, else `dynamic`.
  benchmarks/gpu/generation_options.py times each.
- Generation stops on `Backbone.stop_token_ids` (the chat template's end of turn, e.g. Qwen's <|im_end|>,
  plus the tokenizer's and the model's eos); the stop token is kept in `response_ids`, not in `text`.
- Sampling knobs are passed explicitly (temperature, top_p, top_k=0, repetition_penalty=1) so a real
  model's `generation_config.json` defaults (e.g. Qwen's top_k=20) never change what the profile asked for.
  `greedy` (or temperature 0) decodes by argmax.
- Per-token logprobs of the chosen tokens are recorded during generation by a logits processor that runs
  before the sampling warpers, i.e. under the raw model distribution (what a forward pass gives), holding
  one [B, V] row set at a time instead of all step logits.
- A seed makes sampling reproducible (batch i uses seed + i) without touching the caller's global RNG
  (`torch.random.fork_rng`), so the trainer's RNG state (and its exact resume) is unaffected.

Shapes: B prompts in a batch, P padded prompt length, N generated steps, V vocabulary.
"""

from __future__ import annotations

import warnings
from typing import Iterable, Iterator, Sequence

import torch

from davinci.errors import ConfigError
from davinci.llm.attention import attention_kernels
from davinci.llm.backbone import Backbone
from davinci.llm.backends.graphgen import graph_generate, unsupported
from davinci.llm.types import GenOutput, Message, Sampling


class LogprobRecorder:
    """Logits processor that records log p_T(chosen token) at the sampling temperature, one step behind.

    transformers runs custom processors before its temperature warper, so the scores arrive raw; they are
    divided by T here, so the recorded log-probs are those of the distribution sampled from, the same
    quantity the trainer scores (`davinci.rl.logprobs`, temperature = `agents.temperature`).

    At step s it receives the ids so far ([B, P + s], whose last column is the token chosen at step s - 1)
    and the raw scores of step s ([B, V]); it gathers the previous step's log-probability of that token and
    keeps this step's log-softmax for the next call. `finish(sequences)` gathers the last step.
    """

    def __init__(self, temperature: float = 1.0) -> None:
        self.temperature = temperature if temperature > 0 else 1.0
        self.prev: torch.Tensor | None = None  # [B, V] log-softmax of the previous step
        self.steps: list[torch.Tensor] = []  # N tensors of [B]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prev is not None:
            self.steps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """[B, N] log-probs of the N generated tokens (sequences: [B, P + N])."""
        if self.prev is not None:
            self.steps.append(self.prev.gather(1, sequences[:, -1:]).squeeze(1))
            self.prev = None
        if not self.steps:
            return torch.zeros((sequences.shape[0], 0))
        return torch.stack(self.steps, dim=1).cpu()


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, P] ids and attention mask, padded on the left."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    # attention mask: left padding is invisible; position ids are derived from it by `generate`.
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
        attn[i, width - len(r) :] = 1
    return ids, attn


def is_greedy(sampling: Sampling) -> bool:
    return sampling.greedy or sampling.temperature <= 0.0


def kv_bytes_per_token(config: object, dtype_bytes: int) -> int:
    """KV-cache bytes one token takes across the model: keys and values, every layer, every KV head."""
    layers = int(getattr(config, "num_hidden_layers"))
    heads = int(getattr(config, "num_attention_heads"))
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or int(getattr(config, "hidden_size")) // heads)
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def auto_batch_size(free_bytes: int, kv_per_token: int, tokens_per_seq: int, vocab: int, cap: int = 256,
                    headroom: float = 0.8, logit_rows: int = 3) -> int:
    """Sequences per `generate` call that fit in `headroom` of the free memory: each holds its KV cache for
    `tokens_per_seq` tokens and `logit_rows` [V] float32 rows of the step's logits (`generate`: the model's
    output, the log-prob recorder's log-softmax, the sampling warpers' copy; graphgen's sampler with top-p
    holds about 8). At least 1, at most `cap`."""
    per_seq = kv_per_token * tokens_per_seq + logit_rows * 4 * vocab
    return max(1, min(cap, int(headroom * free_bytes) // max(1, per_seq)))


CACHES = ("auto", "graph", "dynamic", "static")


def resolve_cache(cache: str, backbone: Backbone) -> str:
    """The decoder `cache` names for this backbone: `auto` is graph on a GPU where graphgen supports the model."""
    if cache not in CACHES:
        raise ConfigError(f"model.gen_cache = {cache!r} is not a decoder", f"use one of: {', '.join(CACHES)}")
    if cache not in ("auto", "graph"):
        return cache
    why_not = unsupported(backbone.model)
    if cache == "auto":
        return "graph" if backbone.device.type == "cuda" and not why_not else "dynamic"
    if why_not:
        raise ConfigError(f"model.gen_cache = graph cannot run this model: {why_not}",
                          "set model.gen_cache: auto (graph where it can run, else dynamic) or dynamic")
    return cache


def batch_plan(encoded: Sequence[Sequence[int]], size: int) -> list[tuple[int, list[int]]]:
    """[(batch number b, prompt indices)]: the prompts longest first, cut into batches of `size`."""
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
    return [(b, order[start : start + size]) for b, start in enumerate(range(0, len(order), size))]


def batch_seed(sampling: Sampling, b: int) -> int | None:
    """Batch b's seed: the sampling seed + b (None stays None)."""
    return None if sampling.seed is None else sampling.seed + b


def in_prompt_order(batches: Iterable[list[tuple[int, GenOutput]]], n: int) -> list[GenOutput]:
    """`generate`'s result from `generate_batches`' [(prompt index, output)] batches: the outputs in prompt order."""
    results: list[GenOutput | None] = [None] * n
    for batch in batches:
        for i, out in batch:
            results[i] = out
    return [r for r in results if r is not None]


class HFBackend:
    """`GenerationBackend` over a live `Backbone` (sees the weights as they are trained)."""

    def __init__(self, backbone: Backbone, batch_size: int = 16, cache: str = "auto", seed_scope: str = "global") -> None:
        if seed_scope not in ("global", "device"):
            raise ConfigError(f"unknown seed_scope {seed_scope!r}", "use 'global' or 'device'")
        self.backbone = backbone
        # global: a seed resets every generator (torch.manual_seed); device: only this backbone's CUDA device's,
        # so replicas generating in other threads keep their streams (backends.replicas)
        self.seed_scope = seed_scope
        self.batch_size = batch_size
        self.cache = resolve_cache(cache, backbone)
        self.fallback = cache == "auto"  # auto: a graph decoder that fails goes on with generate, with a warning

    def _batch_size(self, encoded: list[list[int]], sampling: Sampling) -> int:
        if self.batch_size > 0:
            return self.batch_size
        bb = self.backbone
        if bb.device.type != "cuda" or not encoded:
            return max(1, len(encoded))
        dtype_bytes = next(bb.model.parameters()).element_size()
        free, _ = torch.cuda.mem_get_info(bb.device)
        longest = max(len(e) for e in encoded) + sampling.max_new_tokens
        return auto_batch_size(free, kv_bytes_per_token(bb.model.config, dtype_bytes), longest,
                               int(bb.model.config.vocab_size), logit_rows=8 if self.cache == "graph" else 3)

    def generate(self, prompts: Sequence[Sequence[Message]], sampling: Sampling) -> list[GenOutput]:
        return in_prompt_order(self.generate_batches(prompts, sampling), len(prompts))

    def generate_batches(self, prompts: Sequence[Sequence[Message]], sampling: Sampling) -> Iterator[list[tuple[int, GenOutput]]]:
        """`generate`, one batch at a time as each finishes: [(index into `prompts`, output)] per batch.

        The same batches, seeds and outputs as `generate` (which collects them), so a caller can start
        on a finished batch (the runner evaluates its kernels) while the next one generates.
        """
        encoded = [self.backbone.encode_chat(p, add_generation_prompt=True) for p in prompts]
        for b, idx in batch_plan(encoded, self._batch_size(encoded, sampling)):
            yield list(zip(idx, self.generate_ids([encoded[i] for i in idx], sampling, batch_seed(sampling, b))))

    @torch.no_grad()
    def generate_ids(self, rows: Sequence[Sequence[int]], sampling: Sampling, seed: int | None) -> list[GenOutput]:
        """Generate for already-encoded prompts (one batch)."""
        bb = self.backbone
        ids, attn = left_pad(rows, bb.pad_token_id)
        was_training = bb.model.training
        bb.model.eval()
        devices = [bb.device] if bb.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices), attention_kernels(bb.device):
                if seed is not None:
                    self._seed(seed)
                new, logprobs = self._decode(ids.to(bb.device), attn.to(bb.device), sampling, seed)
        finally:
            bb.model.train(was_training)
        return [self._output(rows[i], new[i].tolist(), logprobs[i].tolist()) for i in range(len(rows))]

    def _seed(self, seed: int) -> None:
        dev = self.backbone.device
        if self.seed_scope == "device" and dev.type == "cuda":
            torch.cuda.default_generators[dev.index if dev.index is not None else torch.cuda.current_device()].manual_seed(seed)
        else:
            torch.manual_seed(seed)

    def _decode(self, ids: torch.Tensor, attn: torch.Tensor, sampling: Sampling, seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cache != "graph":
            return self._generate(ids, attn, sampling)
        try:
            return self._graph(ids, attn, sampling)
        except torch.cuda.OutOfMemoryError:
            raise
        except RuntimeError as exc:  # a capture this torch or driver refuses: loud, and the rollouts go on exactly
            if not self.fallback:
                raise
            warnings.warn(f"graph decoding failed ({type(exc).__name__}: {str(exc)[:300]}); this backend uses "
                          "transformers generate from now on (model.gen_cache: dynamic avoids the attempt)", stacklevel=2)
            self.cache = "dynamic"
            if seed is not None:
                self._seed(seed)
            return self._generate(ids, attn, sampling)

    def _graph(self, ids: torch.Tensor, attn: torch.Tensor, sampling: Sampling) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, N] new tokens and log-probs through graphgen."""
        bb = self.backbone
        return graph_generate(bb.model, ids, attn, bb.pad_token_id, bb.stop_token_ids, sampling, is_greedy(sampling))

    def _generate(self, ids: torch.Tensor, attn: torch.Tensor, sampling: Sampling) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, N] new tokens and log-probs through transformers `generate`."""
        bb = self.backbone
        greedy = is_greedy(sampling)
        recorder = LogprobRecorder(1.0 if greedy else sampling.temperature)
        knobs = {} if greedy else {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
        sequences = bb.model.generate(
            input_ids=ids,
            attention_mask=attn,
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not greedy,
            repetition_penalty=1.0,
            eos_token_id=list(bb.stop_token_ids),
            pad_token_id=bb.pad_token_id,
            logits_processor=[recorder],
            use_cache=True,
            **({"cache_implementation": "static"} if self.cache == "static" else {}),
            **knobs,
        )
        return sequences[:, ids.shape[1] :].cpu(), recorder.finish(sequences)

    def _output(self, prompt: Sequence[int], new: list[int], logprobs: list[float]) -> GenOutput:
        stops = set(self.backbone.stop_token_ids)
        first = next((i for i, t in enumerate(new) if t in stops), None)
        n, finish = (first + 1, "stop") if first is not None else (len(new), "length")
        response = new[:n]
        text = self.backbone.decode(response[:-1] if finish == "stop" else response)
        return GenOutput(
            text=text,
            prompt_ids=tuple(prompt),
            response_ids=tuple(response),
            logprobs=tuple(logprobs[:n]),
            finish_reason=finish,
        )
