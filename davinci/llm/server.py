"""A small OpenAI-compatible chat-completions server for a Backbone checkpoint (FastAPI + uvicorn).

It serves any folder written by `Backbone.save` through the HF backend, so the OpenAI-compatible client
(`davinci.llm.backends.openai`) can be tested end to end over real HTTP without vLLM, and a CPU box can
serve the tiny model to other processes. For GPU throughput use `vllm serve` (infra/vllm/README.md); it
speaks the same protocol, including the vLLM fields this server imitates.

Endpoints: `POST /v1/chat/completions` (messages, max_tokens / max_completion_tokens, temperature (0 =
greedy), top_p, n, seed, logprobs, and vLLM's `return_token_ids`, `top_k` (-1/0 only), `repetition_penalty`
(1 only)), `GET /v1/models`, `GET /health`. Requests are served one at a time (a lock around the model);
the `n` samples of one request are generated as one batch. Stop strings and tools are not supported and
are rejected with HTTP 400 rather than silently ignored.

    python -m davinci.llm.server --checkpoint runs/sft/checkpoint --port 8011
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from davinci.llm.types import GenOutput, Sampling


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = ""
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=64)
    seed: int | None = None
    logprobs: bool = False
    return_token_ids: bool = False
    top_k: int = -1
    repetition_penalty: float = 1.0
    stop: str | list[str] | None = None
    tools: list[Any] | None = None


def unsupported(req: ChatRequest) -> str:
    """Why this server cannot honour `req` exactly ("" when it can)."""
    if req.stop:
        return "stop strings are not supported (generation stops at the end-of-turn token)"
    if req.tools:
        return "tools are not supported"
    if req.top_k not in (-1, 0):
        return "top_k must be -1 or 0 (disabled)"
    if req.repetition_penalty != 1.0:
        return "repetition_penalty must be 1.0"
    return ""


def choice_json(index: int, out: GenOutput, tokenizer: Any, req: ChatRequest) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": index,
        "message": {"role": "assistant", "content": out.text},
        "finish_reason": out.finish_reason,
        "logprobs": None,
    }
    if req.logprobs:
        tokens = tokenizer.convert_ids_to_tokens(list(out.response_ids))
        choice["logprobs"] = {
            "content": [{"token": t, "logprob": lp, "bytes": None, "top_logprobs": []} for t, lp in zip(tokens, out.logprobs)]
        }
    if req.return_token_ids:
        choice["token_ids"] = list(out.response_ids)
    return choice


def create_app(backbone: Any, model_name: str, gen_batch_size: int = 16):
    """The FastAPI app serving `backbone` under `model_name`."""
    from fastapi import FastAPI, HTTPException

    from davinci.llm.backends.hf import HFBackend

    app = FastAPI(title="davinci-kernel chat completions")
    backend = HFBackend(backbone, batch_size=gen_batch_size)
    lock = threading.Lock()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "davinci-kernel"}]}

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest) -> dict[str, Any]:
        problem = unsupported(req)
        if problem:
            raise HTTPException(status_code=400, detail=problem)
        max_new = req.max_completion_tokens or req.max_tokens or 512
        sampling = Sampling(max_new, req.temperature, req.top_p, greedy=req.temperature == 0.0, seed=req.seed)
        messages = [{"role": m.role, "content": m.content} for m in req.messages]
        with lock:
            outs = backend.generate([messages] * req.n, sampling)
        body: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [choice_json(i, o, backbone.tokenizer, req) for i, o in enumerate(outs)],
            "usage": {
                "prompt_tokens": len(outs[0].prompt_ids),
                "completion_tokens": sum(len(o.response_ids) for o in outs),
                "total_tokens": len(outs[0].prompt_ids) + sum(len(o.response_ids) for o in outs),
            },
        }
        if req.return_token_ids:
            body["prompt_token_ids"] = list(outs[0].prompt_ids)
        return body

    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    from davinci.llm.backbone import Backbone
    from davinci.llm.config import ModelConfig

    parser = argparse.ArgumentParser(description="Serve a Backbone checkpoint over the OpenAI chat-completions protocol.")
    parser.add_argument("--checkpoint", required=True, help="folder written by Backbone.save (or any transformers checkpoint)")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--model-name", default="", help="name reported by /v1/models (default: the folder name)")
    parser.add_argument("--batch-size", type=int, default=16, help="prompts per generate call")
    args = parser.parse_args(argv)
    backbone = Backbone.load(args.checkpoint, ModelConfig(kind="hf", dtype=args.dtype), device=args.device)
    name = args.model_name or args.checkpoint.rstrip("/").split("/")[-1]
    print(f"serving {args.checkpoint} as {name!r} on http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(create_app(backbone, name, args.batch_size), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
