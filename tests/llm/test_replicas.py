"""Generation over model replicas (`backends.replicas`): the same batches, seeds and outputs as one hf backend;
devices checked before any copy is made; make_backend dispatches on `model.gen_devices`.

CPU replicas stand in for GPUs here (this box has none); `benchmarks/gpu/learning_demo.py --gen-devices` runs
the threaded path on real devices."""

from __future__ import annotations

import pytest

from davinci.errors import ConfigError
from davinci.llm.backends import make_backend
from davinci.llm.backends.hf import HFBackend
from davinci.llm.backends.replicas import ReplicaBackend, check_devices
from davinci.llm.types import Sampling


def _prompts(n: int = 7) -> list[list[dict]]:
    texts = ["def f(x):", "import torch\n" * 6, "class ModelNew(nn.Module):\n    pass", "x" * 3, "return", "for i in", "@triton.jit"]
    return [[{"role": "user", "content": texts[i % len(texts)] + " " * (i // len(texts))}] for i in range(n)]


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.prompt_ids == y.prompt_ids and x.response_ids == y.response_ids and x.text == y.text
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)


def test_sampled_outputs_equal_one_backend(tiny_backbone_session):
    # batch b goes to replica b % 3 with seed + b: the outputs are the single backend's, prompt for prompt
    sampling = Sampling(max_new_tokens=12, temperature=1.0, seed=11)
    one = HFBackend(tiny_backbone_session, batch_size=2).generate(_prompts(), sampling)
    many = ReplicaBackend(tiny_backbone_session, ["cpu", "cpu", "cpu"], batch_size=2)
    assert len(many.replicas) == 3 and many.replicas[1].backbone.model is not tiny_backbone_session.model
    _same(many.generate(_prompts(), sampling), one)


def test_threaded_replicas_stream_every_batch_once(tiny_backbone_session):
    # the threaded path (GPUs') yields each of the four batches once, in completion order; greedy draws no random
    # numbers, so CPU threads may share the CPU generator here
    greedy = Sampling(max_new_tokens=10, greedy=True)
    one = HFBackend(tiny_backbone_session, batch_size=2).generate(_prompts(), greedy)
    many = ReplicaBackend(tiny_backbone_session, ["cpu", "cpu"], batch_size=2, concurrent=True)
    batches = list(many.generate_batches(_prompts(), greedy))
    assert sorted(len(b) for b in batches) == [1, 2, 2, 2]
    got = {i: out for batch in batches for i, out in batch}
    assert sorted(got) == list(range(7))
    _same([got[i] for i in range(7)], one)


def test_devices_are_checked_before_any_copy(tiny_backbone_session):
    with pytest.raises(ConfigError, match="starts with cuda:1.*on cpu"):
        check_devices(tiny_backbone_session, ["cuda:1", "cpu"])
    with pytest.raises(ConfigError, match="CUDA device"):
        check_devices(tiny_backbone_session, ["cpu", "cuda:7"])


def test_make_backend_builds_replicas_for_several_devices(tiny_backbone_session):
    from dataclasses import replace

    cfg = tiny_backbone_session.cfg
    assert isinstance(make_backend(tiny_backbone_session, replace(cfg, gen_devices=("cpu", "cpu"))), ReplicaBackend)
    assert isinstance(make_backend(tiny_backbone_session, replace(cfg, gen_devices=("cpu",))), HFBackend)
