"""A small OpenAI-compatible chat-completions server for a Backbone checkpoint (FastAPI + uvicorn).

It serves any folder written by `Backbone.save` through the HF backend, so the OpenAI-compatible client
(`davinci.llm.backends.openai`) can be tested end to end over real HTTP without vLLM, and a CPU box can
serve the tiny model to other processes. For GPU throughput use `vllm serve` (infra/vllm/README.md); it
speaks the same protocol, including the vLLM fields this server imitates.

Endpoints: `POST /v1/chat/completions` (messages, max_tokens / max_completion_tokens, temperature (0 =
greedy), top_p, n, seed, logprobs, and vLLM's `return_token_ids`, `top_k` (-1/0 only), `repetition_penalty`
(1 only)), `GET /v1/models`, `GET /health`.

Weight updates, so an RL trainer can keep the served policy equal to the trained one (`rl.weightsync`):
  POST /v1/load_lora_adapter    {"lora_name", "lora_path"}  vLLM's runtime LoRA loading: the adapter folder
                                (peft format) is attached under that name; requests with `model: lora_name`
                                use it, requests for the base name run with adapters disabled
  POST /v1/unload_lora_adapter  {"lora_name"}               vLLM's
  POST /update_weights_from_disk {"model_path", "version"}  SGLang's full-weights reload from a checkpoint
                                folder (Backbone.save layout); `version` is reported back
  GET  /v1/models               every served name, with `root` (the folder) and `version` per entry
With `--frozen` the update endpoints answer 403 (as vLLM does without VLLM_ALLOW_RUNTIME_LORA_UPDATING): a
stale server, which the trainer must refuse to train from. Requests are served one at a time (a lock around the model);
the `n` samples of one request are generated as one batch. Stop strings and tools are not supported and
are rejected with HTTP 400 rather than silently ignored.

    python -m davinci.llm.server --checkpoint runs/sft/checkpoint --port 8011
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path
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


class LoraRequest(BaseModel):
    lora_name: str = Field(min_length=1)
    lora_path: str = ""


class WeightsRequest(BaseModel):
    model_path: str = Field(min_length=1)
    version: str = ""


class Served:
    """What the server generates with: the backbone, its name and version, and the attached adapters."""

    def __init__(self, backbone: Any, name: str, version: str, gen_batch_size: int, frozen: bool) -> None:
        from davinci.llm.backends.hf import HFBackend

        self.backbone, self.name, self.version, self.frozen = backbone, name, version, frozen
        self.backend = HFBackend(backbone, batch_size=gen_batch_size)
        self.adapters: dict[str, str] = {}  # lora_name -> folder
        self.lock = threading.Lock()

    def models(self) -> list[dict[str, Any]]:
        base = {"id": self.name, "object": "model", "owned_by": "davinci-kernel", "root": self.backbone.source_dir, "version": self.version}
        loras = [{"id": n, "object": "model", "owned_by": "davinci-kernel", "root": p, "parent": self.name, "version": n}
                 for n, p in self.adapters.items()]
        return [base, *loras]

    def load_lora(self, name: str, path: str) -> None:
        from peft import PeftModel

        model = self.backbone.model
        if name in self.adapters:
            model.delete_adapter(name)  # a reload under the same name replaces the weights
        if isinstance(model, PeftModel):
            model.load_adapter(path, adapter_name=name)
        else:
            self.backbone.model = PeftModel.from_pretrained(model, path, adapter_name=name)
        self.backbone.model.eval()
        self.adapters[name] = path

    def generate(self, model: str, prompts: list[Any], sampling: Sampling) -> list[GenOutput]:
        import contextlib

        if model in self.adapters:
            self.backbone.model.set_adapter(model)
            ctx: Any = contextlib.nullcontext()
        else:  # the base name: no adapter, even when some are attached
            ctx = self.backbone.model.disable_adapter() if self.adapters else contextlib.nullcontext()
        with ctx:
            return self.backend.generate(prompts, sampling)


def add_weight_routes(app: Any, served: Served) -> None:
    """`/v1/models` and the weight-update endpoints (see the module docstring)."""
    from fastapi import HTTPException

    def updatable() -> None:
        if served.frozen:
            raise HTTPException(status_code=403, detail="runtime weight updates are disabled on this server (--frozen)")

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": served.models()}

    @app.post("/v1/load_lora_adapter")
    def load_lora_adapter(req: LoraRequest) -> str:
        updatable()
        if not (Path(req.lora_path) / "adapter_config.json").is_file():
            raise HTTPException(status_code=400, detail=f"no peft adapter (adapter_config.json) in {req.lora_path!r}")
        with served.lock:
            served.load_lora(req.lora_name, req.lora_path)
        return f"Success: LoRA adapter '{req.lora_name}' added successfully."

    @app.post("/v1/unload_lora_adapter")
    def unload_lora_adapter(req: LoraRequest) -> str:
        updatable()
        with served.lock:
            if req.lora_name not in served.adapters:
                raise HTTPException(status_code=404, detail=f"no LoRA adapter named {req.lora_name!r}")
            served.backbone.model.delete_adapter(req.lora_name)
            del served.adapters[req.lora_name]
        return f"Success: LoRA adapter '{req.lora_name}' removed successfully."

    @app.post("/update_weights_from_disk")
    def update_weights_from_disk(req: WeightsRequest) -> dict[str, Any]:
        from davinci.llm.backbone import Backbone

        updatable()
        if not Path(req.model_path).is_dir():
            raise HTTPException(status_code=400, detail=f"no checkpoint folder {req.model_path!r}")
        with served.lock:
            new = Backbone.load(req.model_path, served.backbone.cfg, served.backbone.device)
            new.model.eval()
            served.backbone, served.backend.backbone = new, new
            served.adapters.clear()
            served.version = req.version or req.model_path
        return {"success": True, "message": "Succeeded to update model weights.", "version": served.version}


def create_app(backbone: Any, model_name: str, gen_batch_size: int = 16, *, version: str = "", frozen: bool = False):
    """The FastAPI app serving `backbone` under `model_name` (weights `version`; `frozen`: no updates)."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="davinci-kernel chat completions")
    served = Served(backbone, model_name, version or model_name, gen_batch_size, frozen)

    add_weight_routes(app, served)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest) -> dict[str, Any]:
        problem = unsupported(req)
        if problem:
            raise HTTPException(status_code=400, detail=problem)
        if req.model and req.model != served.name and req.model not in served.adapters:
            raise HTTPException(status_code=404, detail=f"The model `{req.model}` does not exist.")
        max_new = req.max_completion_tokens or req.max_tokens or 512
        sampling = Sampling(max_new, req.temperature, req.top_p, greedy=req.temperature == 0.0, seed=req.seed)
        messages = [{"role": m.role, "content": m.content} for m in req.messages]
        with served.lock:
            outs = served.generate(req.model, [messages] * req.n, sampling)
        body: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model or served.name,
            "choices": [choice_json(i, o, served.backbone.tokenizer, req) for i, o in enumerate(outs)],
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


class ServerProcess:
    """`python -m davinci.llm.server` in a child process on a free local port (tests, benchmarks, demos).

        with ServerProcess(checkpoint, model_name="tiny") as server:
            backend = OpenAIBackend(server.url)
    """

    def __init__(self, checkpoint: str | Path, *, model_name: str = "served", device: str = "cpu", frozen: bool = False,
                 log_path: str | Path | None = None, timeout_s: float = 120.0) -> None:
        import os
        import socket
        import subprocess
        import sys

        import httpx

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        repo = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]), "TOKENIZERS_PARALLELISM": "false"}
        cmd = [sys.executable, "-m", "davinci.llm.server", "--checkpoint", str(checkpoint), "--port", str(self.port),
               "--device", device, "--model-name", model_name] + (["--frozen"] if frozen else [])
        self.log = open(log_path or os.devnull, "w+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=repo)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode} (log: {log_path or 'not kept'})")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the server did not come up within {timeout_s:.0f} s")

    def stop(self) -> None:
        import subprocess

        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


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
    parser.add_argument("--version", default="", help="weights version reported by /v1/models (default: the model name)")
    parser.add_argument("--frozen", action="store_true", help="refuse weight updates (HTTP 403), like a plain vLLM server")
    args = parser.parse_args(argv)
    backbone = Backbone.load(args.checkpoint, ModelConfig(kind="hf", dtype=args.dtype), device=args.device)
    backbone.model.eval()
    name = args.model_name or args.checkpoint.rstrip("/").split("/")[-1]
    print(f"serving {args.checkpoint} as {name!r} on http://{args.host}:{args.port}/v1", flush=True)
    app = create_app(backbone, name, args.batch_size, version=args.version, frozen=args.frozen)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
