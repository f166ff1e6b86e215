"""Keep a generation server on the weights being trained: push them before each epoch's rollouts, verify.

In-process generation (`model.backend: hf`) always samples from the live weights; nothing to do. With an
OpenAI-compatible server (`model.backend: openai`), the epoch's input checkpoint (the SFT checkpoint, then
each epoch's `checkpoint/`, i.e. the weights after the previous epoch's updates) is pushed before any
rollout, then checked:
  LoRA profiles (`model.lora`)  POST /v1/load_lora_adapter {"lora_name": "policy-<version>", "lora_path":
                                <checkpoint>/adapter} (vLLM's runtime LoRA loading; the server must allow
                                it), then requests name that adapter as their model;
  full fine-tuning              POST /update_weights_from_disk {"model_path": <checkpoint>, "version"}
                                (SGLang's endpoint; the project's server implements both).
  check                         GET /v1/models must list the adapter name (LoRA) or an entry whose
                                `version` is the pushed one (full weights); anything else, including a
                                server that refuses the push, stops the run with `StaleWeightsError`.
The version names the weights: "<global step>-<first 12 hex of the checkpoint folder's path hash>".
The offline vLLM engine (`model.backend: vllm`) loads the live backbone's folder itself (backends.vllm).

    name = sync_served_weights(backend, "runs/rl/epoch_000/checkpoint", profile, global_step=12)
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from davinci.llm.backbone import ADAPTER_DIR
from davinci.rl.onpolicy import StaleWeightsError, check_served_version


def weights_version(checkpoint_dir: str | Path, global_step: int) -> str:
    """A name for the weights in a checkpoint folder after `global_step` optimizer steps."""
    digest = hashlib.sha256(str(Path(checkpoint_dir).resolve()).encode()).hexdigest()[:12]
    return f"{global_step}-{digest}"


def _push(backend: Any, checkpoint_dir: Path, lora: bool, version: str) -> str:
    """Send the weights; returns the model name the rollouts must request."""
    from davinci.llm.backends.openai import BackendUnavailable

    try:
        if lora:
            name = f"policy-{version}"
            backend.call("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(checkpoint_dir / ADAPTER_DIR)})
            return name
        backend.call("POST", "/update_weights_from_disk", {"model_path": str(checkpoint_dir), "version": version})
        return ""
    except BackendUnavailable as exc:
        raise StaleWeightsError(
            f"the generation server at {backend.root} did not accept the trainer's weights ({exc}); its rollouts would be off-policy",
            "start it with runtime updates allowed (vLLM: VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora; "
            "python -m davinci.llm.server without --frozen), or use model.backend: hf",
        ) from None


def sync_served_weights(backend: Any, checkpoint_dir: str | Path, profile: Any, *, global_step: int) -> str:
    """Push the checkpoint's weights to the server behind `backend`, verify, and point `backend` at them.

    Returns the served version ("" when the backend generates in process).
    """
    if profile.model.backend != "openai":
        return ""
    checkpoint_dir = Path(checkpoint_dir)
    version = weights_version(checkpoint_dir, global_step)
    lora = bool(profile.model.lora)
    listed = backend.call("GET", "/v1/models").get("data") or []
    if lora and not (checkpoint_dir / ADAPTER_DIR).is_dir():
        # the first LoRA epoch starts from the SFT checkpoint: fresh adapters are zero, so the policy is the
        # served base model itself (a server on another base shows up in the rollout-vs-trainer KL)
        backend.model = str(next((m for m in listed if not m.get("parent")), {}).get("id", backend.model))
        return "base"
    name = _push(backend, checkpoint_dir, lora, version)
    listed = backend.call("GET", "/v1/models").get("data") or []
    if name:  # LoRA: the adapter must be listed under the pushed name
        served = name if any(m.get("id") == name for m in listed) else "no adapter " + name
        check_served_version(served, name, backend.root)
        backend.model = name
        return version
    base = next((m for m in listed if not m.get("parent")), {})
    check_served_version(str(base.get("version", "")), version, backend.root)
    backend.model = str(base.get("id", backend.model))
    return version


__all__ = ["StaleWeightsError", "sync_served_weights", "weights_version"]
