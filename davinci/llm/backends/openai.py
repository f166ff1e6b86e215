"""Generation through an OpenAI-compatible chat-completions server (`vllm serve`, SGLang, davinci.llm.server).

The server runs in its own environment (vLLM pins its own torch/transformers/fastapi; infra/vllm/README.md)
and serves a checkpoint folder written by `Backbone.save`; this client only speaks HTTP (httpx).

Choices:
- One request per prompt (`n: 1`), `openai_concurrency` in flight at once (a thread pool over one
  `httpx.Client`); the server batches concurrent requests itself (vLLM's continuous batching).
- Greedy = temperature 0. A seed gives request i the seed `seed + i`, so equal prompts in a group still
  differ.
- Retries with exponential backoff on connection errors, timeouts, 429 and 5xx; other 4xx fail at once
  with the server's message. After the last retry `BackendUnavailable` names the URL and the fix.
- Token ids and logprobs: `logprobs: true` is standard; with `openai_extensions` the request also carries
  vLLM's `return_token_ids` (prompt ids at the top level, response ids per choice) and disables the
  server-side top-k / repetition-penalty defaults. Ids are returned only when both prompt and response ids
  came back; logprobs only when they align one-to-one with the response ids. Otherwise they are empty and
  the trainer re-encodes (`davinci.llm.backends.ensure_ids`).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import httpx

from davinci.errors import ConfigError, DavinciError
from davinci.llm.config import ModelConfig
from davinci.llm.types import GenOutput, Message, Sampling

RETRY_STATUS = {408, 429, 500, 502, 503, 504}


class BackendUnavailable(DavinciError):
    """The generation server could not be reached or kept failing."""


def api_root(base_url: str) -> str:
    """"http://h:8000/v1/" or "http://h:8000" -> "http://h:8000" (endpoints add /v1/...)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class OpenAIBackend:
    """`GenerationBackend` over HTTP chat completions."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "",
        timeout_s: float = 600.0,
        max_retries: int = 3,
        concurrency: int = 8,
        extensions: bool = True,
        api_key: str = "",
        backoff_s: float = 0.5,
    ) -> None:
        if not base_url:
            raise ConfigError("model.backend=openai needs model.openai_base_url", "set it to the server, e.g. http://127.0.0.1:8000/v1")
        self.root = api_root(base_url)
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.concurrency = max(1, concurrency)
        self.extensions = extensions
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.backoff_s = backoff_s

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "OpenAIBackend":
        return cls(
            cfg.openai_base_url,
            model=cfg.openai_model,
            timeout_s=cfg.openai_timeout_s,
            max_retries=cfg.openai_max_retries,
            concurrency=cfg.openai_concurrency,
            extensions=cfg.openai_extensions,
            api_key=os.environ.get(cfg.openai_api_key_env, "") if cfg.openai_api_key_env else "",
        )

    # ------------------------------------------------------------------ HTTP
    def _request(self, client: httpx.Client, method: str, path: str, payload: dict | None = None) -> dict:
        url = f"{self.root}{path}"
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                resp = client.request(method, url, json=payload, headers=self.headers, timeout=self.timeout_s)
            except httpx.HTTPError as exc:  # connection refused, reset, timeout
                last = f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code in RETRY_STATUS:
                last = f"HTTP {resp.status_code}: {resp.text[:300]}"
                continue
            if resp.status_code >= 400:
                raise BackendUnavailable(f"{method} {url} failed with HTTP {resp.status_code}: {resp.text[:500]}", "check the request fields the server accepts (model.openai_extensions=false for strict servers)")
            try:
                return resp.json()
            except ValueError:
                last = f"response is not JSON: {resp.text[:200]}"
        raise BackendUnavailable(
            f"{method} {url} failed after {self.max_retries + 1} attempts ({last})",
            "start the server (infra/vllm/README.md or `python -m davinci.llm.server --checkpoint DIR --port N`) and check model.openai_base_url",
        )

    def call(self, method: str, path: str, payload: dict | None = None) -> Any:
        """One request to the server (with the retries above), e.g. the weight-update endpoints."""
        with httpx.Client() as client:
            return self._request(client, method, path, payload)

    def served_model(self, client: httpx.Client) -> str:
        """The configured model name, else the first model the server lists."""
        if self.model:
            return self.model
        data = self._request(client, "GET", "/v1/models").get("data") or []
        if not data:
            raise BackendUnavailable(f"{self.root}/v1/models lists no model", "start the server with a checkpoint")
        self.model = str(data[0]["id"])
        return self.model

    # ------------------------------------------------------------------ generation
    def payload(self, messages: Sequence[Message], sampling: Sampling, index: int, model: str) -> dict[str, Any]:
        greedy = sampling.greedy or sampling.temperature <= 0
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "max_tokens": sampling.max_new_tokens,
            "temperature": 0.0 if greedy else sampling.temperature,
            "top_p": 1.0 if greedy else sampling.top_p,
            "n": 1,
            "logprobs": True,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed + index
        if self.extensions:
            body.update({"return_token_ids": True, "top_k": -1, "repetition_penalty": 1.0})
        return body

    def generate(self, prompts: Sequence[Sequence[Message]], sampling: Sampling) -> list[GenOutput]:
        if not prompts:
            return []
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        with httpx.Client(limits=limits) as client:
            model = self.served_model(client)
            jobs = [self.payload(p, sampling, i, model) for i, p in enumerate(prompts)]
            with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                bodies = list(pool.map(lambda job: self._request(client, "POST", "/v1/chat/completions", job), jobs))
        return [parse_completion(b) for b in bodies]


def parse_completion(body: dict[str, Any]) -> GenOutput:
    """GenOutput from a chat-completion response (ids/logprobs only when complete and aligned)."""
    try:
        choice = body["choices"][0]
        text = choice["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        raise BackendUnavailable(f"malformed chat-completion response: {str(body)[:300]}", "check that the server speaks the OpenAI chat-completions protocol") from None
    prompt_ids = tuple(int(i) for i in body.get("prompt_token_ids") or choice.get("prompt_token_ids") or ())
    response_ids = tuple(int(i) for i in choice.get("token_ids") or ())
    if not (prompt_ids and response_ids):
        prompt_ids, response_ids = (), ()
    content = (choice.get("logprobs") or {}).get("content") or []
    logprobs = tuple(float(t["logprob"]) for t in content if isinstance(t, dict) and "logprob" in t)
    if len(logprobs) != len(response_ids):
        logprobs = ()
    return GenOutput(text, prompt_ids, response_ids, logprobs, str(choice.get("finish_reason") or "stop"))
