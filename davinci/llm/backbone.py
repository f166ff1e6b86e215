"""The backbone: one causal LM + its tokenizer, shared by the selection, policy and summary agents.

Choices:
- Loaded through transformers (`AutoModelForCausalLM` / `AutoTokenizer`); a checkpoint folder written by
  `Backbone.save` is a plain transformers folder, so `from_pretrained`, `vllm serve` and
  `python -m davinci.llm.server` all read it.
- Prompts use the tokenizer's own chat template (Qwen's for Qwen, the tiny model's role-tagged template
  for the tiny model): `encode_chat` renders the template to text and tokenizes it without adding special
  tokens, so the ids are exactly what a server applying the same template would see.
- dtype "auto" = bfloat16 on a GPU, float32 on the CPU.
- LoRA (peft) when `cfg.lora`: only the adapters train. `save` then writes the *merged* weights at the
  folder root (loadable by anything) plus `adapter/` and the base model's path in `davinci_backbone.json`;
  `load` with `cfg.lora` re-attaches the saved adapter to that base, so training resumes exactly.
- Saving is atomic: a folder is written beside the target and renamed into place.

    bb = Backbone.load("runs/sft/checkpoint", ModelConfig(), device="auto")
    ids = bb.encode_chat([{"role": "user", "content": "hi"}], add_generation_prompt=True)
"""

from __future__ import annotations

import json
import os
import shutil
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import torch

from davinci.errors import ConfigError, InputNotFound
from davinci.llm.config import ModelConfig
from davinci.llm.types import Message

META_FILE = "davinci_backbone.json"
ADAPTER_DIR = "adapter"
BASE_DIR = "base"


def resolve_device(device: str | torch.device | None) -> torch.device:
    """None or "auto" -> cuda when a GPU is visible, else cpu."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]


def longest_common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Backbone:
    """Model + tokenizer on one device. The model may be a peft `PeftModel` (LoRA) or a plain causal LM."""

    def __init__(self, model: Any, tokenizer: Any, cfg: ModelConfig, device: torch.device, base_path: str = "") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.device = device
        # Where the frozen base weights live when LoRA is on (recorded in saved checkpoints).
        self.base_path = base_path
        self.source_dir = ""  # set by `load`: the checkpoint folder the live weights were read from
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    # ------------------------------------------------------------------ loading and saving
    @classmethod
    def load(cls, path: str | Path, cfg: ModelConfig, device: str | torch.device | None = None) -> "Backbone":
        """Load a checkpoint folder (or, for `kind: hf`, a hub id the profile names)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dev = resolve_device(device)
        dtype = resolve_dtype(cfg.dtype, dev)
        local = Path(path)
        if cfg.kind == "tiny" and not local.is_dir():
            raise InputNotFound(
                f"no tiny-model checkpoint folder at {local}",
                "run the sft stage first (it creates the tiny model), or pass the folder it wrote",
            )
        meta = _read_meta(local)
        adapter = local / ADAPTER_DIR
        resume_lora = bool(cfg.lora and adapter.is_dir() and meta.get("base_name_or_path"))
        weights_from = _resolve_base(local, meta["base_name_or_path"]) if resume_lora else str(path)
        # device_map: a GPU model is loaded straight onto the device (no full copy in host memory first).
        placement = {"device_map": {"": str(dev)}} if dev.type == "cuda" else {}
        model = AutoModelForCausalLM.from_pretrained(
            weights_from, dtype=dtype, attn_implementation=cfg.attn_implementation, **placement
        )
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model.to(dev)
        if resume_lora:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
            base_path = weights_from
        else:
            base_path = str(path)
            if cfg.lora:
                model = wrap_lora(model, cfg)
        bb = cls(model, tokenizer, cfg, dev, base_path=base_path)
        bb.source_dir = str(path)  # the folder these weights came from (merged weights at its root)
        bb.configure_training()
        return bb

    def configure_training(self) -> None:
        """Gradient checkpointing when the profile asks for it (large models)."""
        if self.cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
            if self.cfg.lora:
                self.model.enable_input_require_grads()

    def save(self, path: str | Path) -> Path:
        """Write a transformers checkpoint folder (atomic: written beside `path`, then renamed)."""
        target = Path(path)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        meta: dict[str, Any] = {"kind": self.cfg.kind, "lora": is_lora(self.model), "base_name_or_path": self.base_path}
        if is_lora(self.model):
            base = self.model.get_base_model()
            base.save_pretrained(tmp, state_dict=base_state_dict(self.model, merge=True))
            self.model.save_pretrained(tmp / ADAPTER_DIR)
            if _base_travels(self.base_path):
                # No durable base elsewhere (a tiny model, or a base copied into an earlier checkpoint):
                # keep the frozen base weights inside this checkpoint so LoRA training can resume from it.
                base.save_pretrained(tmp / BASE_DIR, state_dict=base_state_dict(self.model, merge=False))
                meta["base_name_or_path"] = BASE_DIR
        else:
            self.model.save_pretrained(tmp)
        self.tokenizer.save_pretrained(tmp)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
        _replace_dir(tmp, target)
        return target

    # ------------------------------------------------------------------ tokens
    @property
    def eos_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def pad_token_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    @cached_property
    def end_of_turn_id(self) -> int:
        """The special token the chat template closes an assistant turn with (Qwen: <|im_end|>; tiny: <|end|>).

        Base models often declare a different eos (<|endoftext|>); generation must stop on the turn's end.
        Found by rendering a one-turn chat: the first special token after the answer; else the eos token.
        """
        chat = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "OK."}]
        prompt = self.encode_chat(chat[:1], add_generation_prompt=True)
        full = self.encode_chat(chat, add_generation_prompt=False)
        special = set(self.tokenizer.all_special_ids)
        tail = full[longest_common_prefix(prompt, full) :]
        # Skip whatever the template puts before the answer (e.g. an empty think block), then take the
        # first special token after the answer's text.
        for i in range(len(tail)):
            if "OK." in self.tokenizer.decode(tail[: i + 1], skip_special_tokens=False):
                return next((t for t in tail[i + 1 :] if t in special), self.eos_token_id)
        return self.eos_token_id

    @cached_property
    def stop_token_ids(self) -> tuple[int, ...]:
        """Tokens that end a generation: the end of turn, the tokenizer's eos, the model's generation eos."""
        extra = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        extra = [extra] if isinstance(extra, int) else list(extra or [])
        return tuple(dict.fromkeys([self.end_of_turn_id, self.eos_token_id, *extra]))

    def render_chat(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_chat(self, messages: Sequence[Message], add_generation_prompt: bool) -> list[int]:
        """Token ids of `messages` through the chat template (ending in the assistant header if asked)."""
        return self.encode_text(self.render_chat(messages, add_generation_prompt))

    def encode_chat_masked(self, messages: Sequence[Message]) -> tuple[list[int], list[int]]:
        """(ids, mask) of a whole conversation; mask[i] = 1 where token i was written by the assistant.

        The assistant span of message k is found by rendering the conversation up to k with the generation
        prompt (everything the model sees before it answers) and up to k inclusive; the span is what lies
        between, cut after the last end-of-turn token (templates may add a newline after it).
        """
        ids = self.encode_chat(messages, add_generation_prompt=False)
        # mask: 1 only on the assistant's own tokens (its content and end-of-turn token). System and user
        # text and the template's role headers are 0: SFT learns to answer, never to predict its prompt.
        mask = [0] * len(ids)
        for k, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            start = longest_common_prefix(self.encode_chat(messages[:k], add_generation_prompt=True), ids)
            end = longest_common_prefix(self.encode_chat(messages[: k + 1], add_generation_prompt=False), ids)
            span = ids[start:end]
            stops = [i for i, t in enumerate(span) if t in self.stop_token_ids]
            if stops:
                end = start + stops[-1] + 1
            for i in range(start, end):
                mask[i] = 1
        return ids, mask

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]


# ---------------------------------------------------------------------- LoRA
def is_lora(model: Any) -> bool:
    return type(model).__name__.startswith("Peft")


def wrap_lora(model: Any, cfg: ModelConfig) -> Any:
    """Wrap `model` in LoRA adapters on `cfg.lora_targets`; only adapter weights stay trainable."""
    from peft import LoraConfig, get_peft_model

    lcfg = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_targets),
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, lcfg)
    except ValueError as exc:
        names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ConfigError(
            f"LoRA targets {list(cfg.lora_targets)} do not match the model's layers ({exc})",
            f"set model.lora_targets to some of: {', '.join(names)}",
        ) from None


def base_state_dict(peft_model: Any, merge: bool) -> dict[str, torch.Tensor]:
    """The base model's state dict in plain transformers naming; with `merge`, every LoRA delta is added to
    its base weight (computed out of place: the live model is not touched)."""
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    merged: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if merge and isinstance(module, LoraLayer):
            weight = module.get_base_layer().weight
            delta = sum(module.get_delta_weight(a) for a in module.active_adapters)
            merged[f"{name}.weight"] = (weight + delta.to(weight.dtype)).detach().cpu()
    out: dict[str, torch.Tensor] = {}
    for key, value in base.state_dict().items():
        if "lora_" in key:
            continue
        clean = key.replace(".base_layer", "")
        out[clean] = merged.get(clean, value)
    return out


# ---------------------------------------------------------------------- files
def _base_travels(base_path: str) -> bool:
    """True when the LoRA base has no home outside checkpoints and must be saved with each one."""
    return not base_path or Path(base_path).name == BASE_DIR


def _resolve_base(checkpoint: Path, base: str) -> str:
    """A base recorded as a relative folder lives inside the checkpoint; anything else is a path or hub id."""
    inside = checkpoint / base
    return str(inside) if base == BASE_DIR and inside.is_dir() else base


def _read_meta(path: Path) -> dict[str, Any]:
    file = path / META_FILE
    if not file.exists():
        return {}
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError:
        return {}


def _replace_dir(tmp: Path, target: Path) -> None:
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    if old.exists():
        shutil.rmtree(old)
