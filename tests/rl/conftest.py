"""Shared fixtures of the rl tests: a tiny real transformers Llama and synthetic training samples."""

from __future__ import annotations

import random

import pytest
import torch

from davinci.rl.samples import TrainSample

VOCAB = 32


def make_tiny_lm(seed: int = 0, vocab: int = VOCAB, hidden: int = 32, layers: int = 2):
    """davinci.llm's tiny Llama (real transformers model), small enough to train in milliseconds.

    pad = 0, eos = 2; weights depend only on (shape, seed)."""
    from davinci.llm.config import ModelConfig
    from davinci.llm.tiny import tiny_model

    cfg = ModelConfig(tiny_hidden=hidden, tiny_layers=layers, tiny_heads=2, tiny_intermediate=2 * hidden, max_seq_len=128)
    return tiny_model(cfg, vocab_size=vocab, pad_id=0, eos_id=2, seed=seed)


def make_samples(n: int, seed: int, agents=("policy", "selection", "summary")) -> list[TrainSample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 6))]
        response = [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 7))]
        agent = agents[i % len(agents)]
        adv = rng.uniform(-2, 2)
        out.append(TrainSample(agent, tuple(prompt + response), len(prompt), adv, adv, f"ep{i}/{agent}/0"))
    return out


@pytest.fixture
def tiny_lm():
    return make_tiny_lm()


@pytest.fixture
def lm_factory():
    """`make_tiny_lm` (tests run with --import-mode=importlib, so helpers travel as fixtures)."""
    return make_tiny_lm


@pytest.fixture
def sample_factory():
    return make_samples


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run fastest single-threaded, and the CPU is shared with other test runs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------------------------------------------
# Episodes (the agents package's real types)


def _episode_types():
    from davinci.agents.episode import Episode, Generation, Turn

    return Generation, Turn, Episode


def make_episode(episode_id: str, problem_id: str, results, *, epoch: int = 0, selected=(), summary_text: str | None = None, skill_id: str = ""):
    """An episode whose policy turn t has the EvalResult results[t] (None: no code); ids are tiny and distinct per role."""
    from davinci.llm.types import GenOutput

    Generation, Turn, Episode = _episode_types()

    def gen(agent: str, k: int) -> object:
        out = GenOutput(text=f"{agent}{k}", prompt_ids=(5, 6, 7 + k), response_ids=(11 + k, 12, 2), logprobs=(-1.0, -0.5, -0.1), finish_reason="stop")
        return Generation(agent, ({"role": "user", "content": "p"},), out, True)

    turns = tuple(Turn(t, gen("policy", t), None, r) for t, r in enumerate(results))
    summary = gen("summary", 0) if summary_text is not None else None
    cand = {"id": skill_id} if skill_id else None
    return Episode(episode_id, problem_id, epoch, 0, gen("selection", 0), ("s1", "s2"), tuple(selected), turns, summary, cand, None)


@pytest.fixture
def episode_factory():
    return make_episode


@pytest.fixture
def episode_types():
    """(Generation, Turn, Episode) of davinci.agents.episode."""
    return _episode_types()
