"""The tiny backbone: deterministic creation, exact tokenizer round trip, chat template and assistant mask,
checkpoint round trip through plain transformers."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from davinci.errors import InputNotFound
from davinci.llm.backbone import Backbone
from davinci.llm.tiny import create_tiny_backbone


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_same_seed_gives_identical_backbone_and_leaves_global_rng_alone(corpus, tiny_cfg):
    state = torch.random.get_rng_state()
    a = create_tiny_backbone(corpus, tiny_cfg, seed=3, device="cpu")
    b = create_tiny_backbone(corpus, tiny_cfg, seed=3, device="cpu")
    c = create_tiny_backbone(corpus, tiny_cfg, seed=4, device="cpu")
    assert torch.equal(state, torch.random.get_rng_state())
    assert a.tokenizer.get_vocab() == b.tokenizer.get_vocab() == c.tokenizer.get_vocab()
    assert _same_weights(a.model, b.model)
    assert not _same_weights(a.model, c.model)
    cfg = a.model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (64, 2, 4)
    assert cfg.vocab_size == len(a.tokenizer) <= tiny_cfg.tiny_vocab


@pytest.mark.parametrize("seed", range(3))
def test_tokenizer_round_trips_any_text(tiny_backbone_session, corpus, seed):
    rng = random.Random(seed)
    alphabet = "abcXYZ019 \t\n_(){}[]:.,'\"#@+-*/=<>|`~\\é中🙂"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))) for _ in range(20)]
    texts += [corpus[1], "    \n\n\t\tx = 1  \n", "<|end|> looks special but is text"[:5]]
    for text in texts:
        assert tiny_backbone_session.decode(tiny_backbone_session.encode_text(text), skip_special_tokens=False) == text


def test_chat_template_renders_role_tags_and_generation_prompt(tiny_backbone_session):
    bb = tiny_backbone_session
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U\n"}, {"role": "assistant", "content": "A"}]
    assert bb.render_chat(msgs, add_generation_prompt=False) == "<|system|>S<|end|><|user|>U\n<|end|><|assistant|>A<|end|>"
    assert bb.render_chat(msgs[:2], add_generation_prompt=True) == "<|system|>S<|end|><|user|>U\n<|end|><|assistant|>"
    ids = bb.encode_chat(msgs[:2], add_generation_prompt=True)
    assert ids[-1] == bb.tokenizer.convert_tokens_to_ids("<|assistant|>")
    assert ids[0] == bb.tokenizer.convert_tokens_to_ids("<|system|>")


def test_assistant_mask_covers_exactly_the_assistant_tokens(tiny_backbone_session):
    bb = tiny_backbone_session
    msgs = [
        {"role": "system", "content": "sys text"},
        {"role": "user", "content": "def f(x):\n    return x"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "feedback"},
        {"role": "assistant", "content": "second\nanswer"},
    ]
    ids, mask = bb.encode_chat_masked(msgs)
    assert ids == bb.encode_chat(msgs, add_generation_prompt=False)
    trained = [i for i, m in zip(ids, mask) if m]
    context = [i for i, m in zip(ids, mask) if not m]
    assert bb.decode(trained, skip_special_tokens=False) == "first answer<|end|>second\nanswer<|end|>"
    assert bb.decode(context, skip_special_tokens=False) == (
        "<|system|>sys text<|end|><|user|>def f(x):\n    return x<|end|><|assistant|><|user|>feedback<|end|><|assistant|>"
    )


def test_checkpoint_round_trip_through_plain_transformers(tiny_backbone_session, tiny_cfg, tmp_path):
    bb = tiny_backbone_session
    path = bb.save(tmp_path / "ckpt")
    assert not list(tmp_path.glob(".ckpt.*"))  # the atomic write left nothing behind
    ids = torch.tensor([bb.encode_chat([{"role": "user", "content": "hello"}], add_generation_prompt=True)])
    with torch.no_grad():
        expected = bb.model(ids).logits
        loaded = Backbone.load(path, tiny_cfg, device="cpu")
        assert torch.allclose(loaded.model(ids).logits, expected)
        plain = AutoModelForCausalLM.from_pretrained(path)
        assert torch.allclose(plain(ids).logits, expected)
    tok = AutoTokenizer.from_pretrained(path)
    assert tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False, add_generation_prompt=True) == "<|user|>hello<|end|><|assistant|>"
    assert loaded.eos_token_id == bb.eos_token_id and loaded.pad_token_id == bb.pad_token_id
    bb.save(path)  # overwriting an existing checkpoint works too
    assert (path / "config.json").exists()


def test_loading_a_missing_tiny_checkpoint_names_the_fix(tiny_cfg, tmp_path):
    with pytest.raises(InputNotFound, match="sft stage"):
        Backbone.load(tmp_path / "nothing", tiny_cfg, device="cpu")


QWEN_STYLE = (
    "{%- for m in messages -%}"
    "{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{%- if m['role'] == 'assistant' -%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{{ m['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def test_a_qwen_style_template_ends_turns_on_im_end_not_on_eos(corpus, tiny_cfg):
    """A base model whose eos (<|endoftext|>) differs from the template's end of turn (<|im_end|>), with a
    think block before the answer and a newline after the end token: stop and mask use <|im_end|>."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from davinci.llm.backends.hf import HFBackend
    from davinci.llm.tiny import tiny_model

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    from tokenizers import decoders

    tok.decoder = decoders.ByteLevel()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                     extra_special_tokens=specials[1:], chat_template=QWEN_STYLE)
    model = tiny_model(tiny_cfg, len(hf_tok), hf_tok.pad_token_id, hf_tok.eos_token_id, seed=0)
    bb = Backbone(model, hf_tok, tiny_cfg, torch.device("cpu"))
    im_end = hf_tok.convert_tokens_to_ids("<|im_end|>")
    assert bb.end_of_turn_id == im_end and bb.stop_token_ids[:2] == (im_end, hf_tok.eos_token_id)
    ids, mask = bb.encode_chat_masked([{"role": "user", "content": "q"}, {"role": "assistant", "content": "answer"}])
    trained = bb.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    assert trained == "<think>\n\n</think>\n\nanswer<|im_end|>"  # the newline after <|im_end|> is not trained
    word = bb.encode_text("hi")
    out = HFBackend(bb)._output((1,), word + [im_end, 5, 6], [-1.0] * (len(word) + 3))
    assert out.finish_reason == "stop" and out.response_ids[-1] == im_end and out.text == "hi"
