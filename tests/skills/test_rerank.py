"""The rerank prompt and its parser: a valid order is read, garbage falls back to BM25 order (ok=False)."""

from __future__ import annotations

import json
import random
import string

import pytest

from davinci.skills.rerank import apply_order, parse_rerank, rerank_messages
from davinci.skills.seed import seed_skills

IDS = ["triton-a", "triton-b", "cuda-c", "triton-d"]


def test_messages_come_from_the_templates_and_list_every_candidate(sources):
    skills = seed_skills(evidence_path=None)[:4]
    msgs = rerank_messages(sources.problem + "\n# {braces} and $dollars survive\n", skills, max_code_chars=10_000)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert '{"order"' in msgs[0]["content"]
    user = msgs[1]["content"]
    assert "{braces} and $dollars survive" in user
    for s in skills:
        assert f"id: {s.id}" in user
    assert "Valid ids: " + ", ".join(s.id for s in skills) in user
    clipped = rerank_messages("x = 1\n" * 5000, skills, max_code_chars=100)[1]["content"]
    assert "(truncated)" in clipped and len(clipped) < 12_000


@pytest.mark.parametrize(
    "text, order, ranked",
    [
        ('{"order": ["cuda-c", "triton-a"]}', ("cuda-c", "triton-a", "triton-b", "triton-d"), 2),
        ('Sure!\n```json\n{"order": ["triton-d", "triton-d", "nope", "triton-b"]}\n```\nDone.', ("triton-d", "triton-b", "triton-a", "cuda-c"), 2),
        ('["triton-b", "triton-a", "cuda-c", "triton-d"]', ("triton-b", "triton-a", "cuda-c", "triton-d"), 4),
        ('{"ranking": [{"id": "cuda-c"}, {"id": "triton-a"}]}', ("cuda-c", "triton-a", "triton-b", "triton-d"), 2),
        ('thinking... {"order": ["zzz"]} then {"order": [" triton-d "]}', ("triton-d", "triton-a", "triton-b", "cuda-c"), 1),
    ],
)
def test_valid_orders_are_read(text, order, ranked):
    result = parse_rerank(text, IDS)
    assert result.ok and result.order == order and result.ranked == ranked


@pytest.mark.parametrize("text", ["", "I think triton-a is best", '{"order": []}', '{"order": ["unknown"]}', '{"order": "triton-a"}', "{" * 10_000, None, 42])
def test_unparsable_output_falls_back_to_bm25_order(text):
    result = parse_rerank(text, IDS)
    assert not result.ok and result.order == tuple(IDS) and result.reason


def test_parser_survives_random_garbage_property():
    """Over many random strings (raw bytes, JSON fragments, ids mixed in) the result is always a
    permutation of the candidates, and ok only when a JSON list naming a candidate was present."""
    rng = random.Random(1234)
    pieces = ['{"order": [', "]", "}", '"', ",", "[", "triton-a", '"triton-b"', "\\", "```json\n", "```", "null", "\n"] + list(string.printable)
    n_ok = 0
    for i in range(2000):
        noise = "".join(rng.choice(string.printable + "\x00\u2603") for _ in range(rng.randint(0, 200)))
        if i % 3 == 0:
            text = noise
        elif i % 3 == 1:
            text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))
        else:  # a JSON answer (ids known and unknown, maybe truncated) buried in noise
            ids = [rng.choice(IDS + ["bogus", "", "triton"]) for _ in range(rng.randint(0, 5))]
            answer = json.dumps({"order": ids})[: rng.randint(0, 80)]
            text = noise[: len(noise) // 2] + answer + noise[len(noise) // 2 :]
        result = parse_rerank(text, IDS)
        assert sorted(result.order) == sorted(IDS), text
        n_ok += result.ok
        if result.ok:
            assert result.ranked >= 1 and any(i in text for i in IDS)
    assert 0 < n_ok < 2000  # both paths were exercised


def test_huge_output_is_bounded_and_apply_order_keeps_everyone():
    text = json.dumps({"order": ["triton-b"]}) + " " + "[" * 300_000
    assert parse_rerank(text, IDS).order[0] == "triton-b"
    skills = seed_skills(evidence_path=None)[:3]
    result = parse_rerank(json.dumps({"order": [skills[2].id]}), [s.id for s in skills])
    assert [s.id for s in apply_order(skills, result)] == [skills[2].id, skills[0].id, skills[1].id]
