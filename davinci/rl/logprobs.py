"""Response log-probs (and entropies) without materialising the full-vocabulary logits in float32.

Shape notation: B = samples in a micro-batch; S = padded sequence length; R = padded response length;
H = hidden size; V = vocabulary; C = rows per chunk (`chunk_rows`).

The simple way (`response_logprobs_reference`) runs the whole causal LM, takes logits [B, S, V] in the
model's dtype, upcasts the rows that predict response tokens to float32 and takes log_softmax. At h100
settings (151,936 vocabulary, 8k tokens, 4 sequences) that is several float32 copies of [B, S, V], about
45 GB before activations, and autograd keeps them for the backward pass.

`response_logprobs` (used by the trainer and the scoring passes) instead:
  1. runs only the decoder body: hidden states [B, S, H] (H << V);
  2. gathers the B*R rows that predict response tokens: [B*R, H] (prompt rows never reach the head);
  3. for each chunk of C rows: logits = head(h) / T in float32 [C, V], log-prob of the target and the
     entropy of the distribution; the chunk runs under activation checkpointing, so backward recomputes
     its logits instead of keeping them.
Peak extra memory is one float32 [C, V] chunk (plus its softmax in backward), independent of B and R.
Temperature T is the sampling temperature: log pi_T(token) is what the sampler drew from, so the ratio
and the gradient are those of the policy that generated the rollouts (T = 1 leaves the logits as they are).

`tests/rl/test_logprobs.py` checks equality with the reference (values and gradients);
`benchmarks/rl_logprobs_memory.py` measures the peak memory of both on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from davinci.llm.attention import attention_kernels

DEFAULT_CHUNK_ROWS = 1024


def _chunk_stats(hidden: Tensor, targets: Tensor, weight: Tensor, bias: Tensor | None, temperature: float) -> tuple[Tensor, Tensor]:
    """[C, H] hidden rows, [C] targets -> ([C] log-prob of each target, [C] entropy, no grad), float32."""
    logits = torch.nn.functional.linear(hidden, weight, bias).float()  # [C, V]
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)  # [C]
    lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse  # [C]
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)  # [C, V]
        entropy = lse - (probs * logits).sum(-1)  # [C] H = logsumexp - E_p[logit]
    return lp, entropy


def _decoder_and_head(model: Any) -> tuple[Any, Any] | None:
    """The decoder body and the LM head of a transformers causal LM (peft-wrapped too); None if absent."""
    get_decoder, get_head = getattr(model, "get_decoder", None), getattr(model, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    decoder, head = get_decoder(), get_head()
    if decoder is None or not isinstance(head, torch.nn.Linear):
        return None
    return decoder, head


def response_logprobs(model: Any, batch: Any, *, temperature: float = 1.0, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                      with_entropy: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """[B, R] log pi_T(response token j | prefix), float32 (and [B, R] entropies when asked).

    Values are garbage where `batch.resp_mask` is False (response padding); callers mask them.
    """
    parts = _decoder_and_head(model)
    if parts is None:  # not a decoder + linear head: the simple path
        lp = response_logprobs_reference(model, batch, temperature=temperature)
        return (lp, torch.zeros_like(lp)) if with_entropy else lp
    decoder, head = parts
    with attention_kernels(batch.input_ids.device):  # no per-shape cuDNN graph builds (davinci.llm.attention)
        hidden = decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).last_hidden_state  # [B, S, H]
    b, r = batch.resp_pos.shape
    rows = hidden.gather(1, batch.resp_pos.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])).reshape(b * r, -1)  # [B*R, H]
    targets = batch.input_ids.gather(1, batch.resp_pos + 1).reshape(b * r)  # [B*R] the token each row predicts
    lps, ents = [], []
    for start in range(0, b * r, max(1, chunk_rows)):
        h, t = rows[start : start + chunk_rows], targets[start : start + chunk_rows]
        if torch.is_grad_enabled() and h.requires_grad:  # recompute the chunk's logits in backward
            lp, ent = checkpoint(_chunk_stats, h, t, head.weight, head.bias, temperature, use_reentrant=False)
        else:
            lp, ent = _chunk_stats(h, t, head.weight, head.bias, temperature)
        lps.append(lp)
        ents.append(ent)
    lp = torch.cat(lps).reshape(b, r)
    return (lp, torch.cat(ents).reshape(b, r)) if with_entropy else lp


def response_logprobs_reference(model: Any, batch: Any, *, temperature: float = 1.0) -> Tensor:
    """The simple reference: full logits [B, S, V], float32 log-softmax, gather. Same result, more memory."""
    start = int(batch.resp_pos.min())
    with attention_kernels(batch.input_ids.device):
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # [B, S, V]
    logits = logits[:, start:-1].float() / temperature  # [B, S', V] only rows that predict some response token
    targets = batch.input_ids[:, start + 1 :]  # [B, S'] token predicted by each row
    row_lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # [B, S']
    return row_lp.gather(1, batch.resp_pos - start)  # [B, R]
