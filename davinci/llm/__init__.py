"""llm: the backbone (transformers), the tiny local model + tokenizer, SFT, and the generation backends.

Modules:
  types      shared types: AgentRole, Message, ChatExample, Sampling, GenOutput, GenerationBackend
  config     ModelConfig, SFTConfig
  backbone   `Backbone` (model + tokenizer; load/save, chat encoding, LoRA)
  tiny       `create_tiny_backbone` (tokenizer trained locally, random-init Llama)
  sft        `train_sft` (loss on assistant tokens only) -> `SFTStats`
  backends/  `make_backend`: hf (transformers generate), openai (HTTP), vllm (offline engine); `ensure_ids`
  server     `python -m davinci.llm.server --checkpoint DIR --port N` (OpenAI-compatible, for tests and CPU)

Names are imported lazily (`from davinci.llm import Backbone` loads torch only then), so importing the
config or the types stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AgentRole": "davinci.llm.types",
    "Message": "davinci.llm.types",
    "ChatExample": "davinci.llm.types",
    "Sampling": "davinci.llm.types",
    "GenOutput": "davinci.llm.types",
    "GenerationBackend": "davinci.llm.types",
    "ModelConfig": "davinci.llm.config",
    "SFTConfig": "davinci.llm.config",
    "Backbone": "davinci.llm.backbone",
    "create_tiny_backbone": "davinci.llm.tiny",
    "train_sft": "davinci.llm.sft",
    "SFTStats": "davinci.llm.sft",
    "make_backend": "davinci.llm.backends",
    "ensure_ids": "davinci.llm.backends",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'davinci.llm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
