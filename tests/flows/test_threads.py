"""The trainer's torch thread budget leaves a core to the evaluator and never counts busy cores as free."""

from __future__ import annotations

import pytest

from tasks.common import configure_threads, thread_budget


@pytest.mark.parametrize("busy, cores, expected", [(0, 2, 1), (0, 16, 15), (3, 16, 13), (40, 16, 1), (0, 1, 1)])
def test_thread_budget(busy: int, cores: int, expected: int) -> None:
    assert thread_budget(busy_workers=busy, cores=cores) == expected


def test_environment_override_sets_torch_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    before = torch.get_num_threads()
    monkeypatch.setenv("DAVINCI_TORCH_THREADS", "3")
    try:
        assert configure_threads() == 3 and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
