"""Which scaled-dot-product-attention kernels the backbone's forward passes may use on a GPU.

With transformers' `sdpa` attention and a padding mask, PyTorch (2.11 on the H100) picks its cuDNN kernel,
which builds a graph for every new input shape. Generation grows the KV cache by one token per step, so
every step of a new batch is a new shape; RL and SFT micro-batches have a new (B, S) almost every step too.
Measured with `benchmarks/gpu/attn_padding_check.py --speed` (bf16, B=8, 128 new tokens, generated tok/s):

    attention        new shapes  same shapes again  other new shapes
    eager                  2559               2507              2112
    sdpa                    177               3199               458
    sdpa, no cuDNN         2832               2521              2611

so every forward pass of the backbone on a GPU (generation, behaviour/reference scoring, the RL and SFT
updates) runs inside `attention_kernels`, which leaves flash, memory-efficient and math attention: PyTorch
picks among them per call, with no per-shape setup. On the CPU it changes nothing. The backward pass runs
inside it too: with gradient checkpointing the forward is recomputed during backward, and a recompute that
picks another kernel than the forward did (cuDNN's logsumexp is [B, H, L, 1], flash's [B, H, L]) stops
with torch's CheckpointError (seen on an H200 with `benchmarks/gpu/rl_update_memory.py`).

    with attention_kernels(device):
        logits = model(input_ids=ids, attention_mask=mask).logits
    ...
    with attention_kernels(device):
        loss.backward()
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch


def attention_kernels(device: torch.device | str) -> AbstractContextManager:
    """A context in which SDPA on `device` may use flash, memory-efficient or math kernels, not cuDNN."""
    if torch.device(device).type != "cuda":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


__all__ = ["attention_kernels"]
