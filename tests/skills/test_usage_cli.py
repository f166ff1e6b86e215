"""Usage statistics, retirement with evidence, and the `skills list` / `skills show` commands."""

from __future__ import annotations

import io
import json
import math
from dataclasses import replace

import pytest

from davinci.errors import InputNotFound
from davinci.skills.cli import list_command, show_command
from davinci.skills.config import SkillsConfig
from davinci.skills.store import SkillStore
from davinci.skills.usage import UsageObservation, apply_retirements, retire, reward_gap, update_usage, with_usage


def test_usage_counts_with_and_without_hand_computed():
    obs = [
        UsageObservation(("a", "b"), ("a",), 1.0, True),
        UsageObservation(("a", "b"), ("a",), 0.0, False),
        UsageObservation(("a", "b"), ("b",), 0.5, True),
        UsageObservation(("b",), (), 2.0, False),
        UsageObservation(("a",), ("a",), float("nan"), True),  # dropped: a NaN would poison the means
    ]
    stats = update_usage({}, obs)
    a, b = stats["a"], stats["b"]
    assert (a.times_selected, a.times_succeeded, a.reward_sum, a.reward_sq_sum) == (2, 1, 1.0, 1.0)
    assert (a.times_without, a.reward_sum_without) == (1, 0.5)
    assert (b.times_selected, b.times_without, b.reward_sum_without, b.reward_sq_sum_without) == (1, 3, 3.0, 5.0)
    assert a.mean_with == 0.5 and a.success_rate == 0.5 and a.var_with() == 0.5  # samples 1, 0
    assert b.mean_without == 1.0 and b.var_without() == pytest.approx(1.0)  # samples 1, 0, 2
    assert update_usage(stats, []) == stats and stats["a"] is a  # the input mapping is not changed


def test_reward_gap_hand_computed(skill_factory):
    stats = update_usage({}, [UsageObservation(("s",), ("s",), r, True) for r in (1.0, 3.0)] + [UsageObservation(("s",), (), r, True) for r in (4.0, 6.0)])
    diff, se, upper = reward_gap(stats["s"], z=2.0)
    assert diff == -3.0 and se == pytest.approx(math.sqrt(2 / 2 + 2 / 2)) and upper == pytest.approx(-3.0 + 2 * math.sqrt(2))


def _episodes(with_rewards, without_rewards):
    return [UsageObservation(("sss", "ttt"), ("sss",), r, r > 0.5) for r in with_rewards] + [UsageObservation(("sss", "ttt"), ("ttt",), r, r > 0.5) for r in without_rewards]


def test_retires_a_skill_whose_use_lowers_reward_with_evidence(skill_factory):
    cfg = SkillsConfig(retire_min_samples=8)
    lib = [replace(skill_factory("sss"), status="admitted"), replace(skill_factory("ttt"), status="admitted"), skill_factory("ccc")]
    stats = update_usage({}, _episodes([0.1, 0.2, 0.0, 0.3, 0.1, 0.2, 0.1, 0.0, 0.2], [0.9, 1.0, 0.8, 0.9, 1.1, 1.0, 0.9, 0.8, 1.0]))
    decisions = retire(lib, stats, cfg)
    assert [d.skill_id for d in decisions] == ["sss", "ttt"]  # only admitted skills are judged
    s, t = decisions
    assert s.retired and s.skill.status == "retired"
    ev = dict(s.evidence.stats)
    assert ev["n_with"] == 9 and ev["mean_with"] == pytest.approx(1.2 / 9) and ev["upper"] < 0
    assert "use lowers reward" in s.reasons[0] and s.skill.usage == stats["sss"]
    assert not t.retired and t.evidence is None  # t helps: kept
    new = apply_retirements(lib, decisions)
    assert [x.status for x in new] == ["retired", "admitted", "candidate"]


def test_keeps_skills_without_enough_samples_or_a_clear_gap(skill_factory):
    cfg = SkillsConfig(retire_min_samples=8)
    lib = [replace(skill_factory("sss"), status="admitted")]
    few = retire(lib, update_usage({}, _episodes([0.0] * 7, [1.0] * 20)), cfg)[0]
    assert not few.retired and "8 of each needed" in few.reasons[0]
    noisy = retire(lib, update_usage({}, _episodes([0.0, 1.0] * 5, [0.1, 1.0] * 5)), cfg)[0]
    assert not noisy.retired and "does not show" in noisy.reasons[0]
    # usage carried by the skills themselves is used when no stats are passed
    carried = with_usage(lib, update_usage({}, _episodes([0.0] * 10, [1.0, 0.9] * 5)))
    assert retire(carried, None, cfg)[0].retired


@pytest.fixture
def store(tmp_path, skill_factory):
    store = SkillStore(tmp_path / "skills")
    store.commit([replace(skill_factory("skill-a"), status="admitted"), skill_factory("skill-b")], parent=None, note="v1")
    return store


def test_list_command_text_and_json(store):
    out = io.StringIO()
    assert list_command(store.root, "latest", False, out=out) == 0
    text = out.getvalue()
    assert text.startswith("library version 1: 2 skills (1 admitted, 1 candidate, 0 retired)")
    assert "skill-a" in text and "skill-b" in text
    out = io.StringIO()
    assert list_command(store.root, 1, True, out=out) == 0
    rows = json.loads(out.getvalue())
    assert [r["id"] for r in rows] == ["skill-a", "skill-b"]
    for r in rows:
        assert {"id", "title", "status", "evidence", "effect", "usage"} <= set(r)
    assert rows[0]["status"] == "admitted" and rows[0]["evidence"] == []


def test_show_command_and_bad_ids(store):
    out = io.StringIO()
    assert show_command(store.root, "skill-b", "latest", out=out) == 0
    assert out.getvalue().startswith("## Fuse add and relu") and "```python" in out.getvalue()
    with pytest.raises(InputNotFound, match="try one of: skill-b, skill-a"):
        show_command(store.root, "skill-x", "latest", out=io.StringIO())
    with pytest.raises(InputNotFound, match="no library version yet"):
        list_command(store.root.parent / "empty", "latest", False, out=io.StringIO())


def test_list_seed_library_without_a_store(tmp_path):
    out = io.StringIO()
    assert list_command(tmp_path / "nowhere", "seed", True, out=out) == 0
    rows = json.loads(out.getvalue())
    assert len(rows) >= 20 and all(r["provenance"]["kind"] == "seed" for r in rows)
