"""The OpenAI-compatible backend against a real HTTP server: `python -m davinci.llm.server` started in a
subprocess on a free port, serving a tiny checkpoint (no mocked client, no mocked transport)."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from davinci.llm.backends import ensure_ids, make_backend
from davinci.llm.backends.hf import HFBackend
from davinci.llm.backends.openai import BackendUnavailable, OpenAIBackend, api_root
from davinci.llm.config import ModelConfig
from davinci.llm.server import ServerProcess
from davinci.llm.types import Sampling

PROMPTS = [[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "def f(x):"}], [{"role": "user", "content": "import torch\n" * 3}]]


@pytest.fixture(scope="module")
def server(tiny_backbone_session, tmp_path_factory):
    """(base_url, backbone): the server process serves a checkpoint of the session's tiny backbone."""
    ckpt = tiny_backbone_session.save(tmp_path_factory.mktemp("served") / "tiny")
    with ServerProcess(ckpt, model_name="tiny", log_path=tmp_path_factory.mktemp("log") / "server.log") as proc:
        yield proc.url, tiny_backbone_session


def test_greedy_over_http_equals_in_process_generation(server):
    url, bb = server
    backend = make_backend(None, ModelConfig(backend="openai", openai_base_url=url))
    remote = backend.generate(PROMPTS, Sampling(max_new_tokens=20, greedy=True))
    local = HFBackend(bb).generate(PROMPTS, Sampling(max_new_tokens=20, greedy=True))
    assert backend.model == "tiny"  # discovered through GET /v1/models
    for r, l in zip(remote, local):
        assert r.text == l.text and r.finish_reason == l.finish_reason
        assert r.prompt_ids == l.prompt_ids and r.response_ids == l.response_ids
        assert r.logprobs == pytest.approx(l.logprobs, abs=1e-4)


def test_seeded_requests_are_reproducible_and_differ_per_index(server):
    url, _ = server
    backend = OpenAIBackend(url, concurrency=2)
    sampling = Sampling(max_new_tokens=12, temperature=1.0, seed=3)
    a = backend.generate([PROMPTS[0]] * 3, sampling)
    b = backend.generate([PROMPTS[0]] * 3, sampling)
    assert [o.response_ids for o in a] == [o.response_ids for o in b]
    assert len({o.response_ids for o in a}) > 1  # request i uses seed + i


def test_without_extensions_ids_are_empty_and_reencoding_fills_them(server):
    url, bb = server
    backend = OpenAIBackend(url, extensions=False)
    out = backend.generate(PROMPTS[:1], Sampling(max_new_tokens=10, temperature=1.0, seed=0))[0]
    assert out.prompt_ids == () and out.response_ids == () and out.logprobs == () and out.text
    filled = ensure_ids(bb, PROMPTS[0], out)
    assert filled.prompt_ids == tuple(bb.encode_chat(PROMPTS[0], add_generation_prompt=True))
    assert bb.decode(filled.response_ids) == out.text


def test_a_request_the_server_rejects_fails_at_once_with_its_message(server):
    url, _ = server
    backend = OpenAIBackend(url, max_retries=3, backoff_s=5.0)
    payload = backend.payload(PROMPTS[0], Sampling(max_new_tokens=4), 0, "tiny")
    payload["stop"] = ["\n"]
    start = time.time()
    with pytest.raises(BackendUnavailable, match="HTTP 400.*stop strings"):
        with httpx.Client() as client:
            backend._request(client, "POST", "/v1/chat/completions", payload)
    assert time.time() - start < 5  # a 4xx is not retried


def test_an_unreachable_server_fails_after_retries_naming_the_fix():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = OpenAIBackend(f"http://127.0.0.1:{port}/v1", model="m", max_retries=2, backoff_s=0.01, timeout_s=2)
    with pytest.raises(BackendUnavailable, match="after 3 attempts") as info:
        backend.generate(PROMPTS[:1], Sampling(max_new_tokens=4))
    assert "davinci.llm.server" in str(info.value)


def test_api_root_accepts_both_url_forms():
    assert api_root("http://h:8000/v1/") == api_root("http://h:8000") == "http://h:8000"
