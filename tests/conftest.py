"""Test-suite wide set-up: GPU tests skip without a GPU; nothing touches the user's home or the network.

- Prefect and MLflow state go to temporary folders (set per test by the fixtures that need them).
- `gpu`-marked tests are skipped when no CUDA device is visible, and Triton runs in its interpreter
  (`TRITON_INTERPRET=1`, set before any test module imports it).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_configure(config: pytest.Config) -> None:
    # Without a GPU, Triton kernels run in its interpreter. Triton takes the mode when a kernel (its own library's
    # @jit helpers too) is defined, so it is set before any test module imports triton: a module that imported it
    # first without the mode left tl.zeros a GPU function for every later module's interpreted kernels.
    if not _cuda_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
