"""Chunked response log-probs equal the simple full-logits reference; micro-batches by token budget equal
one big batch; truncated importance weights and the rollout-KL bound by hand.

Memory is not measured here (no timing or memory bands in unit tests): `benchmarks/rl_logprobs_memory.py`
prints the peak of both paths on the CPU, `benchmarks/gpu/rl_update_memory.py` one h100 step on a GPU.
"""

from __future__ import annotations

import doctest
import math

import pytest
import torch

import davinci.rl.trainer as trainer_mod
from davinci.rl.config import RLConfig
from davinci.rl.logprobs import response_logprobs, response_logprobs_reference
from davinci.rl.onpolicy import OffPolicyError, check_rollout_kl
from davinci.rl.trainer import collate, make_optimizer, tis_weights, train_step


def test_trainer_doctests():
    assert doctest.testmod(trainer_mod).failed == 0


@pytest.mark.parametrize("temperature,chunk_rows", [(1.0, 1), (1.0, 5), (0.7, 3), (1.3, 10_000)])
def test_chunked_equals_reference_values_and_gradients(lm_factory, sample_factory, temperature, chunk_rows):
    model = lm_factory(seed=1)
    samples = sample_factory(7, seed=3)  # mixed prompt/response lengths: padding in both dimensions
    batch = collate(samples, [1.0] * 7, pad_id=0, device=torch.device("cpu"))
    ref = response_logprobs_reference(model, batch, temperature=temperature)
    (g_ref,) = torch.autograd.grad((ref * batch.resp_mask).sum(), [model.lm_head.weight])
    lp, ent = response_logprobs(model, batch, temperature=temperature, chunk_rows=chunk_rows, with_entropy=True)
    (g,) = torch.autograd.grad((lp * batch.resp_mask).sum(), [model.lm_head.weight])
    m = batch.resp_mask  # compare only real response tokens (padding slots hold garbage by contract)
    torch.testing.assert_close(lp[m], ref[m], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-6)
    # entropy of pi_T at each response position, from the full distribution
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float() / temperature
        rows = logits.gather(1, batch.resp_pos.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))  # [B, R, V]
        want = torch.distributions.Categorical(logits=rows).entropy()
    torch.testing.assert_close(ent[m], want[m], rtol=1e-5, atol=1e-5)


def test_temperature_changes_the_scores(lm_factory, sample_factory):
    # a trainer scoring at T=1 what was sampled at T=0.5 would be scoring another policy
    model = lm_factory(seed=1)
    batch = collate(sample_factory(3, seed=4), [1.0] * 3, pad_id=0, device=torch.device("cpu"))
    with torch.no_grad():
        a, b = response_logprobs(model, batch, temperature=1.0), response_logprobs(model, batch, temperature=0.5)
    assert not torch.allclose(a[batch.resp_mask], b[batch.resp_mask])


def test_token_budget_micro_batches_equal_one_big_batch(lm_factory, sample_factory):
    samples = sample_factory(9, seed=5)
    runs = []
    for cfg in (RLConfig(grad_accum=1), RLConfig(micro_batch_tokens=12)):  # 12 tokens: several micro-batches
        model = lm_factory(seed=2)
        runs.append(train_step(model, torch.optim.SGD(model.parameters(), lr=0.0), samples, cfg, pad_id=0))
    big, budget = runs
    assert budget["loss"] == pytest.approx(big["loss"], rel=1e-5, abs=1e-7)
    assert budget["grad_norm"] == pytest.approx(big["grad_norm"], rel=1e-4)
    assert budget["tokens"] == big["tokens"]


def test_tis_weights_by_hand():
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    rollout = torch.tensor([[-1.0, -3.0, math.nan]])  # the backend gave no log-prob for the last token
    w = tis_weights(old, rollout, cap=2.0)
    # exp(0) = 1; exp(-2 - -3) = e = 2.718 -> capped at 2; NaN -> 1
    assert w[0].tolist() == pytest.approx([1.0, 2.0, 1.0])
    assert tis_weights(old, rollout, cap=0.0) is None and tis_weights(old, None, cap=2.0) is None


def test_rollout_kl_bound_stops_loudly():
    check_rollout_kl(0.4, tokens=100, bound=0.5)  # under the bound: nothing
    check_rollout_kl(9.0, tokens=100, bound=0.0)  # no bound
    check_rollout_kl(9.0, tokens=0, bound=0.5)  # nothing compared (no backend log-probs)
    with pytest.raises(OffPolicyError, match="not serving the weights being trained"):
        check_rollout_kl(0.6, tokens=100, bound=0.5)


def test_step_metrics_are_per_agent_and_include_entropy(lm_factory, sample_factory):
    model = lm_factory(seed=0)
    samples = sample_factory(6, seed=1)
    m = train_step(model, make_optimizer(model, RLConfig()), samples, RLConfig(), pad_id=0)
    for agent in ("policy", "selection", "summary"):
        assert 0.0 <= m[f"clip_frac_{agent}"] <= 1.0 and m[f"entropy_{agent}"] > 0.0
        assert m[f"ratio_mean_{agent}"] == pytest.approx(1.0)  # no behaviour log-probs: on-policy, ratio 1
    assert m["entropy"] > 0.0 and "rollout_kl" not in m  # no backend log-probs in these samples
