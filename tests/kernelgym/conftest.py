"""Shared fixtures for the kernelgym tests: fixture files, one warm CPU Evaluator per session.

The Evaluator runs real worker processes (reference worker, zygote, forked candidates) with the Triton
interpreter; its caches live in a temporary folder. Timeouts are short so hang tests stay fast.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from davinci.kernelgym import Evaluator, GymConfig, load_problem_file
from davinci.types import Candidate, Problem

FIXTURES = Path(__file__).parent / "fixtures"


def load_problem(name: str) -> Problem:
    return load_problem_file(FIXTURES / "problems" / f"{name}.py")


def load_candidate(name: str, p: Problem) -> Candidate:
    return Candidate(problem_id=p.id, code=(FIXTURES / "candidates" / f"{name}.py").read_text(), backend="triton")


def cpu_config(tmp: Path, **kw) -> GymConfig:
    base = dict(device="cpu", cache_dir=str(tmp), workers=1, compile_timeout_s=20.0, run_timeout_s=8.0,
                timing_min_reps=3, timing_max_reps=8, timing_max_s=0.5, checks="strict")
    base.update(kw)
    return GymConfig(**base)


@pytest.fixture(scope="session")
def problem():
    """problem(name) -> the fixture Problem tests/kernelgym/fixtures/problems/<name>.py."""
    return load_problem


@pytest.fixture(scope="session")
def candidate():
    """candidate(name, problem) -> the fixture Candidate tests/kernelgym/fixtures/candidates/<name>.py."""
    return load_candidate


@pytest.fixture(scope="session")
def make_config():
    """make_config(tmp_dir, **overrides) -> a fast CPU GymConfig."""
    return cpu_config


@pytest.fixture(scope="session")
def gym(tmp_path_factory: pytest.TempPathFactory):
    ev = Evaluator(cpu_config(tmp_path_factory.mktemp("kernelgym-cache")))
    yield ev
    ev.close()
