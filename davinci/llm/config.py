"""Configuration of the backbone model, generation backend and SFT cold start.

Defaults are the tiny CPU profile. The h100 / paper-14b profiles set `kind: hf`, `name_or_path`, `lora`
and larger generation batches; see the comment above each field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class ModelConfig:
    # tiny: a small causal LM created locally (random init, tokenizer trained locally); hf: a checkpoint
    # by name or path through transformers (downloads only when the profile names a hub id).
    kind: Literal["tiny", "hf"] = "tiny"
    name_or_path: str = ""
    # auto: bfloat16 on a GPU, float32 on the CPU.
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    # Generation backend: hf (transformers generate, in process), openai (an OpenAI-compatible
    # chat-completions server such as `vllm serve`, see infra/vllm/README.md), vllm (offline engine).
    backend: Literal["hf", "openai", "vllm"] = "hf"
    openai_base_url: str = ""
    # Wrap the backbone in LoRA adapters (peft) and train only those; for large models.
    lora: bool = False
    # Tiny model shape.
    tiny_hidden: int = 128
    tiny_layers: int = 2
    tiny_heads: int = 4
    tiny_vocab: int = 8192
    max_seq_len: int = 4096
    # Tiny tokenizer pre-tokenization: lines (BPE merges may span spaces but not line breaks, so frequent
    # code lines become single tokens: ~4x fewer tokens on code, much cheaper SFT) or words (GPT-2 style).
    tiny_tokenizer: Literal["lines", "words"] = "lines"
    # Tiny model MLP width (0 = 3 x tiny_hidden).
    tiny_intermediate: int = 0
    # transformers attention kernel: sdpa (fast, default) or eager (reference).
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    # LoRA rank, scale, dropout and the module names it wraps (Llama/Qwen naming).
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    # Recompute activations in the backward pass (saves GPU memory on large models, costs ~30% time).
    gradient_checkpointing: bool = False
    # HF backend: prompts per `generate` call; bounds GPU memory of the KV cache. 0 = as many as the free GPU
    # memory holds (`backends.hf.auto_batch_size`; all at once on the CPU).
    gen_batch_size: int = 16
    # HF backend decoder: graph (backends.graphgen: static KV cache, the decoding step replayed as a CUDA graph;
    # Llama/Qwen2/Mistral layouts), dynamic (transformers `generate`, the cache grows per step), static
    # (`generate` with a preallocated cache, compiled by transformers on a GPU); auto = graph on a GPU where the
    # layout is supported, else dynamic. benchmarks/gpu/generation_options.py measures each.
    gen_cache: Literal["auto", "graph", "dynamic", "static"] = "auto"
    # HF backend: generate on these devices of the host, one model replica each, the training device first
    # (e.g. [cuda:0, cuda:1]; backends.replicas). Empty = the backbone's device only.
    gen_devices: tuple[str, ...] = ()
    # OpenAI-compatible backend: model name sent to the server ("" = the first of GET /v1/models).
    openai_model: str = ""
    # OpenAI-compatible backend: seconds per request, retries (exponential backoff), parallel requests.
    openai_timeout_s: float = 600.0
    openai_max_retries: int = 3
    openai_concurrency: int = 8
    # OpenAI-compatible backend: send the vLLM/SGLang extension fields (`return_token_ids` for prompt and
    # response ids, `top_k: -1` and `repetition_penalty: 1` so the server's generation-config defaults do not
    # change sampling). Off for servers that reject unknown fields; ids then come back empty (re-encoded).
    openai_extensions: bool = True
    # Environment variable holding the server's API key ("" or unset = no Authorization header).
    openai_api_key_env: str = "DAVINCI_OPENAI_API_KEY"
    # vLLM offline engine: share of GPU memory, tensor-parallel GPUs.
    vllm_gpu_memory_utilization: float = 0.5
    vllm_tensor_parallel: int = 1


@dataclass(frozen=True)
class SFTConfig:
    # Tiny profile: 30 epochs at lr 5e-3 make the ~1.5M-parameter model reproduce all 18 training solutions and
    # learn the selection / summary answer formats (benchmarks/llm_sft_repro.py): ~540 steps, about a minute on
    # 2 idle CPU cores. Real models: 1-3 epochs at lr ~1e-5.
    epochs: int = 30
    lr: float = 5e-3
    batch_size: int = 4
    max_steps: int = 0
    # Tokens per example; a longer example loses the start of its prompt (assistant tokens are kept). Keep it
    # above the longest prompt: the answer then sits at the positions it will have at generation time.
    max_len: int = 2048
    # Linear warm-up steps, then cosine decay to lr x min_lr_ratio.
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    # Seed of the example order (the model's own init is seeded where it is created).
    seed: int = 0
    # Epochs for the examples of an agent (absent = `epochs`), e.g. {"selection": 5} to spend less on long
    # rerank prompts. The tiny model needs all epochs for every agent: with fewer, its policy-dominated
    # training makes it answer every prompt with code (measured: 0/18 parseable selections and summaries).
    agent_epochs: dict[str, int] = field(default_factory=dict)
