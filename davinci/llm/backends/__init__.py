"""Generation backends behind one protocol (`GenerationBackend.generate(prompts, sampling) -> [GenOutput]`).

  hf       transformers `generate` on the in-process backbone (default; sees live weights; ids + logprobs); with
           `model.gen_devices` naming several devices, a replica per device (`backends.replicas`)
  openai   an OpenAI-compatible chat-completions server (`vllm serve`, SGLang, `davinci.llm.server`) over
           HTTP; ids/logprobs when the server returns them, else empty (re-encode with `ensure_ids`)
  vllm     vLLM's offline engine where `import vllm` works (its own environment; see infra/vllm/README.md)

`make_backend(backbone | None, cfg)` is the one dispatch path (`BACKENDS` registry; an unknown
`model.backend` raises `UnknownName` listing the valid ones).

The hf backend generates with the backbone's current weights. The other two serve a checkpoint folder:
after the trainer updates the weights it must save the backbone and point them at the new folder
(`VLLMBackend.reload(path)`; for a server, restart it on the new folder) or their samples are off-policy.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from davinci.errors import ConfigError
from davinci.llm.config import ModelConfig
from davinci.llm.types import GenerationBackend, GenOutput, Message
from davinci.registry import Registry

BACKENDS: Registry[Callable[[Any, ModelConfig], GenerationBackend]] = Registry("generation backend")


@BACKENDS.register("hf")
def _hf(backbone: Any, cfg: ModelConfig) -> GenerationBackend:
    from davinci.llm.backends.hf import HFBackend

    if backbone is None:
        raise ConfigError("model.backend=hf generates with an in-process backbone, but none was given", "load one with Backbone.load, or set model.backend=openai")
    if len(cfg.gen_devices) > 1:
        from davinci.llm.backends.replicas import ReplicaBackend

        return ReplicaBackend(backbone, cfg.gen_devices, batch_size=cfg.gen_batch_size, cache=cfg.gen_cache)
    return HFBackend(backbone, batch_size=cfg.gen_batch_size, cache=cfg.gen_cache)


@BACKENDS.register("openai")
def _openai(backbone: Any, cfg: ModelConfig) -> GenerationBackend:
    from davinci.llm.backends.openai import OpenAIBackend

    return OpenAIBackend.from_config(cfg)


@BACKENDS.register("vllm")
def _vllm(backbone: Any, cfg: ModelConfig) -> GenerationBackend:
    from davinci.llm.backends.vllm import VLLMBackend

    return VLLMBackend.from_config(cfg, backbone)


def make_backend(backbone: Any, cfg: ModelConfig) -> GenerationBackend:
    """The backend `cfg.backend` names, over `backbone` (hf) or the configured server / checkpoint."""
    return BACKENDS.get(cfg.backend)(backbone, cfg)


def ensure_ids(backbone: Any, messages: Sequence[Message], output: GenOutput) -> GenOutput:
    """`output` with prompt/response ids re-encoded by `backbone` when the backend returned none.

    The prompt is the chat template with the generation header; the response is the text's tokens plus the
    template's end-of-turn token when generation stopped (so training still teaches the model to stop). Logprobs stay
    as they are (empty): the trainer computes its own. Re-encoding can differ from the tokens the server
    sampled (tokenization is not unique), which is why servers that return ids are preferred.
    """
    if output.prompt_ids and output.response_ids:
        return output
    prompt = tuple(backbone.encode_chat(messages, add_generation_prompt=True))
    response = list(backbone.encode_text(output.text))
    if output.finish_reason == "stop":
        response.append(backbone.end_of_turn_id)
    return replace(output, prompt_ids=output.prompt_ids or prompt, response_ids=output.response_ids or tuple(response))


__all__ = ["BACKENDS", "make_backend", "ensure_ids"]
