"""The doctests of the rl modules without a test file of their own (hand-computed examples in docstrings)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["davinci.rl.rollout", "davinci.rl.onpolicy", "davinci.rl.samples", "davinci.rl.records"])
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0
