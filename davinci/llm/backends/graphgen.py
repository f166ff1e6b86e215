"""Graph-captured decoding for Llama-family causal LMs (Llama, Qwen2, Mistral layouts): the fast path of the
in-process generator (`HFBackend` with `model.gen_cache: graph`, the default on a GPU).

Why: transformers' `generate` spends each decoding step in Python and kernel launches (per layer, per module,
per logits processor): measured on an H100 with a Qwen2.5-Coder-1.5B-shaped model at batch 32, ~28 ms a step
(1,143 tokens/s) for a few ms of GPU work. Here one decoding step is a fixed sequence of kernels on
preallocated tensors, captured once per batch into a CUDA graph and replayed, so a step costs its GPU time.

Choices:
- The model's own modules do the arithmetic (embedding, RMSNorms, q/k/v/o projections with any LoRA adapters
  peft put in them, MLP, rotary embedding, head); only attention over the cache is written here (SDPA with an
  explicit mask). Greedy tokens and log-probs match `generate` on the CPU tests (tiny Llama and Qwen2 models).
- Static KV cache, [L] x [B, Hkv, T, D] with T = P + N rounded up to 16 (aligned mask rows for the
  memory-efficient SDPA kernel); slots past the current step are masked, never read as values.
- Left padding as in `left_pad`: row i's prompt ends at slot P - 1; its positions count its own tokens only.
  Padding query rows see themselves (a fully masked SDPA row gives NaN, which would reach the cache).
- Prefill runs in row chunks (at most `prefill_tokens` prompt tokens at a time) and keeps the last position's
  logits only, so a long batch never holds [B, P, V] logits or [B, P, intermediate] activations at once.
- Sampling inside the step: temperature, top-p (sorted cumulative mass, the top token always kept, like
  transformers' TopPLogitsWarper), then Gumbel-max over the kept logits (the same distribution as
  multinomial, and capturable: torch.rand draws from the graph-safe generator). The recorded log-prob is
  log softmax(logits / T) of the chosen token before top-p, the quantity `LogprobRecorder` records and the
  trainer scores. Greedy: argmax, log-probs at T = 1.
- A finished row (it emitted a stop token) emits `pad_id` with log-prob 0 from then on; the host reads
  `finished.all()` every `check_every` steps (the only sync) and stops early.
- On the CPU (or with `capture=False`) the same step function runs eagerly: the CPU tests check the code the
  graph holds. The first two decoding steps run eagerly on a side stream before capture (CUDA graphs need
  warmed-up libraries); they are real steps, capture itself runs nothing.
- Graphs are captured per call (one batch), never cached across calls: the trainer updates weights in place
  between calls, and a graph kept across a `Backbone.load` would read freed parameters.

`unsupported(model)` names what is missing for a model that does not have this layout (the backend then uses
`generate`).

Shapes: B rows, P padded prompt length, N new tokens, T cache slots, L layers, H query heads, Hkv key/value
heads, G = H / Hkv, D head dim, E hidden size, V vocabulary.

    new, logprobs = graph_generate(model, rows, pad_id=0, stop_ids=(2,), sampling=Sampling(max_new_tokens=64))
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from davinci.llm.types import Sampling

ARCHITECTURES = ("llama", "qwen2", "mistral")
LAYER_PARTS = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")
ATTN_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj")


def _decoder(model: Any) -> Any:
    """The causal LM under a peft wrapper, if any (its modules keep the adapters)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def unsupported(model: Any) -> str:
    """'' when `graph_generate` can run `model`; else what it lacks."""
    lm = _decoder(model)
    inner = getattr(lm, "model", None)
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if inner is None or not hasattr(inner, name):
            return f"the model has no model.{name} (not a Llama-family layout)"
    if not hasattr(lm, "lm_head"):
        return "the model has no lm_head"
    cfg = lm.config
    kind = getattr(cfg, "model_type", "")
    if kind not in ARCHITECTURES:  # others differ in ways the module names do not show (Qwen3's q/k norms, Gemma's scaled embedding)
        return f"model_type {kind!r} is not one of the layouts checked here ({', '.join(ARCHITECTURES)})"
    if getattr(cfg, "use_sliding_window", False) or (kind == "mistral" and getattr(cfg, "sliding_window", None)):
        return "sliding-window attention is not implemented here"
    for layer in inner.layers:
        missing = [p for p in LAYER_PARTS if not hasattr(layer, p)] + [p for p in ATTN_PARTS if not hasattr(layer.self_attn, p)]
        if missing:
            return f"a decoder layer lacks {', '.join(missing)}"
    return ""


@dataclass(frozen=True)
class Dims:
    layers: int
    heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, config: Any) -> "Dims":
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        return cls(int(config.num_hidden_layers), heads, int(getattr(config, "num_key_value_heads", None) or heads), head_dim)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (the Llama convention): x [B, heads, S, D], cos/sin [B, S, D]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Cache:
    """Static KV cache and the per-row state a decoding step reads and advances in place.

    keys/values: [L] x [B, Hkv, T, D]; valid [B, T] (True = a slot a query may attend to); pos [B] (the
    rotary position of the next input token); slot [1] (its cache slot, the same for every row)."""

    def __init__(self, dims: Dims, rows: int, slots: int, dtype: torch.dtype, device: torch.device) -> None:
        shape = (rows, dims.kv_heads, slots, dims.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(dims.layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(dims.layers)]
        self.valid = torch.zeros((rows, slots), dtype=torch.bool, device=device)
        self.pos = torch.zeros(rows, dtype=torch.long, device=device)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)


def attend_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, groups: int) -> torch.Tensor:
    """q [b, H, P, D], k/v [b, Hkv, P, D], mask [b, 1, P, P] -> [b, P, H*D]."""
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


def attend_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, dims: Dims) -> torch.Tensor:
    """One query position per row. q [B, H, 1, D] regrouped as [B, Hkv, G, D] (query heads h*G..h*G+G-1 share
    key/value head h, as transformers' repeat_kv pairs them), so the cache is read once, never repeated.
    k/v [B, Hkv, T, D], mask [B, 1, 1, T] -> [B, 1, H*D]."""
    B = q.shape[0]
    g = q.reshape(B, dims.kv_heads, dims.heads // dims.kv_heads, dims.head_dim)
    out = F.scaled_dot_product_attention(g, k, v, attn_mask=mask, scale=scale)
    return out.reshape(B, 1, dims.heads * dims.head_dim)


def layer_forward(layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, dims: Dims,
                  attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                  store: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """One decoder layer on x [b, S, E]: `store(k, v)` puts this step's keys/values ([b, Hkv, S, D]) in the
    cache and returns what the queries attend over; `attend(q, k, v)` is the attention itself."""
    attn = layer.self_attn
    b, s, _ = x.shape
    h = layer.input_layernorm(x)
    q = attn.q_proj(h).view(b, s, dims.heads, dims.head_dim).transpose(1, 2)
    k = attn.k_proj(h).view(b, s, dims.kv_heads, dims.head_dim).transpose(1, 2)
    v = attn.v_proj(h).view(b, s, dims.kv_heads, dims.head_dim).transpose(1, 2)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    k, v = store(k, v)
    x = x + attn.o_proj(attend(q, k, v))
    return x + layer.mlp(layer.post_attention_layernorm(x))


class Sampler:
    """Chooses the next token from [B, V] logits and gives its log-prob (see the module docstring)."""

    def __init__(self, sampling: Sampling, greedy: bool) -> None:
        self.greedy = greedy
        self.temperature = 1.0 if greedy else float(sampling.temperature)
        self.top_p = 1.0 if greedy else float(sampling.top_p)

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scaled = logits.float() / self.temperature
        logp = torch.log_softmax(scaled, dim=-1)
        if self.greedy:
            token = scaled.argmax(dim=-1)
        else:
            kept = scaled if self.top_p >= 1.0 else self._top_p(scaled)
            u = torch.rand_like(kept).clamp_(min=1e-20)
            token = (kept - torch.log(-torch.log(u))).argmax(dim=-1)
        return token, logp.gather(1, token[:, None]).squeeze(1)

    def _top_p(self, scaled: torch.Tensor) -> torch.Tensor:
        probs, order = torch.softmax(scaled, dim=-1).sort(dim=-1, descending=True)
        # mask: a token goes when the tokens ranked above it already hold top_p of the mass (>=, as transformers'
        # warper: a tie at exactly top_p drops it); the top one stays
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= self.top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter_(1, order, drop_sorted)
        return scaled.masked_fill(drop, float("-inf"))


def prefill(lm: Any, ids: torch.Tensor, attn: torch.Tensor, cache: Cache, dims: Dims, prefill_tokens: int) -> torch.Tensor:
    """Fill the cache with the prompts (ids/attn [B, P]) and return the last position's logits [B, V]."""
    inner, (B, P) = lm.model, ids.shape
    positions = (attn.cumsum(-1) - 1).clamp_(min=0)
    causal = torch.ones((P, P), dtype=torch.bool, device=ids.device).tril_()
    eye = torch.eye(P, dtype=torch.bool, device=ids.device)
    chunk = max(1, prefill_tokens // max(1, P))
    scale = _scale(lm, dims)
    out = []
    for lo in range(0, B, chunk):
        hi = min(B, lo + chunk)
        # mask: causal within the prompt, padding invisible; a padding query sees itself so no row is all False
        mask = ((causal & attn[lo:hi, None, :].bool()) | eye)[:, None]
        x = inner.embed_tokens(ids[lo:hi])
        cos, sin = inner.rotary_emb(x, positions[lo:hi])
        for i, layer in enumerate(inner.layers):
            def store(k: torch.Tensor, v: torch.Tensor, i: int = i) -> tuple[torch.Tensor, torch.Tensor]:
                cache.keys[i][lo:hi, :, :P] = k
                cache.values[i][lo:hi, :, :P] = v
                return k, v
            x = layer_forward(layer, x, cos, sin, dims, lambda q, k, v: attend_prefill(q, k, v, mask, scale, dims.heads // dims.kv_heads), store)
        out.append(lm.lm_head(inner.norm(x[:, -1:]))[:, 0])
    cache.valid[:, :P] = attn.bool()
    cache.pos.copy_(attn.sum(-1))
    cache.slot.fill_(P)
    return torch.cat(out)


def _scale(lm: Any, dims: Dims) -> float:
    return float(getattr(lm.model.layers[0].self_attn, "scaling", dims.head_dim**-0.5))


class Stepper:
    """One decoding step on fixed tensors (capturable): reads `token` [B] at `cache.slot`, writes the next token
    and its log-prob into column `step` of `tokens` / `logprobs` [B, N], advances the cache state."""

    def __init__(self, lm: Any, cache: Cache, dims: Dims, sampler: Sampler, first: torch.Tensor,
                 steps: int, pad_id: int, stop_ids: Sequence[int]) -> None:
        self.lm, self.cache, self.dims, self.sampler = lm, cache, dims, sampler
        dev = first.device
        self.token = first.clone()
        self.tokens = torch.full((first.shape[0], steps), pad_id, dtype=torch.long, device=dev)
        self.logprobs = torch.zeros((first.shape[0], steps), dtype=torch.float32, device=dev)
        self.step = torch.zeros(1, dtype=torch.long, device=dev)
        self.finished = torch.zeros(first.shape[0], dtype=torch.bool, device=dev)
        self.pad = torch.tensor(pad_id, dtype=torch.long, device=dev)
        self.stops = torch.tensor(sorted(set(stop_ids)) or [-1], dtype=torch.long, device=dev)
        self.scale = _scale(lm, dims)

    def record(self, token: torch.Tensor, logp: torch.Tensor) -> None:
        """Column `step` := (token, logp), padding for rows already finished; then step += 1."""
        token = torch.where(self.finished, self.pad, token)
        logp = torch.where(self.finished, torch.zeros_like(logp), logp)
        self.tokens.index_copy_(1, self.step, token[:, None])
        self.logprobs.index_copy_(1, self.step, logp[:, None])
        self.finished |= (token[:, None] == self.stops[None, :]).any(dim=1)
        self.token.copy_(token)
        self.step += 1

    def __call__(self) -> None:
        inner, cache, dims = self.lm.model, self.cache, self.dims
        cache.valid.index_fill_(1, cache.slot, True)
        # mask: prompt tokens and every generated slot up to this one; the rest of the cache is empty
        mask = cache.valid[:, None, None, :]
        x = inner.embed_tokens(self.token[:, None])
        cos, sin = inner.rotary_emb(x, cache.pos[:, None])
        for i, layer in enumerate(inner.layers):
            def store(k: torch.Tensor, v: torch.Tensor, i: int = i) -> tuple[torch.Tensor, torch.Tensor]:
                cache.keys[i].index_copy_(2, cache.slot, k)
                cache.values[i].index_copy_(2, cache.slot, v)
                return cache.keys[i], cache.values[i]
            x = layer_forward(layer, x, cos, sin, dims, lambda q, k, v: attend_step(q, k, v, mask, self.scale, dims), store)
        logits = self.lm.lm_head(inner.norm(x))[:, 0]
        self.record(*self.sampler(logits))
        cache.pos += 1
        cache.slot += 1


# Serialises CUDA graph captures of replicas decoding in several threads (backends.replicas); a capture is one
# decoding step, so the lock is held for milliseconds. A lock, not state: nothing is stored under it.
_CAPTURE_LOCK = threading.Lock()


def _run_steps(stepper: Stepper, count: int, capture: bool, check_every: int) -> None:
    """`count` steps: eagerly (CPU, or capture off), or two eager warm-up steps then graph replays."""
    done = 0
    if capture:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(min(2, count)):
                stepper()
        torch.cuda.current_stream().wait_stream(side)
        done = min(2, count)
        if done < count:
            graph = torch.cuda.CUDAGraph()
            # on this thread's own side stream (torch's default capture stream is one per process, on the device that
            # first made it) and blind to other threads: replicas on other GPUs capture at the same time (backends.replicas)
            with _CAPTURE_LOCK, torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
                stepper()  # one capture at a time in the process (torch's documented rule); replays run concurrently
            run: Callable[[], None] = graph.replay
    if not capture:
        run = stepper
    while done < count:
        run()
        done += 1
        if done % check_every == 0 and bool(stepper.finished.all()):
            break


@torch.no_grad()
def graph_generate(model: Any, ids: torch.Tensor, attn: torch.Tensor, pad_id: int, stop_ids: Sequence[int],
                   sampling: Sampling, greedy: bool, capture: bool | None = None, check_every: int = 16,
                   prefill_tokens: int = 32768) -> tuple[torch.Tensor, torch.Tensor]:
    """Generate up to `sampling.max_new_tokens` for left-padded prompts ids/attn [B, P] (on the model's device).
    Returns (tokens [B, N'], log-probs [B, N']) on the CPU, N' <= N (fewer when every row stopped early);
    after a row's stop token come `pad_id` and log-prob 0. `capture` defaults to True on a GPU."""
    lm = _decoder(model)
    dev = ids.device
    capture = dev.type == "cuda" if capture is None else capture
    dims = Dims.of(lm.config)
    steps = sampling.max_new_tokens
    if steps <= 0:
        return torch.zeros((ids.shape[0], 0), dtype=torch.long), torch.zeros((ids.shape[0], 0))
    slots = -(-(ids.shape[1] + steps) // 16) * 16
    cache = Cache(dims, ids.shape[0], slots, next(lm.parameters()).dtype, dev)
    sampler = Sampler(sampling, greedy)
    first_logits = prefill(lm, ids, attn, cache, dims, prefill_tokens)
    token, logp = sampler(first_logits)
    stepper = Stepper(lm, cache, dims, sampler, token, steps, pad_id, stop_ids)
    stepper.record(token, logp)
    _run_steps(stepper, steps - 1, capture, check_every)
    n = int(stepper.step.item())
    return stepper.tokens[:, :n].cpu(), stepper.logprobs[:, :n].cpu()


__all__ = ["graph_generate", "unsupported", "Sampler", "Cache", "Dims"]
