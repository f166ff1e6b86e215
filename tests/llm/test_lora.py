"""LoRA through peft: only adapters train, the saved checkpoint is a merged plain-transformers model, and
loading with `lora` resumes the very same adapters."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from davinci.errors import ConfigError
from davinci.llm.backbone import Backbone, is_lora, wrap_lora
from davinci.llm.config import SFTConfig
from davinci.llm.sft import train_sft
from davinci.llm.types import ChatExample
from davinci.tracking import MemoryLogger


@pytest.fixture
def lora_backbone(tiny_backbone_session, tiny_cfg):
    cfg = replace(tiny_cfg, lora=True, lora_r=4, lora_alpha=8)
    bb = copy.deepcopy(tiny_backbone_session)
    return Backbone(wrap_lora(bb.model, cfg), bb.tokenizer, cfg, bb.device)


def _train(bb: Backbone, corpus: list[str]) -> None:
    examples = [ChatExample("policy", ({"role": "user", "content": c[:80]}, {"role": "assistant", "content": c[:160]})) for c in corpus[:4]]
    train_sft(bb, examples, SFTConfig(epochs=2, batch_size=2, lr=1e-2), MemoryLogger(), progress=False)


def _logits(model: torch.nn.Module, bb: Backbone) -> torch.Tensor:
    ids = torch.tensor([bb.encode_chat([{"role": "user", "content": "def f(x):"}], add_generation_prompt=True)])
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_only_adapters_are_trainable_and_only_they_change(lora_backbone, tiny_backbone_session, corpus):
    bb = lora_backbone
    assert is_lora(bb.model)
    names = [n for n, p in bb.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    before = {n: p.detach().clone() for n, p in bb.model.named_parameters()}
    _train(bb, corpus)
    after = dict(bb.model.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and all("lora_B" in n or "lora_A" in n for n in changed)
    assert any("lora_B" in n for n in changed)


def test_saved_checkpoint_is_merged_and_resumes_the_adapters(lora_backbone, corpus, tmp_path):
    bb = lora_backbone
    _train(bb, corpus)
    expected = _logits(bb.model, bb)
    path = bb.save(tmp_path / "ckpt")
    merged = AutoModelForCausalLM.from_pretrained(path)  # plain transformers, no peft
    assert torch.allclose(_logits(merged, bb), expected, atol=1e-4)
    resumed = Backbone.load(path, bb.cfg, device="cpu")
    assert is_lora(resumed.model)
    assert torch.allclose(_logits(resumed.model, resumed), expected, atol=1e-5)
    a = {n: p for n, p in bb.model.named_parameters() if "lora_" in n}
    b = {n: p for n, p in resumed.model.named_parameters() if "lora_" in n}
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    assert all(p.requires_grad for p in b.values())


def test_targets_that_match_nothing_name_the_valid_layers(tiny_backbone_session, tiny_cfg):
    bb = copy.deepcopy(tiny_backbone_session)
    with pytest.raises(ConfigError, match="q_proj"):
        wrap_lora(bb.model, replace(tiny_cfg, lora=True, lora_targets=("attention_dense",)))
