"""The graph-captured decoder (`backends.graphgen`) against transformers' own `generate` on tiny Llama and Qwen2
models (random init, float32 on the CPU, where the step runs eagerly: the same code the CUDA graph holds).

Each test checks one property: greedy tokens equal `generate`'s with left padding; the recorded log-probs are the
model's own forward at the sampling temperature; sampling follows the tempered distribution; top-p keeps what
transformers' warper keeps; a stopped row pads; LoRA adapters take part; layouts not checked here are refused."""

from __future__ import annotations

import pytest
import torch

from davinci.llm.backends.graphgen import Sampler, graph_generate, unsupported
from davinci.llm.backends.hf import left_pad
from davinci.llm.types import Sampling


def _model(kind: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    common = dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    cfg = LlamaConfig(**common) if kind == "llama" else Qwen2Config(**common)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # larger weights than the init's: a peaked distribution, so greedy ties are not a coin flip
        for p in model.parameters():
            p.mul_(3.0) if p.dim() > 1 else None
    return model


ROWS = [[5, 9, 17, 3, 44, 8, 21], [7, 7, 2], [60, 11, 90, 12, 13]]


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_greedy_equals_transformers_generate_with_left_padding(kind):
    model = _model(kind)
    ids, attn = left_pad(ROWS, pad_id=0)
    ref = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=12, do_sample=False, pad_token_id=0,
                         eos_token_id=None)[:, ids.shape[1]:]
    tokens, logprobs = graph_generate(model, ids, attn, 0, (), Sampling(max_new_tokens=12), greedy=True)
    assert tokens.tolist() == ref.tolist()
    assert tokens.shape == logprobs.shape == (3, 12)


def test_logprobs_are_the_forward_at_the_temperature():
    model = _model("qwen2")
    ids, attn = left_pad(ROWS, pad_id=0)
    torch.manual_seed(3)
    tokens, logprobs = graph_generate(model, ids, attn, 0, (), Sampling(max_new_tokens=10, temperature=0.7, top_p=0.9), greedy=False)
    for i, row in enumerate(ROWS):
        full = torch.tensor([row + tokens[i].tolist()])
        with torch.no_grad():
            logp = (model(full).logits[0] / 0.7).log_softmax(-1)
        expected = [logp[len(row) - 1 + j, t].item() for j, t in enumerate(tokens[i].tolist())]
        assert logprobs[i].tolist() == pytest.approx(expected, abs=1e-4)


def test_sampling_follows_the_tempered_distribution():
    # 20,000 draws from one row of logits: the empirical frequencies match softmax(logits / T)
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5]]).repeat(20000, 1)
    torch.manual_seed(0)
    token, _ = Sampler(Sampling(max_new_tokens=1, temperature=0.8), greedy=False)(logits)
    freq = torch.bincount(token, minlength=5).float() / 20000
    assert freq.tolist() == pytest.approx(torch.softmax(logits[0] / 0.8, -1).tolist(), abs=0.015)


def test_top_p_keeps_what_transformers_keeps():
    from transformers.generation.logits_process import TopPLogitsWarper

    torch.manual_seed(1)
    logits = torch.randn(64, 50) * 2
    kept = Sampler(Sampling(max_new_tokens=1, top_p=0.8), greedy=False)._top_p(logits)
    ref = TopPLogitsWarper(0.8)(torch.zeros(64, 1, dtype=torch.long), logits.clone())
    assert torch.equal(torch.isinf(kept), torch.isinf(ref))
    # ties at exactly top_p: probabilities [.5, .25, .25] keep 1 token at 0.5 and 2 at 0.75, as the warper does
    tied = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    for top_p in (0.5, 0.75):
        ours = Sampler(Sampling(max_new_tokens=1, top_p=top_p), greedy=False)._top_p(tied)
        theirs = TopPLogitsWarper(top_p)(torch.zeros(1, 1, dtype=torch.long), tied.clone())
        # which of two tied tokens goes depends on the sort; how many stay does not
        assert int((~torch.isinf(ours)).sum()) == int((~torch.isinf(theirs)).sum()) == (1 if top_p == 0.5 else 2), top_p


def test_a_stopped_row_pads_and_all_stopped_ends_early():
    model = _model("llama")
    ids, attn = left_pad(ROWS, pad_id=0)
    greedy, _ = graph_generate(model, ids, attn, 0, (), Sampling(max_new_tokens=12), greedy=True)
    stop = int(greedy[1, 2])  # row 1's third token becomes the stop token
    tokens, logprobs = graph_generate(model, ids, attn, 0, (stop,), Sampling(max_new_tokens=40), greedy=True, check_every=4)
    first = tokens[1].tolist().index(stop)
    assert first <= 2 and all(t == 0 for t in tokens[1, first + 1:].tolist())
    assert all(lp == 0 for lp in logprobs[1, first + 1:].tolist())
    if all(stop in row for row in tokens.tolist()):  # every row stopped: the host stops within check_every steps
        assert tokens.shape[1] < 40


def test_lora_adapters_take_part():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_model("llama"), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():  # a non-zero adapter (peft starts B at 0), so the adapted model differs from its base
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    ids, attn = left_pad(ROWS, pad_id=0)
    ref = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=8, do_sample=False, pad_token_id=0,
                         eos_token_id=None)[:, ids.shape[1]:]
    tokens, _ = graph_generate(model, ids, attn, 0, (), Sampling(max_new_tokens=8), greedy=True)
    assert tokens.tolist() == ref.tolist()


def test_layouts_not_checked_here_are_refused():
    from transformers import AutoModelForCausalLM, Qwen3Config

    model = AutoModelForCausalLM.from_config(Qwen3Config(vocab_size=97, hidden_size=64, intermediate_size=128,
                                                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2))
    assert "qwen3" in unsupported(model)
    assert unsupported(_model("qwen2")) == "" and unsupported(_model("llama")) == ""
