"""Generation through vLLM's offline engine (`vllm.LLM`), for environments where `import vllm` works.

vLLM pins its own torch, transformers and fastapi, so it normally lives in its own environment
(infra/vllm/README.md) and is reached through the OpenAI-compatible backend. This backend is for a process
that runs inside such an environment. `vllm` is imported lazily, on the first `generate`; when it cannot be
imported, `ConfigError` names the fix (use `vllm serve` + `model.backend=openai`).

Choices:
- The engine loads the folder the live backbone was loaded from (its merged weights: the weights being
  trained), else `model.name_or_path` when there is no backbone; after a weight update save the backbone
  and call `reload(folder)`. Loading the hub base model instead would sample from stale weights.
- `llm.chat` applies the checkpoint's own chat template, like `Backbone.encode_chat`.
- One `SamplingParams` per prompt (seed + i), `logprobs=0`: vLLM then returns the chosen token's logprob
  under the raw model distribution (its default logprobs mode), the same convention as the HF backend.
"""

from __future__ import annotations

from typing import Any, Sequence

from davinci.errors import ConfigError
from davinci.llm.config import ModelConfig
from davinci.llm.types import GenOutput, Message, Sampling

VLLM_FIX = (
    "run vLLM in its own environment: `bash infra/vllm/launch.sh <checkpoint> <port>` (infra/vllm/README.md), "
    "then set model.backend=openai and model.openai_base_url=http://127.0.0.1:<port>/v1"
)


def import_vllm() -> Any:
    try:
        import vllm
    except Exception as exc:  # ImportError, or a broken install raising anything at import
        raise ConfigError(f"model.backend=vllm, but `import vllm` fails here ({type(exc).__name__}: {exc})", VLLM_FIX) from None
    return vllm


class VLLMBackend:
    def __init__(self, model_path: str, cfg: ModelConfig) -> None:
        if not model_path:
            raise ConfigError("model.backend=vllm needs a checkpoint folder", "set model.name_or_path or pass a loaded backbone")
        self.model_path = model_path
        self.cfg = cfg
        self._llm: Any = None

    @classmethod
    def from_config(cls, cfg: ModelConfig, backbone: Any = None) -> "VLLMBackend":
        live = getattr(backbone, "source_dir", "") if backbone is not None else ""
        path = live or cfg.name_or_path
        return cls(path, cfg)

    def engine(self) -> Any:
        if self._llm is None:
            vllm = import_vllm()
            dtype = "bfloat16" if self.cfg.dtype in ("auto", "bfloat16") else "float32"
            self._llm = vllm.LLM(
                model=self.model_path,
                dtype=dtype,
                gpu_memory_utilization=self.cfg.vllm_gpu_memory_utilization,
                tensor_parallel_size=self.cfg.vllm_tensor_parallel,
                max_model_len=self.cfg.max_seq_len,
                seed=0,
            )
        return self._llm

    def reload(self, model_path: str) -> None:
        """Serve another checkpoint (e.g. the one just saved after an update); the engine restarts lazily."""
        self._llm = None
        self.model_path = model_path

    def generate(self, prompts: Sequence[Sequence[Message]], sampling: Sampling) -> list[GenOutput]:
        if not prompts:
            return []
        llm = self.engine()
        vllm = import_vllm()
        greedy = sampling.greedy or sampling.temperature <= 0
        params = [
            vllm.SamplingParams(
                n=1,
                max_tokens=sampling.max_new_tokens,
                temperature=0.0 if greedy else sampling.temperature,
                top_p=1.0 if greedy else sampling.top_p,
                seed=None if sampling.seed is None else sampling.seed + i,
                logprobs=0,
            )
            for i in range(len(prompts))
        ]
        conversations = [[{"role": m["role"], "content": m["content"]} for m in p] for p in prompts]
        results = llm.chat(conversations, sampling_params=params, use_tqdm=False)
        return [to_genoutput(r) for r in results]


def to_genoutput(result: Any) -> GenOutput:
    """GenOutput from a vLLM `RequestOutput` (first completion)."""
    out = result.outputs[0]
    ids = tuple(int(t) for t in out.token_ids)
    logprobs: tuple[float, ...] = ()
    if out.logprobs and len(out.logprobs) == len(ids):
        logprobs = tuple(float(step[tok].logprob) for tok, step in zip(ids, out.logprobs))
    finish = "length" if out.finish_reason == "length" else "stop"
    return GenOutput(out.text, tuple(int(t) for t in result.prompt_token_ids or ()), ids, logprobs, finish)
