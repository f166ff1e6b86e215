"""Advantage estimators: hand-computed values, N=1 groups, multi-turn TRLOO groups, per-agent groups,
and the vectorized implementations equal to the loop references across seeds and shapes."""

from __future__ import annotations

import pytest
import torch

from davinci.errors import UnknownName
from davinci.rl.advantages import ADVANTAGES, REFERENCES, AdvantageItem, compute_advantages


def _adv(name: str, returns: list[float], groups: list[int]) -> torch.Tensor:
    return ADVANTAGES.get(name)(torch.tensor(returns, dtype=torch.float64), torch.tensor(groups))


def test_trloo_hand_computed():
    # group 7: returns 1, 2, 6 -> each minus the mean of the OTHER two: 1-4, 2-3.5, 6-1.5
    # group 3: returns 0, 4   -> 0-4, 4-0
    adv = _adv("trloo", [1.0, 0.0, 2.0, 6.0, 4.0], [7, 3, 7, 7, 3])
    torch.testing.assert_close(adv, torch.tensor([-3.0, -4.0, -1.5, 4.5, 4.0]))


def test_trloo_singleton_group_is_the_return():
    # N=1: no other sample to form a baseline from -> A = G (Dr. Kernel's rule)
    torch.testing.assert_close(_adv("trloo", [2.5], [0]), torch.tensor([2.5]))
    torch.testing.assert_close(_adv("trloo", [2.5, -1.0], [0, 1]), torch.tensor([2.5, -1.0]))


def test_trloo_equals_scaled_centering():
    # Dr. Kernel writes TRLOO as N/(N-1) * (G - mean(G)); check that identity on one group of 4
    g = torch.tensor([0.5, 1.5, 3.0, -1.0], dtype=torch.float64)
    expected = 4 / 3 * (g - g.mean())
    torch.testing.assert_close(ADVANTAGES.get("trloo")(g, torch.zeros(4, dtype=torch.long)), expected.float())


def test_multi_turn_trloo_groups_by_turn():
    # 3 rollouts x 2 turns of one problem; policy group = (problem, epoch, turn): turn 0 returns 1, 0, 2
    # (A = 1-1, 0-1.5, 2-0.5), turn 1 returns 3, 3, 0 (A = 3-1.5, 3-1.5, 0-3). Turns never mix.
    items = []
    for ret0, ret1 in [(1.0, 3.0), (0.0, 3.0), (2.0, 0.0)]:
        items.append(AdvantageItem("policy", ("p", 0, 0), ret0))
        items.append(AdvantageItem("policy", ("p", 0, 1), ret1))
    adv = compute_advantages(items, "trloo")
    assert adv == pytest.approx([0.0, 1.5, -1.5, 1.5, 1.5, -3.0])


def test_each_agent_has_its_own_baseline():
    # Same group key for two agents: the selection agent's 10.0 must not enter the policy's baseline.
    items = [
        AdvantageItem("policy", ("p",), 1.0),
        AdvantageItem("policy", ("p",), 3.0),
        AdvantageItem("selection", ("p",), 10.0),
        AdvantageItem("selection", ("p",), 0.0),
    ]
    assert compute_advantages(items, "trloo") == pytest.approx([-2.0, 2.0, 10.0, -10.0])
    assert compute_advantages(items, "reinforce_baseline") == pytest.approx([-1.0, 1.0, 5.0, -5.0])


def test_grpo_hand_computed():
    # group 0: 1, 2, 3 -> mean 2, unbiased std 1 -> -1, 0, 1 (over std + 1e-6)
    # group 1: singleton 5 -> 5 (verl: mean 0, std 1); group 2: 2, 2 -> std 0 -> 0
    adv = _adv("grpo", [1.0, 2.0, 3.0, 5.0, 2.0, 2.0], [0, 0, 0, 1, 2, 2])
    s = 1.0 / (1.0 + 1e-6)
    torch.testing.assert_close(adv, torch.tensor([-s, 0.0, s, 5.0, 0.0, 0.0]))


def test_reinforce_batch_baseline_hand_computed():
    # batch mean of 1, 2, 6 is 3; groups are ignored
    torch.testing.assert_close(_adv("reinforce_baseline", [1.0, 2.0, 6.0], [0, 1, 2]), torch.tensor([-2.0, -1.0, 3.0]))
    torch.testing.assert_close(_adv("reinforce_baseline", [4.0], [0]), torch.tensor([4.0]))


@pytest.mark.parametrize("name", ["trloo", "grpo", "reinforce_baseline"])
@pytest.mark.parametrize("n,k,seed", [(1, 1, 0), (7, 3, 1), (64, 5, 2), (257, 40, 3), (500, 500, 4)])
def test_fast_equals_reference(name, n, k, seed):
    gen = torch.Generator().manual_seed(seed)
    returns = torch.randn(n, generator=gen, dtype=torch.float64) * 3
    groups = torch.randint(-k, k, (n,), generator=gen) * 13  # sparse, negative labels on purpose
    fast = ADVANTAGES.get(name)(returns, groups)
    ref = REFERENCES[name](returns, groups)
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)


def test_registry_and_references_cover_the_same_names():
    assert set(ADVANTAGES.names()) == set(REFERENCES)


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(UnknownName) as err:
        compute_advantages([AdvantageItem("policy", (), 1.0)], "ppo_gae")
    assert "trloo" in str(err.value) and "grpo" in str(err.value) and "reinforce_baseline" in str(err.value)


def test_doctests():
    import doctest

    import davinci.rl.advantages as mod

    assert doctest.testmod(mod).failed == 0
