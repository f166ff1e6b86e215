"""The llm package on a GPU (skipped without one): bf16 by default, generation, SFT and LoRA on cuda."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from davinci.llm.backbone import Backbone, wrap_lora
from davinci.llm.backends.hf import HFBackend
from davinci.llm.config import SFTConfig
from davinci.llm.sft import train_sft
from davinci.llm.tiny import create_tiny_backbone
from davinci.llm.types import ChatExample, Sampling
from davinci.tracking import MemoryLogger

pytestmark = pytest.mark.gpu


@pytest.fixture
def cuda_backbone(corpus, tiny_cfg):
    return create_tiny_backbone(corpus, tiny_cfg, seed=0, device="cuda")


def test_auto_dtype_is_bf16_on_the_gpu_and_generation_works(cuda_backbone):
    bb = cuda_backbone
    assert bb.device.type == "cuda" and next(bb.model.parameters()).dtype == torch.bfloat16
    prompts = [[{"role": "user", "content": "def f(x):" * k}] for k in (1, 4, 9)]
    outs = HFBackend(bb, batch_size=3).generate(prompts, Sampling(max_new_tokens=16, temperature=1.0, seed=0))
    for out in outs:
        ids = torch.tensor([list(out.prompt_ids) + list(out.response_ids)], device="cuda")
        with torch.no_grad():
            logp = bb.model(ids).logits.float().log_softmax(-1)[0]
        p = len(out.prompt_ids)
        expected = [logp[p - 1 + i, t].item() for i, t in enumerate(out.response_ids)]
        assert out.logprobs == pytest.approx(expected, abs=0.1)  # bf16: batched vs single forward differ slightly


def test_sft_and_lora_train_on_the_gpu(cuda_backbone, corpus, tiny_cfg):
    examples = [ChatExample("policy", ({"role": "user", "content": c[:80]}, {"role": "assistant", "content": c[:200]})) for c in corpus[:4]]
    stats = train_sft(cuda_backbone, examples, SFTConfig(epochs=8, batch_size=2, warmup_steps=2), MemoryLogger(), progress=False)
    assert sum(stats.losses[-3:]) < sum(stats.losses[:3])
    cfg = replace(tiny_cfg, lora=True, lora_r=4)
    lora = Backbone(wrap_lora(cuda_backbone.model, cfg), cuda_backbone.tokenizer, cfg, cuda_backbone.device)
    stats = train_sft(lora, examples, SFTConfig(epochs=2, batch_size=2), MemoryLogger(), progress=False)
    assert all(torch.isfinite(torch.tensor(stats.losses)))


def test_graph_decoder_replays_a_captured_step_on_the_gpu(cuda_backbone):
    # the default decoder on a GPU is graphgen with the step captured as a CUDA graph: greedy picks the forward's
    # argmax at every position (teacher-forced check, bf16 slack), and seeded sampling repeats exactly
    bb = cuda_backbone
    backend = HFBackend(bb, batch_size=4)
    assert backend.cache == "graph"
    prompts = [[{"role": "user", "content": "def f(x):" * k}] for k in (1, 4, 9, 2)]
    for out in backend.generate(prompts, Sampling(max_new_tokens=40, greedy=True)):
        ids = torch.tensor([list(out.prompt_ids) + list(out.response_ids)], device="cuda")
        with torch.no_grad():
            logp = bb.model(ids).logits.float().log_softmax(-1)[0]
        p = len(out.prompt_ids)
        for i, t in enumerate(out.response_ids):
            assert logp[p - 1 + i, t].item() >= logp[p - 1 + i].max().item() - 0.1
    sampling = Sampling(max_new_tokens=40, temperature=1.0, seed=7)
    first, again = backend.generate(prompts, sampling), backend.generate(prompts, sampling)
    assert [o.response_ids for o in first] == [o.response_ids for o in again]
