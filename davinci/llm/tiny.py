"""The tiny local model: a BPE tokenizer trained on the project's own text and a small random-init Llama.

This is what the `tiny` profile trains on a CPU: nothing is downloaded. The tokenizer is byte-level BPE
(every string round-trips exactly, indentation included) trained with `tokenizers` on the corpus the caller
passes (problem sources, reference solutions, skill texts, `davinci.agents.template_corpus()`), so code
compresses to few tokens and SFT stays cheap. Pre-tokenization `cfg.tiny_tokenizer`: "lines" (default) lets
merges span spaces but never a line break, so a frequent code line becomes one token (~2x fewer tokens than
GPT-2-style "words" on this corpus; the vocabulary stops growing when no pair occurs twice). Its chat
template is a simple role-tagged one with special tokens:

    <|system|>{content}<|end|><|user|>{content}<|end|><|assistant|>{content}<|end|>

`<|end|>` is the end-of-turn (eos) token, `<|pad|>` pads. The model is `LlamaForCausalLM` with
`cfg.tiny_hidden/tiny_layers/tiny_heads`, vocabulary = the trained tokenizer's size (at most `cfg.tiny_vocab`),
RoPE positions up to `cfg.max_seq_len`, tied input/output embeddings. The same corpus and seed give the same
tokenizer and bit-identical weights (the global torch RNG is left untouched).

    bb = create_tiny_backbone(texts, ModelConfig(), seed=0); bb.save("runs/tiny/init")
"""

from __future__ import annotations

from typing import Iterable

import torch

from davinci.errors import MalformedInput, UnknownName
from davinci.llm.backbone import Backbone, resolve_device
from davinci.llm.config import ModelConfig

PAD, SYSTEM, USER, ASSISTANT, END = "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = (PAD, SYSTEM, USER, ASSISTANT, END)

CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>' }}{%- endif -%}"
)


def pre_tokenizer(kind: str):
    """lines: merges may span spaces but never a line break (a frequent code line can become one token);
    words: GPT-2's byte-level regex (merges stay inside words)."""
    from tokenizers import Regex, pre_tokenizers

    if kind == "words":
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    if kind == "lines":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(r"\n"), behavior="merged_with_previous"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    raise UnknownName("tiny tokenizer", kind, ["lines", "words"])


def train_tokenizer(corpus: Iterable[str], vocab_size: int, kind: str = "lines"):
    """Byte-level BPE trained on `corpus`, wrapped as a transformers fast tokenizer with the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [t for t in corpus if t]
    if not texts:
        raise MalformedInput("the tokenizer corpus is empty", "pass problem sources, solutions and skill texts")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer(kind)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=END,
        pad_token=PAD,
        extra_special_tokens=[SYSTEM, USER, ASSISTANT],
        chat_template=CHAT_TEMPLATE,
        model_max_length=1 << 30,
    )


def tiny_model(cfg: ModelConfig, vocab_size: int, pad_id: int, eos_id: int, seed: int):
    """Random-init LlamaForCausalLM of the tiny shape; weights depend only on (cfg, vocab_size, seed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if cfg.tiny_hidden % cfg.tiny_heads:
        raise MalformedInput(
            f"model.tiny_hidden={cfg.tiny_hidden} is not divisible by model.tiny_heads={cfg.tiny_heads}",
            "choose a hidden size that is a multiple of the head count",
        )
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.tiny_hidden,
        intermediate_size=cfg.tiny_intermediate or 3 * cfg.tiny_hidden,
        num_hidden_layers=cfg.tiny_layers,
        num_attention_heads=cfg.tiny_heads,
        num_key_value_heads=cfg.tiny_heads,
        max_position_embeddings=cfg.max_seq_len,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
        attn_implementation=cfg.attn_implementation,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.generation_config.bos_token_id = None
    return model


def create_tiny_backbone(corpus: Iterable[str], cfg: ModelConfig, seed: int, device: str | None = None) -> Backbone:
    """Train the tokenizer on `corpus`, build the tiny model; float32 on the CPU, bfloat16 on a GPU."""
    from davinci.llm.backbone import resolve_dtype

    tokenizer = train_tokenizer(corpus, cfg.tiny_vocab, cfg.tiny_tokenizer)
    model = tiny_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, seed)
    dev = resolve_device(device)
    model.to(device=dev, dtype=resolve_dtype(cfg.dtype, dev))
    bb = Backbone(model, tokenizer, cfg, dev, base_path="")
    if cfg.lora:
        from davinci.llm.backbone import wrap_lora

        bb.model = wrap_lora(bb.model, cfg)
    return bb
