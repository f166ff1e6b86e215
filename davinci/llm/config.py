"""Configuration of the backbone model, generation backend and SFT cold start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ModelConfig:
    # tiny: a small causal LM created locally (random init, tokenizer trained locally); hf: a checkpoint
    # by name or path through transformers (downloads only when the profile names a hub id).
    kind: Literal["tiny", "hf"] = "tiny"
    name_or_path: str = ""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    backend: Literal["hf", "openai", "vllm"] = "hf"
    openai_base_url: str = ""
    lora: bool = False
    # Tiny model shape.
    tiny_hidden: int = 128
    tiny_layers: int = 2
    tiny_heads: int = 4
    tiny_vocab: int = 4096
    max_seq_len: int = 4096


@dataclass(frozen=True)
class SFTConfig:
    epochs: int = 3
    lr: float = 3e-3
    batch_size: int = 4
    max_steps: int = 0
