"""Checkpoints for exact resume: mid-epoch resume files and the trainer state beside each epoch's model.

Two kinds:
- resume checkpoint (`<dir>/resume-<global step>.pt`, written inside the epoch's output folder every
  `rl.checkpoint_every` optimizer steps; the newest `rl.checkpoint_keep` are kept): trainable weights, AdamW state, RNG states (python, numpy,
  torch CPU and CUDA), and `Progress` (epoch, optimizer steps done in the epoch, global step, the epoch's
  sample order, the digest of the samples it trains on, the skill-library version, the davinci version).
  Loading it into a model built from the epoch's input checkpoint gives bit-identical state, so the
  next step's loss equals the uninterrupted run's.
- trainer state (`<checkpoint>/trainer_state.pt`, next to the transformers files `Backbone.save` writes):
  AdamW state, global step, RNG states and versions, so the next epoch continues the optimizer exactly.
  A checkpoint without it (the SFT checkpoint) starts a fresh optimizer at global step 0.

Only trainable parameters are stored in resume checkpoints (LoRA: the adapters); frozen ones are
unchanged since the epoch began, so they come from the input checkpoint. Writes are atomic
(temporary file, then `os.replace`). The files are our own, so they load with `weights_only=False`.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import davinci
from davinci.errors import MalformedInput

RESUME_FILE = "resume.pt"
TRAINER_STATE_FILE = "trainer_state.pt"


@dataclass(frozen=True)
class Progress:
    """Where an epoch's update stands."""

    epoch: int
    step_in_epoch: int  # optimizer steps of this epoch already done
    global_step: int  # optimizer steps since RL began (the `step=` of every metric)
    plan: tuple[tuple[int, ...], ...]  # sample indices of each optimizer step of the epoch
    library_version: str = ""
    samples_digest: str = ""  # sha256 of the samples the plan indexes: a resume must use the same ones
    davinci_version: str = davinci.__version__

    @classmethod
    def start(cls, epoch: int, global_step: int, plan: tuple[tuple[int, ...], ...], **kw: Any) -> "Progress":
        return cls(epoch=epoch, step_in_epoch=0, global_step=global_step, plan=plan, **kw)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Progress":
        return cls(**{**d, "plan": tuple(tuple(int(i) for i in s) for s in d["plan"])})


# ---------------------------------------------------------------------------------------------------
# RNG


def capture_rng() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---------------------------------------------------------------------------------------------------
# Files


def _atomic_save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _load(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a truncated or foreign file: say which and how to recover
        raise MalformedInput(f"cannot read checkpoint file {path}: {exc}", f"delete {path} to start that part over") from None


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    missing = sorted(n for n, p in params.items() if p.requires_grad and n not in state)
    unknown = sorted(set(state) - set(params))
    if missing or unknown:
        raise MalformedInput(
            f"resume checkpoint does not match the model (missing {missing[:3]}, unknown {unknown[:3]})",
            "resume with the same model configuration, or delete the resume file to redo the epoch's update",
        )
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value.to(params[name].device, params[name].dtype))


def resume_files(directory: Path) -> list[Path]:
    """Resume checkpoints of a folder, newest first (`resume-<global step>.pt`, or the legacy `resume.pt`)."""
    files = sorted(Path(directory).glob("resume-*.pt"), key=lambda p: int(p.stem.split("-")[1]), reverse=True)
    legacy = Path(directory) / RESUME_FILE
    return files + ([legacy] if legacy.exists() else [])


def save_resume(directory: Path, model: Any, optimizer: Any, progress: Progress, keep: int = 1) -> Path:
    """Write `<directory>/resume-<global step>.pt` atomically, then delete all but the newest `keep`."""
    path = Path(directory) / f"resume-{progress.global_step:09d}.pt"
    blob = {"model": trainable_state(model), "optimizer": optimizer.state_dict(), "rng": capture_rng(), "progress": asdict(progress)}
    _atomic_save(blob, path)
    for old in resume_files(directory)[max(keep, 1) :]:
        old.unlink(missing_ok=True)
    return path


def load_resume(directory: Path, model: Any, optimizer: Any) -> Progress | None:
    """Restore weights, optimizer and RNG from the newest readable resume file; None when there is none."""
    files = resume_files(directory)
    if not files:
        return None
    blob = None
    for path in files:  # a file cut short by a crash while writing falls back to the one before it
        try:
            blob = _load(path)
            break
        except MalformedInput:
            if path == files[-1]:
                raise
    assert blob is not None
    load_trainable_state(model, blob["model"])
    optimizer.load_state_dict(blob["optimizer"])
    restore_rng(blob["rng"])
    return Progress.from_dict(blob["progress"])


def save_trainer_state(checkpoint: Path, optimizer: Any | None, progress: Progress, reference_dir: str = "") -> Path:
    """Write `<checkpoint>/trainer_state.pt` (optimizer state optional) next to the model files."""
    blob = {
        "reference_dir": reference_dir,
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "rng": capture_rng(),
        "global_step": progress.global_step,
        "epoch": progress.epoch,
        "library_version": progress.library_version,
        "davinci_version": progress.davinci_version,
    }
    path = Path(checkpoint) / TRAINER_STATE_FILE
    _atomic_save(blob, path)
    return path


def load_trainer_state(checkpoint: Path, optimizer: Any) -> dict[str, Any]:
    """Restore the optimizer from `<checkpoint>/trainer_state.pt`; returns {global_step, epoch, ...}.

    A checkpoint without the file (e.g. the SFT checkpoint) returns global_step 0 and leaves the optimizer
    fresh. RNG states are not restored here: each epoch seeds its own randomness from (seed, epoch).
    """
    path = Path(checkpoint) / TRAINER_STATE_FILE
    if not path.exists():
        return load_trainer_state_meta(checkpoint)
    blob = _load(path)
    state = blob.get("optimizer")
    if state is not None:
        if isinstance(optimizer, torch.optim.Optimizer) and "inner" in state:
            state = state["inner"]  # saved with float32 masters, now training in float32: keep the moments
        optimizer.load_state_dict(state)
    return _meta(blob)


_META_KEYS = ("global_step", "epoch", "library_version", "davinci_version", "reference_dir")


def _meta(blob: dict[str, Any]) -> dict[str, Any]:
    return {k: blob.get(k, "" if k not in ("global_step", "epoch") else 0) for k in _META_KEYS}


def load_trainer_state_meta(checkpoint: Path) -> dict[str, Any]:
    """{global_step, epoch, library_version, davinci_version, reference_dir} of a checkpoint, without the
    optimizer; a checkpoint without trainer state gives global_step 0, epoch -1 and empty strings."""
    path = Path(checkpoint) / TRAINER_STATE_FILE
    if not path.exists():
        return {**_meta({}), "epoch": -1}
    return _meta(_load(path))
