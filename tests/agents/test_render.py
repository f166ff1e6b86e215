"""Prompt rendering: skills and the problem in turn 1, feedback and the last attempt later, never the
reference solution; selection and summary prompts; the SFT examples built from the same functions."""

from __future__ import annotations

import json

from davinci.agents.config import AgentsConfig
from davinci.agents.render import PROMPT_DIR, Attempt, policy_messages, selection_messages, summary_messages, template, template_corpus
from davinci.agents.sft_data import reference_skill, sft_examples_for
from davinci.rl.rewards import minimal_result
from davinci.skills import Example, Skill, SkillProvenance, parse_rerank, parse_skill_json


def _text(messages) -> str:
    return "\n".join(m["content"] for m in messages)


def test_first_turn_has_skills_then_problem_and_never_the_solution(problems, skills):
    p = problems[0]
    msgs = policy_messages(p, skills[:2])
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert p.code.strip() in user and "ModelNew" in user and "Triton" in msgs[0]["content"]
    assert user.index(skills[0].title) < user.index(skills[1].title) < user.index("class Model(")
    assert p.reference_solution.strip() not in _text(msgs)
    assert "relu_kernel" not in _text(msgs)


def test_later_turns_add_the_last_attempt_and_its_feedback(problems, skills):
    p = problems[1]
    history = [
        Attempt("class ModelNew: first", "raw1", "verdict: compile error in line 3", False),
        Attempt("class ModelNew: second", "raw2", "verdict: wrong output (max abs error 2.0)", False),
    ]
    msgs = policy_messages(p, skills[:1], history)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[2]["content"] == "```python\nclass ModelNew: second\n```"
    assert "wrong output (max abs error 2.0)" in msgs[3]["content"] and "Fix" in msgs[3]["content"]
    assert "first" not in _text(msgs)  # window of one attempt
    both = policy_messages(p, skills[:1], history, history_window=2)
    assert [m["role"] for m in both] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "compile error in line 3" in both[3]["content"]
    assert p.reference_solution.strip() not in _text(both)


def test_feedback_on_a_correct_attempt_asks_for_speed_and_unparsed_answers_are_shown_raw(problems):
    p = problems[0]
    fast = policy_messages(p, [], [Attempt("code", "", "verdict: correct, 0.8x", True)])
    assert "faster" in fast[-1]["content"] and "verdict: correct, 0.8x" in fast[-1]["content"]
    raw = policy_messages(p, [], [Attempt(None, "I think " * 1000, template("policy_noparse").template, False)])
    assert raw[2]["content"].startswith("I think") and len(raw[2]["content"]) <= 2000
    assert "No ```python code block" in raw[3]["content"]


def test_skill_text_is_clipped_to_the_budget(problems, skills):
    short = policy_messages(problems[0], skills, skill_chars=30)[1]["content"]
    full = policy_messages(problems[0], skills, skill_chars=0)[1]["content"]
    assert skills[0].guidance in full and skills[0].guidance not in short and " ..." in short
    assert len(short) < len(full)


def test_selection_prompt_lists_the_candidates_and_its_answer_format_parses(problems, skills):
    msgs = selection_messages(problems[0], skills)
    text = _text(msgs)
    assert all(s.id in text for s in skills) and problems[0].code.strip() in text
    assert parse_rerank('{"order": ["flat-elementwise-add"]}', [s.id for s in skills]).order[0] == "flat-elementwise-add"


def test_summary_prompt_shows_the_kernel_and_its_measurement(problems, skills):
    p = problems[0]
    msgs = summary_messages(p, p.reference_solution, skills[:1], result=minimal_result(True, 1.5, timing_label="cuda"))
    text = _text(msgs)
    assert p.reference_solution.strip() in text and "1.50x (GPU timing)" in text and skills[0].title in text
    assert '"guidance"' in text  # the skill JSON schema


def test_every_template_file_is_used_and_in_the_tokenizer_corpus():
    names = sorted(p.stem for p in PROMPT_DIR.glob("*.txt"))
    assert names == sorted(["policy_system", "policy_first", "policy_skills", "skill_block", "policy_feedback", "policy_fix",
                            "policy_faster", "policy_noparse", "summary_system", "summary_user"])
    corpus = template_corpus(repeat=2)
    assert len(corpus) == 2 * len(corpus[: len(corpus) // 2]) and any("ModelNew" in t for t in corpus)


def test_sft_examples_one_per_agent_with_parseable_targets(problems, skills):
    p = problems[0]
    examples = sft_examples_for(p, p.reference_solution, skills[:1], candidates=skills)
    assert [e.agent for e in examples] == ["selection", "policy", "policy", "summary"]
    assert all(e.problem_id == p.id and e.messages[-1]["role"] == "assistant" for e in examples)
    sel, pol, pol2, summ = examples
    assert parse_rerank(sel.messages[-1]["content"], [s.id for s in skills]).order[0] == skills[0].id
    assert pol.messages[-1]["content"] == f"```python\n{p.reference_solution.strip()}\n```"
    assert skills[0].title in pol.messages[1]["content"] and skills[1].title in pol2.messages[1]["content"]
    for e in (pol, pol2):
        assert p.reference_solution.strip() not in _text(e.messages[:-1])
    # The runner hands the episode's own (problem, kernel) to the parser as the skill's example.
    skill = parse_skill_json(summ.messages[-1]["content"], SkillProvenance("summary", problem_id=p.id), example=Example(p.code, p.reference_solution))
    assert isinstance(skill, Skill) and skill.backend == "triton" and "relu" in skill.applies_to.ops


def test_sft_examples_without_candidates_and_with_profile_budgets(problems, skills):
    p = problems[1]
    examples = sft_examples_for(p, p.reference_solution, skills[:2], agents=AgentsConfig(skill_chars=20))
    assert [e.agent for e in examples] == ["policy", "summary"]
    assert skills[0].guidance not in examples[0].messages[1]["content"]


def test_reference_skill_reads_the_solution(problems):
    p = problems[0]
    skill = reference_skill(p, p.reference_solution, "triton")
    assert skill["title"] == "Triton kernel for relu"
    assert skill["intent"] == "one elementwise kernel."
    assert skill["guidance"] == "1. mask: the last block runs past the end"
    assert json.loads(json.dumps(skill)) == skill
