"""The transformers backend: batching and left padding change nothing, logprobs are the model's own,
seeded sampling is reproducible and leaves the caller's RNG alone; the backend registry dispatches."""

from __future__ import annotations

import pytest
import torch

from davinci.errors import ConfigError, UnknownName
from davinci.llm.backends import BACKENDS, ensure_ids, make_backend
from davinci.llm.backends.hf import HFBackend
from davinci.llm.config import ModelConfig
from davinci.llm.types import GenOutput, Sampling


def _prompts() -> list[list[dict]]:
    texts = ["def f(x):", "import torch\n" * 6, "class ModelNew(nn.Module):\n    pass", "x" * 3]
    return [[{"role": "user", "content": t}] for t in texts]


def test_batched_greedy_equals_unbatched(tiny_backbone_session):
    greedy = Sampling(max_new_tokens=24, greedy=True)
    batched = HFBackend(tiny_backbone_session, batch_size=4).generate(_prompts(), greedy)
    single = HFBackend(tiny_backbone_session, batch_size=1).generate(_prompts(), greedy)
    for a, b in zip(batched, single):
        assert a.response_ids == b.response_ids and a.text == b.text and a.prompt_ids == b.prompt_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert len({len(o.prompt_ids) for o in batched}) > 1  # the batch really needed padding


def test_streamed_batches_equal_generate(tiny_backbone_session):
    # generate_batches (the runner's overlap path) yields generate's batches as they finish: longest prompts
    # first, batch b seeded with seed + b, so seeded sampling gives the same outputs
    sampling = Sampling(max_new_tokens=12, temperature=1.0, seed=5)
    backend = HFBackend(tiny_backbone_session, batch_size=3)
    whole = backend.generate(_prompts(), sampling)
    batches = list(backend.generate_batches(_prompts(), sampling))
    assert [len(b) for b in batches] == [3, 1]
    lengths = [len(whole[i].prompt_ids) for i, _ in batches[0]]
    assert min(lengths) >= len(whole[batches[1][0][0]].prompt_ids)  # the longest prompts went first
    streamed = {i: out for batch in batches for i, out in batch}
    assert sorted(streamed) == [0, 1, 2, 3]
    for i, out in streamed.items():
        assert out.response_ids == whole[i].response_ids and out.text == whole[i].text


def test_logprobs_are_the_tempered_distribution_before_top_p(tiny_backbone_session):
    # log pi_T (what the trainer scores at agents.temperature), not the raw T=1 logits nor the top-p renormalised
    # distribution
    bb = tiny_backbone_session
    outs = HFBackend(bb).generate(_prompts(), Sampling(max_new_tokens=16, temperature=0.7, top_p=0.9, seed=1))
    for out in outs:
        ids = torch.tensor([list(out.prompt_ids) + list(out.response_ids)])
        with torch.no_grad():
            logp = (bb.model(ids).logits / 0.7).log_softmax(-1)[0]
        p = len(out.prompt_ids)
        expected = [logp[p - 1 + i, tok].item() for i, tok in enumerate(out.response_ids)]
        assert len(out.logprobs) == len(out.response_ids) == 16
        assert out.logprobs == pytest.approx(expected, abs=1e-4)
        assert out.prompt_ids == tuple(bb.encode_chat(_prompts()[outs.index(out)], add_generation_prompt=True))


def test_seeded_sampling_is_reproducible_and_keeps_the_global_rng(tiny_backbone_session):
    backend = HFBackend(tiny_backbone_session, batch_size=2)
    state = torch.random.get_rng_state()
    a = backend.generate(_prompts(), Sampling(max_new_tokens=12, seed=7))
    b = backend.generate(_prompts(), Sampling(max_new_tokens=12, seed=7))
    c = backend.generate(_prompts(), Sampling(max_new_tokens=12, seed=8))
    assert torch.equal(state, torch.random.get_rng_state())
    assert [o.response_ids for o in a] == [o.response_ids for o in b]
    assert [o.response_ids for o in a] != [o.response_ids for o in c]
    same = backend.generate([_prompts()[0]] * 4, Sampling(max_new_tokens=12, seed=7))
    assert len({o.response_ids for o in same}) > 1  # one prompt sampled 4 times gives different answers


def test_output_is_cut_after_the_end_of_turn_token(tiny_backbone_session):
    bb = tiny_backbone_session
    backend = HFBackend(bb)
    word = bb.encode_text("hello")
    out = backend._output((1, 2), word + [bb.eos_token_id, bb.pad_token_id, bb.pad_token_id], [-0.5] * (len(word) + 3))
    assert out.finish_reason == "stop" and out.text == "hello"
    assert out.response_ids == tuple(word) + (bb.eos_token_id,) and len(out.logprobs) == len(out.response_ids)
    longer = backend._output((1, 2), word, [-0.5] * len(word))
    assert longer.finish_reason == "length" and longer.response_ids == tuple(word)


def test_registry_dispatch_and_errors(tiny_backbone_session):
    assert isinstance(make_backend(tiny_backbone_session, ModelConfig(gen_batch_size=3)), HFBackend)
    with pytest.raises(ConfigError, match="backbone"):
        make_backend(None, ModelConfig(backend="hf"))
    with pytest.raises(UnknownName, match="hf, openai, vllm"):
        BACKENDS.get("sglang-magic")
    with pytest.raises(ConfigError, match="openai_base_url"):
        make_backend(None, ModelConfig(backend="openai"))


def test_ensure_ids_reencodes_a_text_only_output(tiny_backbone_session):
    bb = tiny_backbone_session
    msgs = [{"role": "user", "content": "hi"}]
    bare = GenOutput("x = 1", (), (), (), "stop")
    filled = ensure_ids(bb, msgs, bare)
    assert filled.prompt_ids == tuple(bb.encode_chat(msgs, add_generation_prompt=True))
    assert filled.response_ids == tuple(bb.encode_text("x = 1")) + (bb.eos_token_id,)
    assert filled.logprobs == () and ensure_ids(bb, msgs, filled) is filled
    cut = ensure_ids(bb, msgs, GenOutput("x = 1", (), (), (), "length"))
    assert cut.response_ids == tuple(bb.encode_text("x = 1"))


def test_kv_bytes_and_auto_batch_size_by_hand():
    from types import SimpleNamespace

    from davinci.llm.backends.hf import auto_batch_size, kv_bytes_per_token

    # Qwen2.5-Coder-1.5B: 28 layers, 2 KV heads of 128 (1536 / 12), bf16: 2 * 28 * 2 * 128 * 2 = 28,672 bytes
    qwen = SimpleNamespace(num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, hidden_size=1536)
    assert kv_bytes_per_token(qwen, 2) == 28_672
    # 8,192 tokens: 234,881,024 B of cache + 3 * 4 * 151,936 = 1,823,232 B of logits rows = 236,704,256 B a
    # sequence; 0.8 * 40 GiB = 34,359,738,368 B -> 145 sequences
    assert auto_batch_size(40 << 30, 28_672, 8192, 151_936) == 145
    assert auto_batch_size(1 << 20, 28_672, 8192, 151_936) == 1      # never 0
    assert auto_batch_size(1 << 50, 28_672, 8192, 151_936) == 256    # capped


def test_static_cache_generates_what_the_dynamic_one_does(tiny_backbone_session):
    greedy = Sampling(max_new_tokens=12, greedy=True)
    dynamic = HFBackend(tiny_backbone_session, batch_size=4).generate(_prompts(), greedy)
    static = HFBackend(tiny_backbone_session, batch_size=4, cache="static").generate(_prompts(), greedy)
    assert [o.response_ids for o in static] == [o.response_ids for o in dynamic]


def test_batch_size_zero_on_the_cpu_is_one_batch(tiny_backbone_session):
    backend = HFBackend(tiny_backbone_session, batch_size=0)
    encoded = [[1, 2, 3]] * 5
    assert backend._batch_size(encoded, Sampling(max_new_tokens=4)) == 5


def test_graph_decoder_gives_generates_outputs(tiny_backbone_session):
    # gen_cache: graph (graphgen, run eagerly on the CPU) and transformers' generate agree on greedy tokens,
    # texts, stop handling and log-probs through the backend's batching and padding
    greedy = Sampling(max_new_tokens=24, greedy=True)
    graph = HFBackend(tiny_backbone_session, batch_size=4, cache="graph").generate(_prompts(), greedy)
    dynamic = HFBackend(tiny_backbone_session, batch_size=4, cache="dynamic").generate(_prompts(), greedy)
    for a, b in zip(graph, dynamic):
        assert a.response_ids == b.response_ids and a.text == b.text and a.finish_reason == b.finish_reason
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_auto_decoder_is_dynamic_on_the_cpu_and_bad_names_are_config_errors(tiny_backbone_session):
    assert HFBackend(tiny_backbone_session).cache == "dynamic"  # graph capture needs a GPU
    with pytest.raises(ConfigError, match="gen_cache"):
        HFBackend(tiny_backbone_session, cache="paged")
