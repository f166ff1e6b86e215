"""Episodes survive a JSON round trip exactly; best turn and generation order are what the trainer expects."""

from __future__ import annotations

import json

from davinci.agents.episode import Episode, Generation, Turn, best_turn
from davinci.kernelgym.result import TimingStats
from davinci.llm.types import GenOutput
from davinci.rl.rewards import minimal_result
from davinci.types import Candidate, Provenance


def _gen(agent: str, text: str, ok: bool = True) -> Generation:
    out = GenOutput(text, (1, 2, 3), (7, 8, 0), (-0.25, -1.5, -0.125), "stop")
    return Generation(agent, ({"role": "system", "content": "s"}, {"role": "user", "content": f"u {text}"}), out, ok)  # type: ignore[arg-type]


def _episode() -> Episode:
    cand = lambda t: Candidate("p/1", f"class ModelNew: {t}", "triton", Provenance("p/1@e0s1", 0, t, "policy"))  # noqa: E731
    turns = (
        Turn(0, _gen("policy", "garbage", ok=False), None, None),
        Turn(1, _gen("policy", "slow"), cand(1), minimal_result(True, 0.8, feedback="ok", runtime=TimingStats(1.0, 0.9, 1.1, 1.0, 0.1, 0.9, 1.2, 5))),
        Turn(2, _gen("policy", "fast"), cand(2), minimal_result(True, 1.7, feedback="ok")),
        Turn(3, _gen("policy", "wrong"), cand(3), minimal_result(False, None, flags=("decoy",), feedback="no")),
    )
    return Episode("p/1@e0s1", "p/1", 0, 1, _gen("selection", '{"order": ["a"]}'), ("a", "b"), ("a",), turns,
                   _gen("summary", "{}", ok=False), None, "no JSON object found")


def test_json_round_trip_is_exact():
    ep = _episode()
    text = json.dumps(ep.to_dict())
    back = Episode.from_dict(json.loads(text))
    assert back == ep
    assert json.dumps(back.to_dict()) == text


def test_round_trip_with_empty_parts():
    ep = Episode("p@e1s0", "p", 1, 0, None, (), (), (), None, {"id": "s-1", "title": "t"}, None)
    assert Episode.from_dict(json.loads(json.dumps(ep.to_dict()))) == ep


def test_best_turn_is_the_fastest_correct_one_and_generations_are_in_order():
    ep = _episode()
    assert ep.solved and ep.best_turn().index == 2
    assert [g.agent for g in ep.generations()] == ["selection", "policy", "policy", "policy", "policy", "summary"]
    assert Turn(0, _gen("policy", "x"), None, None).correct is False


def test_best_turn_is_one_rule_fastest_correct_else_last_evaluated():
    ep = _episode()
    # within the first two turns only the slow correct one counts; within one turn there is nothing evaluated
    assert ep.best_turn(max_turns=2).index == 1 and ep.best_turn(max_turns=1) is None
    # no correct turn: the last evaluated turn (not the unparsed turn 0), so eval can report its error
    unsolved = [t for t in ep.turns if not t.correct]
    assert best_turn(unsolved).index == 3
    # a tie in speedup goes to the earlier turn
    tie = [ep.turns[2], Turn(5, ep.turns[2].generation, ep.turns[2].candidate, ep.turns[2].result)]
    assert best_turn(tie).index == 2
