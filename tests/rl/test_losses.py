"""Losses with their masks on a 2-sequence example computed by hand (clip, KL, normalization, weights)."""

from __future__ import annotations

import math

import pytest
import torch

from davinci.errors import ConfigError, UnknownName
from davinci.rl.config import RLConfig
from davinci.rl.losses import LOSSES, LossInputs, kl_per_token, normalization_scale

LN2 = math.log(2.0)


def _example(ref: bool = True) -> LossInputs:
    """Sequence A (policy, A=+1): 2 response tokens + 1 padding slot holding garbage that must be ignored.
    Sequence B (summary, A=-2): 3 response tokens. Ratios r = exp(logp - old): A = [1, 1.5], B = [0.5, 1, 1.1].
    Reference: log(pi/ref) = ln2 on A's 2nd token, -0.5 on B's 3rd, 0 elsewhere."""
    logp = torch.tensor([[-1.0, -2.0, 100.0], [-0.5, -1.5, -3.0]], requires_grad=True)
    ratios = torch.tensor([[1.0, 1.5, 1.0], [0.5, 1.0, 1.1]])
    old = logp.detach() - torch.log(ratios)
    old[0, 2] = -1e4  # padding slot: exp(100 + 1e4) would overflow if it were ever used
    log_pi_over_ref = torch.tensor([[0.0, LN2, -1e4], [0.0, 0.0, -0.5]])
    return LossInputs(
        logprobs=logp,
        old_logprobs=old,
        advantages=torch.tensor([1.0, -2.0]),
        # padding slot of A is False: its garbage logp / ratio / KL must not reach the loss
        mask=torch.tensor([[True, True, False], [True, True, True]]),
        # token normalization, weights policy 1.0, summary 0.5: A -> 1/2 tokens, B -> 0.5/3 tokens
        token_scale=torch.tensor([0.5, 0.5 / 3]),
        ref_logprobs=(logp.detach() - log_pi_over_ref) if ref else None,
    )


def test_reinforce_clip_hand_computed():
    # A (A=+1): token1 r=1 -> -1; token2 r=1.5 -> max(-1.5, -1.2) = -1.2 (clipped). Sum -2.2, x0.5 = -1.1
    # B (A=-2): r=0.5 -> max(1.0, 1.6) = 1.6 (clipped); r=1 -> 2.0; r=1.1 -> 2.2 (inside). Sum 5.8, x0.5/3
    out = LOSSES.get("reinforce_clip")(_example(), RLConfig(clip_ratio=0.2, kl_coef=0.0))
    expected = -1.1 + 5.8 * 0.5 / 3
    assert float(out.loss.detach()) == pytest.approx(expected, abs=1e-6)
    assert out.stats["clipped"] == 2.0
    assert out.stats["tokens"] == 5.0
    assert out.stats["ratio_sum"] == pytest.approx(1 + 1.5 + 0.5 + 1 + 1.1, abs=1e-5)


def test_reinforce_clip_gradient_is_reinforce_where_unclipped():
    inputs = _example()
    LOSSES.get("reinforce_clip")(inputs, RLConfig(clip_ratio=0.2)).loss.backward()
    grad = inputs.logprobs.grad
    assert bool(torch.isfinite(grad).all())  # the overflowing padding slot leaks no NaN into the gradient
    # d/dlogp of -r*A*scale = -r*A*scale on unclipped tokens; 0 where the clip is active or masked
    expected = torch.tensor([[-1.0 * 0.5, 0.0, 0.0], [0.0, 2.0 * 0.5 / 3, 2.0 * 1.1 * 0.5 / 3]])
    torch.testing.assert_close(grad, expected)


def test_asymmetric_clip_high():
    # clip_ratio_high = 0.6: A's token2 r=1.5 is now inside (1-0.2, 1+0.6): -1.5 instead of -1.2
    out = LOSSES.get("reinforce_clip")(_example(), RLConfig(clip_ratio=0.2, clip_ratio_high=0.6))
    expected = (-1.0 - 1.5) * 0.5 + 5.8 * 0.5 / 3
    assert float(out.loss.detach()) == pytest.approx(expected, abs=1e-6)


def test_k3_kl_term_hand_computed():
    # k3(x) = e^-x + x - 1 with x = log(pi/ref): ln2 -> 0.5 + ln2 - 1; -0.5 -> e^0.5 - 1.5; 0 -> 0.
    # The padded slot (x = -1e4, k3 = inf) is masked out.
    k_a = 0.5 + LN2 - 1.0
    k_b = math.exp(0.5) - 1.5
    cfg = RLConfig(clip_ratio=0.2, kl_coef=0.1, kl_estimator="k3")
    inputs = _example()
    out = LOSSES.get("reinforce_clip")(inputs, cfg)
    kl_loss = 0.1 * (k_a * 0.5 + k_b * 0.5 / 3)
    assert out.stats["kl_loss"] == pytest.approx(kl_loss, abs=1e-6)
    assert float(out.loss.detach()) == pytest.approx(-1.1 + 5.8 * 0.5 / 3 + kl_loss, abs=1e-6)
    assert out.stats["kl_sum"] == pytest.approx(k_a + k_b, abs=1e-6)
    out.loss.backward()  # the padded slot's infinite k3 must not turn the gradient into NaN
    assert bool(torch.isfinite(inputs.logprobs.grad).all())


def test_k1_kl_term_hand_computed():
    # k1 = x itself: ln2 on A (x0.5), -0.5 on B (x0.5/3)
    out = LOSSES.get("reinforce_clip")(_example(), RLConfig(kl_coef=0.1, kl_estimator="k1"))
    assert out.stats["kl_loss"] == pytest.approx(0.1 * (LN2 * 0.5 - 0.5 * 0.5 / 3), abs=1e-6)


def test_plain_reinforce_hand_computed():
    # -A * logp: A: -1*(-1-2) = 3, x0.5 = 1.5; B: 2*(-0.5-1.5-3) = -10, x0.5/3. Garbage 100.0 masked.
    out = LOSSES.get("reinforce")(_example(), RLConfig(clip_ratio=0.2))
    assert float(out.loss.detach()) == pytest.approx(1.5 - 10 * 0.5 / 3, abs=1e-6)
    assert out.stats["clipped"] == 0.0


def test_kl_needs_reference_logprobs():
    with pytest.raises(ConfigError, match="reference"):
        LOSSES.get("reinforce_clip")(_example(ref=False), RLConfig(kl_coef=0.1))


def test_kl_k3_is_nonnegative_and_zero_at_equality():
    x = torch.linspace(-3, 3, 13)
    k3 = kl_per_token(x, torch.zeros(13), "k3")
    assert bool((k3 >= 0).all()) and float(k3[6]) == 0.0


def test_kl_k3_is_bounded_per_token_like_low_var_kl():
    """Hand-computed: k3(x = -1) = e - 2; a token 13 nats below the reference reads 10, not e^13 - 14; 1000
    nats above reads 10 without overflow."""
    k3 = kl_per_token(torch.tensor([-1.0, -13.0, 1000.0]), torch.zeros(3), "k3")
    assert k3.tolist() == pytest.approx([torch.e - 2, 10.0, 10.0])
    assert bool(torch.isfinite(k3).all())


def test_normalization_token_vs_sequence():
    # one agent, lengths 2 and 3: token -> every token 1/5; sequence -> each sequence's mean, averaged
    assert normalization_scale(["policy"] * 2, [2, 3], {"policy": 1.0}, "token") == pytest.approx([0.2, 0.2])
    assert normalization_scale(["policy"] * 2, [2, 3], {"policy": 1.0}, "sequence") == pytest.approx([0.25, 1 / 6])
    # each agent normalized over its own tokens, then weighted
    assert normalization_scale(["policy", "selection", "policy"], [4, 1, 6], {"policy": 2.0, "selection": 0.5}, "token") == pytest.approx(
        [0.2, 0.5, 0.2]
    )


def test_missing_agent_weight_is_an_error():
    with pytest.raises(ConfigError, match="summary"):
        normalization_scale(["summary"], [3], {"policy": 1.0}, "token")


def test_unknown_loss_lists_valid_names():
    with pytest.raises(UnknownName) as err:
        LOSSES.get("ppo")
    assert "reinforce_clip" in str(err.value) and "reinforce" in str(err.value)


def test_doctests():
    import doctest

    import davinci.rl.losses as mod

    assert doctest.testmod(mod).failed == 0
