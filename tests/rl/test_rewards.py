"""Rewards: hand-computed per-turn scores, hack penalty, defensive reads, discounted returns, agent rewards."""

from __future__ import annotations

import dataclasses
import doctest
import math

import pytest

import davinci.rl.rewards as rewards_mod
from davinci.errors import UnknownName
from davinci.rl.config import RLConfig
from davinci.rl.rewards import REWARDS, minimal_result, discounted_returns, episode_rewards, resolve_gamma, summary_reward

OK = minimal_result(True, 2.0, speedup_compile=0.8, sol_percent=30.0)


def res(base=OK, **fields):
    """`base` with some fields replaced (EvalResult is frozen)."""
    return dataclasses.replace(base, **fields)


def score(name: str, result, **cfg) -> float:
    return REWARDS.get(name)(result, RLConfig(**cfg))


def test_doctests():
    assert doctest.testmod(rewards_mod).failed == 0


def test_correct_plus_speedup_hand_computed():
    assert score("correct_plus_speedup", OK) == pytest.approx(0.5 + 0.5 * 2.0)
    # clipped at the cap: speedup 10 counts as 3
    assert score("correct_plus_speedup", res(speedup=10.0)) == pytest.approx(0.5 + 0.5 * 3.0)
    # vs torch.compile baseline: 0.8
    assert score("correct_plus_speedup", OK, speedup_baseline="compile") == pytest.approx(0.5 + 0.4)
    # coverage term only with a weight and a reported coverage
    assert score("correct_plus_speedup", res(kernel_coverage=0.6), w_coverage=0.5) == pytest.approx(1.5 + 0.3)
    assert score("correct_plus_speedup", OK, w_coverage=0.5) == pytest.approx(1.5)


def test_failures_score_zero_and_no_code_is_a_failure():
    assert score("correct_plus_speedup", res(correct=False)) == 0.0
    assert score("correct_plus_speedup", res(compiled=False)) == 0.0
    assert score("correct_plus_speedup", None) == 0.0
    assert score("milestone", None) == -1.0


def test_kevin_hand_computed():
    assert score("kevin", OK) == pytest.approx(0.3 + 2.0)
    assert score("kevin", res(correct=False)) == 0.0
    assert resolve_gamma(RLConfig(reward="kevin")) == 0.4
    assert resolve_gamma(RLConfig(reward="kevin", gamma=0.8)) == 0.8


def test_sol_hand_computed():
    assert score("sol", OK) == pytest.approx(0.5 + 0.3)
    assert score("sol", res(sol_percent=250.0)) == pytest.approx(1.5)  # clipped at 100%


def test_milestone_levels():
    assert score("milestone", res(speedup=0.9)) == 1.0
    assert score("milestone", OK) == 2.0
    assert score("milestone", res(speedup_compile=1.2)) == 3.0


@pytest.mark.parametrize("name", ["correct_plus_speedup", "kevin", "sol", "milestone"])
def test_flagged_hack_always_gets_the_penalty(name):
    # a "correct", 100x-fast kernel that the evaluator flagged must earn the penalty, nothing more
    hacked = res(speedup=100.0, speedup_compile=100.0, sol_percent=99.0, flags=("no_triton_launch",))
    assert score(name, hacked, hack_penalty=-0.7) == -0.7


def test_unmeasured_and_non_finite_fields_earn_nothing():
    # NaN / None / inf / negative speedups: no crash, the term just earns nothing
    assert score("correct_plus_speedup", minimal_result(True, None)) == pytest.approx(0.5)
    assert score("correct_plus_speedup", minimal_result(True, math.nan)) == pytest.approx(0.5)
    assert score("kevin", minimal_result(True, math.inf)) == pytest.approx(0.3)
    assert score("correct_plus_speedup", minimal_result(True, -3.0)) == pytest.approx(0.5)


def test_coverage_is_read_from_the_typed_field_only():
    # EvalResult has kernel_coverage and nothing else: the coverage term follows it exactly
    assert score("correct_plus_speedup", minimal_result(True, None, kernel_coverage=0.4), w_coverage=0.5) == pytest.approx(0.7)
    assert score("correct_plus_speedup", minimal_result(True, None, kernel_coverage=None), w_coverage=0.5) == pytest.approx(0.5)
    assert not hasattr(OK, "time_coverage")  # a renamed field would fail here, not zero a term silently


def test_discounted_returns_hand_computed():
    # Kevin, gamma 0.4: s = [0, 1, 2] -> R2 = 2, R1 = 1 + 0.8 = 1.8, R0 = 0 + 0.4*1.8 = 0.72
    assert discounted_returns([0.0, 1.0, 2.0], 0.4) == pytest.approx([0.72, 1.8, 2.0])
    assert discounted_returns([1.0, 1.0], 1.0) == pytest.approx([2.0, 1.0])
    assert discounted_returns([], 0.4) == []


def test_episode_rewards_policy_and_selection():
    # turns: fail, correct at 2x, correct at 1x; Dr. Kernel score: 0, 1.5, 1.0; gamma 1 returns 2.5, 2.5, 1.0
    r = episode_rewards([res(compiled=False, correct=False), OK, res(speedup=1.0)], RLConfig())
    assert r.turn_scores == pytest.approx((0.0, 1.5, 1.0))
    assert r.turn_returns == pytest.approx((2.5, 2.5, 1.0))
    assert r.selection == 1.5  # the best turn: what the selected skills let the policy reach


def test_summary_reward():
    assert summary_reward(True, 0.5, RLConfig(w_summary_admit=1.0, w_summary_use=2.0)) == pytest.approx(2.0)
    assert summary_reward(True, 3.0, RLConfig()) == pytest.approx(2.0)  # use rate clipped to 1
    assert summary_reward(False, 1.0, RLConfig()) == 0.0


def test_unknown_reward_lists_valid_names():
    with pytest.raises(UnknownName) as err:
        episode_rewards([OK], RLConfig(reward="speed"))
    for name in ("correct_plus_speedup", "kevin", "sol", "milestone"):
        assert name in str(err.value)
