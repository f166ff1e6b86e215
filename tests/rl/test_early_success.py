"""The objective pays for fast kernels, not slow ones: under every profile in configs/ and every advantage
estimator, the episode that succeeds at turn 0 gets the highest turn-0 advantage of its group.

The episodes are played through the runner's own early-stop rule (`agents.runner.stops`, the profile's
`stop_when`), scored with the profile's reward, and turned into advantages by `samples.advantage_plan`
(the trainer's own path). The group holds the trajectories the issue named: a kernel that meets the stop
rule at once; the same kernel after failures; slow-but-correct turns (that never meet a `fast` rule); and
all failures. Summing only the played turns (the old rule) fails this test on every profile: on tiny,
"correct at turn 0" ties "wrong, then correct"; on h100, three slow turns out-earn one fast one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from davinci.agents.episode import Turn
from davinci.agents.runner import stops
from davinci.config import load_profile
from davinci.rl.advantages import ADVANTAGES
from davinci.rl.rewards import minimal_result
from davinci.rl.samples import advantage_plan

PROFILES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def results(stop_speedup: float) -> dict[str, object]:
    """A kernel that meets any stop rule, a slow correct one (below stop_speedup and eager), a failure."""
    fast = minimal_result(True, max(stop_speedup, 1.0) * 1.5, speedup_compile=1.2, sol_percent=60.0, kernel_coverage=0.9)
    slow = minimal_result(True, min(stop_speedup, 1.0) * 0.5, speedup_compile=0.4, sol_percent=10.0, kernel_coverage=0.9)
    fail = minimal_result(False, None)
    return {"F": fast, "S": slow, "X": fail}


def play(plan: str, profile, episode_factory, name: str):
    """An episode that tries plan[t] at turn t and stops where the runner's rule stops it."""
    res = results(profile.agents.stop_speedup)
    played = []
    for t, key in enumerate(plan[: profile.agents.turns]):
        played.append(res[key])
        if stops(Turn(t, None, None, res[key]), profile.agents):  # type: ignore[arg-type]
            break
    return episode_factory(name, "prob", played)


@pytest.mark.parametrize("estimator", ADVANTAGES.names())
@pytest.mark.parametrize("profile_name", PROFILES)
def test_turn0_success_gets_the_highest_turn0_advantage(profile_name, estimator, episode_factory):
    profile = load_profile(profile_name, [f"rl.advantage={estimator}"])
    T = profile.agents.turns
    assert T >= 2, "the property needs a second turn to compare against"
    plans = {"at_once": "F" * T, "after_failures": "X" * (T - 1) + "F", "fail_then_fast": "XF" + "F" * (T - 2),
             "slow_then_fast": "S" * (T - 1) + "F", "slow_throughout": "S" * T, "never": "X" * T}
    episodes = [play(plan, profile, episode_factory, name) for name, plan in plans.items()]
    assert len(episodes[0].turns) == 1  # the fast kernel stops the episode at turn 0 under every profile
    planned, _ = advantage_plan(episodes, profile)
    turn0 = {p.key.split("/")[0]: p.advantage for p in planned if p.key.endswith("/policy/0")}
    # trajectories that also met the stop rule at turn 0 (slow counts under stop_when=correct) are peers
    peers = {e.episode_id for e in episodes if len(e.turns) == 1 and e.turns[0].correct}
    rivals = {k: a for k, a in turn0.items() if k not in peers}
    assert rivals, "some trajectory must not succeed at turn 0"
    assert turn0["at_once"] > max(rivals.values()), (profile_name, estimator, turn0)
