"""vLLM's offline engine is optional: where `import vllm` fails, the backend says how to run it instead."""

from __future__ import annotations

import importlib.util

import pytest

from davinci.errors import ConfigError
from davinci.llm.backends import make_backend
from davinci.llm.config import ModelConfig
from davinci.llm.types import Sampling


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is importable here")
def test_missing_vllm_names_the_server_route():
    backend = make_backend(None, ModelConfig(backend="vllm", name_or_path="/some/checkpoint"))  # lazy: no import yet
    with pytest.raises(ConfigError) as info:
        backend.generate([[{"role": "user", "content": "hi"}]], Sampling(max_new_tokens=4))
    text = str(info.value)
    assert "import vllm" in text and "infra/vllm/README.md" in text and "model.backend=openai" in text


def test_vllm_backend_needs_a_checkpoint():
    with pytest.raises(ConfigError, match="name_or_path"):
        make_backend(None, ModelConfig(backend="vllm"))
