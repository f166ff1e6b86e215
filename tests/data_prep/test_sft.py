"""SFT examples: roles, agent tags, the policy target is the reference solution, prompts never leak it.

`sft_doubles` (conftest.py) holds a double of `davinci.agents.sft_examples_for` (being built in parallel)
and of the retriever; `test_real_skills_path` uses the real seed skills and BM25. `test_real_agents_path` runs the real agents function once
it exists and checks that SFT policy prompts equal the RL-time `policy_messages`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.builtin import builtin_problems
from data_prep.sft import build_sft_examples, example_from_dict, example_to_dict, load_trajectories
from davinci.errors import DavinciError, InputNotFound
from davinci.llm.types import AGENT_ROLES, ChatExample

PROBLEMS = builtin_problems()[:4]


def test_roles_tags_and_policy_target(sft_doubles):
    examples = build_sft_examples(PROBLEMS, seed=0, select_k=2, bm25_top_k=5, **sft_doubles.kwargs())
    assert len(examples) == 3 * len(PROBLEMS)
    assert {e.agent for e in examples} == set(AGENT_ROLES)
    solutions = {p.id: p.reference_solution for p in PROBLEMS}
    for example in examples:
        assert example.problem_id in solutions
        assert all(m["role"] in ("system", "user", "assistant") for m in example.messages)
        if example.agent == "policy":
            assert example.messages[-1] == {"role": "assistant", "content": f"```python\n{solutions[example.problem_id]}\n```"}
            prompt = "".join(m["content"] for m in example.messages[:-1])
            assert solutions[example.problem_id].strip() not in prompt
    assert len(sft_doubles.calls) == len(PROBLEMS)
    for call in sft_doubles.calls:  # the retriever's top 5 are the candidates, the first 2 are selected
        assert 0 < len(call["candidates"]) <= 5 and call["skills"] == call["candidates"][:2]


def test_real_skills_path(sft_doubles):
    """Default skills path: the skills package's seed skills through its real BM25 retriever."""
    examples = build_sft_examples(PROBLEMS, skills=None, seed=0, select_k=2, bm25_top_k=5, example_fn=sft_doubles.example_fn)
    assert len(examples) == 3 * len(PROBLEMS)
    for call in sft_doubles.calls:
        assert 0 < len(call["candidates"]) <= 5 and call["skills"] == call["candidates"][:2]


def test_seeded_shuffle_and_problems_without_solution(sft_doubles):
    kwargs = dict(skills=[], example_fn=sft_doubles.example_fn, retriever_factory=lambda s: None)
    first = build_sft_examples(PROBLEMS, seed=0, **kwargs)
    assert first == build_sft_examples(PROBLEMS, seed=0, **kwargs)
    assert first != build_sft_examples(PROBLEMS, seed=1, **kwargs) and sorted(map(repr, first)) == sorted(
        map(repr, build_sft_examples(PROBLEMS, seed=1, **kwargs))
    )
    no_solution = [p.__class__(**{**p.__dict__, "reference_solution": None}) for p in PROBLEMS]
    assert build_sft_examples(no_solution, seed=0, **kwargs) == []


def test_a_leaking_prompt_or_malformed_example_is_an_error():
    def leaking(problem, solution_code, skills, **_):
        return [ChatExample("policy", ({"role": "user", "content": solution_code}, {"role": "assistant", "content": "x"}), problem.id)]

    def malformed(problem, solution_code, skills, **_):
        return [ChatExample("critic", ({"role": "assistant", "content": "x"},), problem.id)]  # type: ignore[arg-type]

    for fn, message in ((leaking, "contains the reference solution"), (malformed, "critic")):
        with pytest.raises(DavinciError, match=message):
            build_sft_examples(PROBLEMS[:1], skills=[], example_fn=fn, retriever_factory=lambda s: None)


def test_trajectories_are_validated_line_by_line(tmp_path: Path):
    good = {"agent": "summary", "problem_id": "p", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    lines = [
        json.dumps(good),
        "",
        "{not json",
        json.dumps({"messages": []}),
        json.dumps({"messages": [{"role": "tool", "content": "x"}]}),
        json.dumps({"messages": [{"role": "user", "content": "only a prompt"}]}),
        json.dumps({**good, "agent": "critic"}),
        json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}),
    ]
    path = tmp_path / "traj.jsonl"
    path.write_text("\n".join(lines) + "\n")
    loaded = load_trajectories(path)
    assert [e.agent for e in loaded.examples] == ["summary", "policy"]  # agent defaults to policy
    assert [int(r.problem_id.split(":")[1]) for r in loaded.errors] == [3, 4, 5, 6, 7]
    assert all(r.reason == "bad-trajectory" and r.detail.startswith("line ") for r in loaded.errors)
    assert "not valid JSON" in loaded.errors[0].detail and "critic" in loaded.errors[-1].detail
    assert example_from_dict(example_to_dict(loaded.examples[0])) == loaded.examples[0]
    with pytest.raises(InputNotFound, match="data.sft_trajectories"):
        load_trajectories(tmp_path / "missing.jsonl")


def test_real_agents_path():
    """The default path: the agents package's sft_examples_for with real seed skills and BM25."""
    import davinci.agents as agents

    if not hasattr(agents, "sft_examples_for") or not hasattr(agents, "policy_messages"):
        pytest.skip("davinci.agents.sft_examples_for / policy_messages are not built yet")
    from davinci.skills import BM25Retriever, seed_skills

    problem = PROBLEMS[0]
    examples = build_sft_examples([problem], seed=0, select_k=3, bm25_top_k=8)
    assert {e.agent for e in examples} <= set(AGENT_ROLES) and any(e.agent == "policy" for e in examples)
    selected = [s for s, _ in BM25Retriever(seed_skills()).search(problem.code, 8)][:3]
    policy = [e for e in examples if e.agent == "policy"]
    for example in policy:
        assert example.messages[-1]["role"] == "assistant"
        assert "```python" in example.messages[-1]["content"]
        assert problem.reference_solution.strip() in example.messages[-1]["content"]
        prompt = list(example.messages[:-1])
        assert all(problem.reference_solution.strip() not in m["content"] for m in prompt)
    # SFT prompt == RL-time prompt for the selected skills (other examples vary the skill list on purpose)
    rl_prompt = list(agents.policy_messages(problem, selected, ()))
    assert any(list(e.messages[:-1]) == rl_prompt for e in policy)


def test_candidates_are_passed_only_to_functions_that_take_them(sft_doubles):
    seen = []

    def three_args(problem, solution_code, skills):
        seen.append([s.id for s in skills])
        return sft_doubles.example_fn(problem, solution_code, skills)

    kwargs = sft_doubles.kwargs()
    kwargs["example_fn"] = three_args
    examples = build_sft_examples(PROBLEMS[:2], seed=0, select_k=1, **kwargs)
    assert len(examples) == 6 and all(len(ids) <= 1 for ids in seen)
