"""Trainer: response log-probs are exactly the response span, accumulation equals one batch, metrics."""

from __future__ import annotations

import torch

from davinci.rl.config import RLConfig
from davinci.rl.samples import TrainSample, with_logprobs
from davinci.rl.trainer import make_optimizer, plan_updates, score_samples, train_step


def test_scored_logprobs_cover_exactly_the_response_tokens(tiny_lm, sample_factory):
    samples = sample_factory(5, seed=1)
    scored = score_samples(tiny_lm, samples, pad_id=0, micro_batch=3)  # padded batches of mixed lengths
    for s, lp in zip(samples, scored):
        assert len(lp) == s.response_len
        # the obvious way, one sample alone: log p(x_t | x_<t) for every response position t >= prompt_len
        with torch.no_grad():
            logits = tiny_lm(input_ids=torch.tensor([s.input_ids])).logits[0].log_softmax(-1)
        expected = [float(logits[t - 1, s.input_ids[t]]) for t in range(s.prompt_len, len(s.input_ids))]
        torch.testing.assert_close(torch.tensor(lp), torch.tensor(expected), rtol=1e-4, atol=1e-5)


def test_gradient_accumulation_equals_one_batch(lm_factory, sample_factory):
    samples = sample_factory(6, seed=2)
    weights = []
    for accum in (1, 3):
        model = lm_factory(seed=3)
        cfg = RLConfig(grad_accum=accum, max_grad_norm=0.0)
        # SGD with lr 1: the weight change is the gradient itself (Adam's first step is ~sign(g))
        train_step(model, torch.optim.SGD(model.parameters(), lr=1.0), samples, cfg, pad_id=0)
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.testing.assert_close(weights[0], weights[1], rtol=1e-5, atol=1e-6)


def test_prompt_tokens_get_no_credit(lm_factory):
    # Two samples share the response; only their prompts differ. With advantage 0 on both there is no
    # gradient at all: nothing about the prompt (the context) is ever pushed up or down.
    a = TrainSample("policy", (5, 6, 7, 9, 10), 3, 0.0, 0.0, "a")
    b = TrainSample("policy", (8, 8, 9, 10), 2, 0.0, 0.0, "b")
    model = lm_factory(seed=4)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = RLConfig(lr=1.0)
    train_step(model, make_optimizer(model, cfg), [a, b], cfg, pad_id=0)
    assert all(torch.equal(x, p) for x, p in zip(before, model.parameters()))


def test_on_policy_ratio_is_one_and_metrics_are_reported(tiny_lm, sample_factory):
    samples = sample_factory(4, seed=5)
    samples = with_logprobs(samples, score_samples(tiny_lm, samples, pad_id=0), None)
    cfg = RLConfig(lr=1e-3)
    m = train_step(tiny_lm, make_optimizer(tiny_lm, cfg), samples, cfg, pad_id=0)
    assert abs(m["ratio_mean"] - 1.0) < 1e-5 and m["clip_frac"] == 0.0
    assert m["tokens"] == sum(s.response_len for s in samples)
    assert m["samples_policy"] == 2 and m["samples_selection"] == 1 and m["samples_summary"] == 1


def test_plan_is_a_seeded_permutation_per_pass():
    cfg = RLConfig(batch_size=4, update_passes=2)
    plan = plan_updates(10, cfg, seed=0, epoch=3)
    assert [len(s) for s in plan] == [4, 4, 2, 4, 4, 2]
    assert sorted(i for s in plan[:3] for i in s) == list(range(10))
    assert plan == plan_updates(10, cfg, seed=0, epoch=3)
    assert plan != plan_updates(10, cfg, seed=0, epoch=4)
