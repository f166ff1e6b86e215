"""`attention_kernels`: on a GPU device SDPA may not use cuDNN inside it, and the global flags come back after."""

from __future__ import annotations

import torch

from davinci.llm.attention import attention_kernels


def _flags() -> tuple[bool, bool, bool, bool]:
    b = torch.backends.cuda
    return (b.cudnn_sdp_enabled(), b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.math_sdp_enabled())


def test_cuda_context_leaves_out_cudnn_and_keeps_the_others() -> None:
    # The flags are process settings, so this runs without a GPU.
    before = _flags()
    with attention_kernels("cuda"):
        assert _flags() == (False, True, True, True)
    assert _flags() == before


def test_cuda_context_restores_flags_after_an_error() -> None:
    before = _flags()
    try:
        with attention_kernels(torch.device("cuda", 0)):
            raise RuntimeError("forward failed")
    except RuntimeError:
        pass
    assert _flags() == before


def test_cpu_context_changes_nothing() -> None:
    before = _flags()
    with attention_kernels("cpu"):
        assert _flags() == before
