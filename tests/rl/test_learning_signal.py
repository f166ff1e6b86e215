"""Learning signal: RL through the project's advantage -> sample -> loss -> trainer path raises a reward.

Task (synthetic, so a random-init tiny model can succeed): from a one-token prompt the model samples 8
tokens; reward = fraction of them in a target set of 8 of the 32 tokens (chance level 0.25). Each step
draws a group of 16 rollouts, scores them, computes TRLOO advantages over the group (`compute_advantages`),
builds `TrainSample`s, scores behaviour log-probs (`score_samples`) and takes one optimizer step
(`train_step` -> registered `reinforce_clip` loss).

"Significantly" is defined per seed: rise = mean reward of the last 4 steps - mean of the first 4. With no
learning, a step's mean over 128 tokens has sd ~ sqrt(.25*.75/128) = 0.038, so the rise has sd ~ 0.027;
the margin 0.15 is > 5 sd. The twin flips the advantage's sign (everything else identical) and must not
rise by even 0.05 on any seed: if the trainer ignored the advantage, or its sign, one of the two fails.
"""

from __future__ import annotations

import statistics

import torch

from davinci.rl.advantages import AdvantageItem, compute_advantages
from davinci.rl.config import RLConfig
from davinci.rl.samples import TrainSample, with_logprobs
from davinci.rl.trainer import make_optimizer, score_samples, train_step

TARGET = set(range(3, 11))
STEPS, GROUP, LENGTH, WINDOW, MARGIN = 20, 16, 8, 4, 0.15
SEEDS = (0, 1, 2, 3, 4)


@torch.no_grad()
def sample_group(model, gen: torch.Generator) -> list[list[int]]:
    """GROUP responses of LENGTH tokens after the prompt [1], sampled at temperature 1 (pad/eos excluded)."""
    ids = torch.ones(GROUP, 1, dtype=torch.long)
    for _ in range(LENGTH):
        logits = model(input_ids=ids).logits[:, -1].float()
        logits[:, :3] = float("-inf")  # pad, bos, eos: keep every response exactly LENGTH tokens
        nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)
        ids = torch.cat([ids, nxt], dim=1)
    return ids[:, 1:].tolist()


def run(lm_factory, seed: int, sign: float) -> list[float]:
    model = lm_factory(seed=seed, layers=1)
    cfg = RLConfig(lr=2e-2, batch_size=GROUP, advantage="trloo", loss="reinforce_clip")
    opt = make_optimizer(model, cfg)
    gen = torch.Generator().manual_seed(1000 + seed)
    curve = []
    for step in range(STEPS):
        responses = sample_group(model, gen)
        rewards = [sum(t in TARGET for t in r) / LENGTH for r in responses]
        curve.append(statistics.mean(rewards))
        items = [AdvantageItem("policy", ("synthetic", step, 0), r) for r in rewards]
        advs = compute_advantages(items, cfg.advantage)
        samples = [TrainSample("policy", (1, *r), 1, sign * a, rw, f"s{step}/{i}") for i, (r, a, rw) in enumerate(zip(responses, advs, rewards))]
        samples = with_logprobs(samples, score_samples(model, samples, pad_id=0), None)
        train_step(model, opt, samples, cfg, pad_id=0)
    return curve


def rise(curve: list[float]) -> float:
    return statistics.mean(curve[-WINDOW:]) - statistics.mean(curve[:WINDOW])


def test_learning_signal_reward_rises(lm_factory):
    rises = [rise(run(lm_factory, seed, sign=1.0)) for seed in SEEDS]
    print(f"\nlearning signal: rise (last {WINDOW} - first {WINDOW} steps) per seed: {[round(r, 3) for r in rises]}")
    assert all(r > MARGIN for r in rises), rises


def test_learning_signal_flipped_advantage_does_not_rise(lm_factory):
    rises = [rise(run(lm_factory, seed, sign=-1.0)) for seed in SEEDS]
    print(f"\nflipped sign: rise per seed: {[round(r, 3) for r in rises]}")
    assert all(r < 0.05 for r in rises), rises
