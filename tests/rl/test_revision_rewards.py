"""Rewards of episodes that start from a kept revision's parent (RL start states): echoing the parent pays nothing.

The attack: a start-state episode shows the policy a correct parent; sending it back unchanged came back
correct at the parent's speedup, stopped the episode (`stop_when=correct`) and, scored like a scratch
episode, earned the parent's whole reward on every padded turn: copying out-earned every failed attempt to
improve, so a group's advantages taught the policy to copy. Hand-computed values on the kevin reward
(0.3 * 1[correct] + speedup); the copy property over every registered reward.
"""

from __future__ import annotations

import pytest

from davinci.agents.runner import stops
from davinci.agents.starts import StartState
from davinci.rl.advantages import ADVANTAGES
from davinci.rl.config import RLConfig
from davinci.rl.rewards import REWARDS, Parent, episode_rewards, minimal_result

PARENT = Parent("parenthash", 2.0)


def _copy():
    return minimal_result(True, 2.02, speedup_ci=(1.95, 2.08), candidate_hash=PARENT.code_hash)


def _improved():
    return minimal_result(True, 2.5, speedup_ci=(2.4, 2.6), candidate_hash="child")


def test_echoing_the_parent_has_a_failures_advantage_and_an_improvement_a_positive_one() -> None:
    import torch

    cfg = RLConfig(reward="kevin")
    copy, improved, failed = (episode_rewards([r], cfg, horizon=1, parent=PARENT) for r in (_copy(), _improved(), None))
    assert (copy.turn_scores, failed.turn_scores) == ((0.0,), (0.0,))
    assert improved.turn_scores == pytest.approx((0.3 + 0.5,))  # correct, plus 0.5 gained over the parent
    adv = ADVANTAGES.get("trloo")(torch.tensor([copy.turn_returns[0], improved.turn_returns[0], failed.turn_returns[0]]),
                                  torch.tensor([0, 0, 0]))
    assert adv.tolist() == pytest.approx([-0.4, 0.8, -0.4])  # G_i minus the mean of the other two


@pytest.mark.parametrize("reward", REWARDS.names())
def test_a_copy_or_a_correct_kernel_within_the_noise_earns_the_failure_score(reward: str) -> None:
    cfg = RLConfig(reward=reward)
    fail = REWARDS.get(reward).fail_score
    within_noise = minimal_result(True, 2.1, speedup_ci=(1.9, 2.3), candidate_hash="other")
    within_drift = minimal_result(True, 2.12, speedup_ci=(2.05, 2.2), candidate_hash="other")  # < 5% over the parent
    for result in (_copy(), within_noise, within_drift, None, minimal_result(False, None)):
        assert episode_rewards([result], cfg, parent=PARENT).turn_scores == (fail,)
    assert episode_rewards([_improved()], cfg, parent=PARENT).turn_scores[0] > fail


def test_a_flagged_improvement_still_scores_the_hack_penalty() -> None:
    cfg = RLConfig(reward="correct_plus_speedup")
    flagged = minimal_result(True, 9.0, speedup_ci=(8.0, 10.0), candidate_hash="child", flags=("timing",))
    assert episode_rewards([flagged], cfg, parent=PARENT).turn_scores == (cfg.hack_penalty,)


def test_a_revision_episode_stops_at_an_improvement_not_at_the_echo() -> None:
    from types import SimpleNamespace

    agents = SimpleNamespace(stop_when="correct", stop_speedup=1.0)
    start = StartState("p", PARENT.code_hash, "code", "correct", PARENT.speedup)
    turn = lambda r: SimpleNamespace(correct=r.correct, speedup=r.speedup, result=r)  # noqa: E731
    assert not stops(turn(_copy()), agents, start)
    assert stops(turn(_improved()), agents, start)
    assert stops(turn(_copy()), agents, None)  # from scratch, a correct kernel still ends the episode
