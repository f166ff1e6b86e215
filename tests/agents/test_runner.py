"""The episode runner: selection -> policy turns -> summary, batched per stage, with the evaluator's
feedback flowing into the next turn. Uses a scripted backend double (canned answers chosen from the prompt)
and the in-process Triton-interpreter evaluator double from conftest; then the real tiny model."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from davinci.agents.episode import Episode
from davinci.agents.runner import episode_metrics, run_episodes
from davinci.llm.types import GenOutput, Sampling
from davinci.skills import BM25Retriever
from davinci.tracking import MemoryLogger

SKILL_JSON = json.dumps({"title": "Flat masked elementwise kernel", "intent": "One pass over memory.", "applies_to": {"ops": ["relu"]},
                         "guidance": "1. Flatten.\n2. Mask the tail.", "backend": "triton"})


class ScriptedBackend:
    """Answers chosen from the prompt: which agent (system prompt), which problem, which turn."""

    def __init__(self, answers: dict[str, object]) -> None:
        self.answers = answers
        self.calls: list[tuple[int, Sampling]] = []

    def generate(self, prompts, sampling):
        self.calls.append((len(prompts), sampling))
        return [GenOutput(self._answer(p), (1, 2), (3, 4), (-0.1, -0.2), "stop") for p in prompts]

    def _answer(self, prompt) -> str:
        system, user = prompt[0]["content"], prompt[1]["content"]
        problem = "relu" if "torch.relu(x)" in user else "add"
        if system.startswith("You select"):
            answer = self.answers[f"select-{problem}"]
            if answer == "reverse":  # rank the candidates in reverse BM25 order
                valid = user.rsplit("Valid ids: ", 1)[1].split("\n", 1)[0].split(", ")
                return json.dumps({"order": valid[::-1]})
            return answer
        if system.startswith("You distill"):
            return self.answers[f"summary-{problem}"]
        turn = sum(m["role"] == "assistant" for m in prompt)
        script = self.answers[f"policy-{problem}"]
        return script[min(turn, len(script) - 1)] if isinstance(script, list) else script


@pytest.fixture
def scripted(problems):
    relu, add = problems
    wrong_add = add.reference_solution.replace("a + b, mask=mask", "a - b, mask=mask")  # runs, wrong numbers
    return ScriptedBackend({
        "select-relu": "reverse",
        "select-add": "I cannot decide.",
        "policy-relu": [f"```python\n{relu.reference_solution}```"],
        "policy-add": [f"```python\n{wrong_add}```",
                       f"Fixed:\n```python\n{add.reference_solution}```"],
        "summary-relu": f"Here is the skill:\n```json\n{SKILL_JSON}\n```",
        "summary-add": "{not json",
    })


def test_full_episode_flow(problems, library, profile, scripted, interpret_evaluate):
    logger = MemoryLogger()
    eps = run_episodes(problems, library, scripted, profile, epoch=3, group_size=2, greedy=False, evaluate_fn=interpret_evaluate, logger=logger)
    assert [e.episode_id for e in eps] == ["test/relu@e3s0", "test/relu@e3s1", "test/add@e3s0", "test/add@e3s1"]
    relu, add = eps[0], eps[2]
    # selection: BM25 candidates, reranked for relu; the unparsable answer for add falls back to BM25 order
    expected = [s.id for s, _ in BM25Retriever(library).search(problems[0].code, 3)]
    assert relu.bm25_ids == tuple(expected) and len(expected) == 3
    assert relu.selection.parse_ok and relu.selected_ids == (expected[2], expected[1])
    assert not add.selection.parse_ok and add.selected_ids == add.bm25_ids[:2] and len(add.bm25_ids) == 3
    # relu is solved at turn 0 and stops (stop_when=correct); add is wrong first, then fixed with the feedback
    assert len(relu.turns) == 1 and relu.turns[0].correct and relu.turns[0].result.feedback == "verdict: correct"
    assert [t.correct for t in add.turns] == [False, True]
    assert add.turns[0].result.error_kind == "mismatch"
    second_prompt = add.turns[1].generation.messages
    assert [m["role"] for m in second_prompt] == ["system", "user", "assistant", "user"]
    assert add.turns[0].result.feedback in second_prompt[3]["content"]
    assert add.turns[0].candidate.code.strip() in second_prompt[2]["content"]
    assert add.turns[1].candidate.provenance.turn == 1 and add.turns[1].candidate.backend == "triton"
    # one backend call per stage (selection, turn 0, turn 1, summary) and one evaluator call per turn
    assert [n for n, _ in scripted.calls] == [4, 4, 2, 2]
    assert interpret_evaluate.calls == [4, 2]
    assert len({s.seed for _, s in scripted.calls}) == 4 and not any(s.greedy for _, s in scripted.calls)
    # summaries: one per problem (its best solved episode); JSON parsed into a candidate skill or rejected
    assert relu.summary.parse_ok and relu.skill_candidate["status"] == "candidate"
    assert relu.skill_candidate["provenance"]["episode_id"] == relu.episode_id
    assert relu.skill_candidate["example"]["after"].strip() == problems[0].reference_solution.strip()
    assert eps[1].summary is None and add.summary is not None and not add.summary.parse_ok and add.skill_rejection
    # metrics: parse failures per agent, at step = epoch
    (step, metrics), = logger.metrics
    assert step == 3 and metrics["agents/selection/parse_failures"] == 2 and metrics["agents/summary/parse_failures"] == 1
    assert metrics["agents/solved_rate"] == 1.0 and metrics["agents/skill_candidates"] == 1 and metrics["agents/gen_seconds"] >= 0
    for e in eps:
        assert Episode.from_dict(json.loads(json.dumps(e.to_dict()))) == e


def test_unparsable_policy_output_is_counted_and_reported_back(problems, library, profile, scripted, interpret_evaluate):
    scripted.answers["policy-add"] = ["no idea", f"```python\n{problems[1].reference_solution}```"]
    eps = run_episodes(problems[1:], library, scripted, profile, epoch=0, group_size=1, greedy=True, evaluate_fn=interpret_evaluate)
    (ep,) = eps
    assert ep.turns[0].candidate is None and ep.turns[0].result is None and not ep.turns[0].generation.parse_ok
    assert "No ```python code block" in ep.turns[1].generation.messages[3]["content"]
    assert ep.turns[1].correct and interpret_evaluate.calls == [1]
    assert all(s.greedy and s.seed is None for _, s in scripted.calls)
    assert episode_metrics(eps)["agents/policy/parse_failures"] == 1


@pytest.mark.parametrize("stop_when,expected_turns", [("never", 3), ("correct", 1), ("fast", 2)])
def test_stop_rule(problems, library, profile, scripted, canned_evaluate, stop_when, expected_turns):
    code = "```python\nclass ModelNew:\n    pass  # {}\n```"
    scripted.answers["policy-relu"] = [code.format("CORRECT"), code.format("CORRECT-FAST"), code.format("wrong")]
    prof = replace(profile, agents=replace(profile.agents, turns=3, stop_when=stop_when, stop_speedup=1.5, summarize=False))
    (ep,) = run_episodes(problems[:1], library, scripted, prof, epoch=0, group_size=1, greedy=False, evaluate_fn=canned_evaluate)
    assert len(ep.turns) == expected_turns and ep.summary is None
    assert ep.best_turn().speedup == (2.0 if expected_turns > 1 else 0.5)


def test_no_library_means_no_selection(problems, profile, scripted, canned_evaluate):
    (ep,) = run_episodes(problems[:1], None, scripted, profile, epoch=0, group_size=1, greedy=False, evaluate_fn=canned_evaluate)
    assert ep.selection is None and ep.bm25_ids == () and ep.selected_ids == ()
    assert "Skills from the library" not in ep.turns[0].generation.messages[1]["content"]
    no_rerank = replace(profile, skills=replace(profile.skills, rerank=False))
    (ep,) = run_episodes(problems[:1], [], scripted, no_rerank, epoch=0, group_size=1, greedy=False, evaluate_fn=canned_evaluate)
    assert ep.selection is None


def test_with_the_real_tiny_model(problems, library, profile, interpret_evaluate):
    """A random-init tiny model end to end: it writes no code, every failure is counted, ids are consistent."""
    from davinci.agents.render import template_corpus
    from davinci.llm.backends.hf import HFBackend
    from davinci.llm.config import ModelConfig
    from davinci.llm.tiny import create_tiny_backbone

    corpus = [p.code for p in problems] + [p.reference_solution for p in problems] + template_corpus(2)
    bb = create_tiny_backbone(corpus, ModelConfig(tiny_hidden=64, tiny_layers=2, tiny_vocab=1024), seed=0, device="cpu")
    prof = replace(profile, agents=replace(profile.agents, max_new_tokens=24))
    eps = run_episodes(problems, library, HFBackend(bb), prof, epoch=0, group_size=2, greedy=False, evaluate_fn=interpret_evaluate)
    assert len(eps) == 4
    for ep in eps:
        assert len(ep.selected_ids) == 2 and set(ep.selected_ids) <= set(ep.bm25_ids)
        for gen in ep.generations():
            out = gen.output
            assert out.prompt_ids == tuple(bb.encode_chat(gen.messages, add_generation_prompt=True))
            assert len(out.logprobs) == len(out.response_ids) <= 24
        assert Episode.from_dict(json.loads(json.dumps(ep.to_dict()))) == ep
    again = run_episodes(problems, library, HFBackend(bb), prof, epoch=0, group_size=2, greedy=False, evaluate_fn=interpret_evaluate)
    assert [e.to_dict() for e in again] == [e.to_dict() for e in eps]  # seeded per (profile seed, epoch, stage)
    metrics = episode_metrics(eps)
    assert metrics["agents/policy/calls"] == sum(len(e.turns) for e in eps)
    assert metrics["agents/tokens_generated"] == sum(len(g.output.response_ids) for e in eps for g in e.generations())


def test_after_sft_the_tiny_model_solves_its_training_problems(problems, library, profile, interpret_evaluate):
    """SFT on these problems' examples (built by sft_examples_for, as data_prep does), then greedy episodes:
    the policy reproduces a correct kernel at turn 0 and the summary agent writes a parseable skill."""
    from davinci.agents.sft_data import sft_examples_for
    from davinci.llm.backends.hf import HFBackend
    from davinci.llm.config import ModelConfig, SFTConfig
    from davinci.llm.sft import train_sft
    from davinci.llm.tiny import create_tiny_backbone

    retriever = BM25Retriever(library)
    examples = []
    for p in problems:
        candidates = [s for s, _ in retriever.search(p.code, profile.skills.bm25_top_k)]
        examples += sft_examples_for(p, p.reference_solution, candidates[: profile.skills.select_k], candidates=candidates, agents=profile.agents)
    # The sft stage's tokenizer corpus: problem code, solutions, every SFT message (tasks/sft.py).
    corpus = [p.code for p in problems] + [p.reference_solution for p in problems] + [m["content"] for e in examples for m in e.messages]
    bb = create_tiny_backbone(corpus, ModelConfig(), seed=0, device="cpu")
    stats = train_sft(bb, examples, SFTConfig(), MemoryLogger(), progress=False)  # the tiny profile's SFT defaults
    assert stats.final_loss < 0.1
    prof = replace(profile, agents=replace(profile.agents, max_new_tokens=400, selection_max_new_tokens=96, summary_max_new_tokens=300))
    eps = run_episodes(problems, library, HFBackend(bb), prof, epoch=0, group_size=1, greedy=True, evaluate_fn=interpret_evaluate)
    assert all(e.turns[0].correct for e in eps)
    assert all(e.selection is not None and e.selection.parse_ok for e in eps)
    assert all(e.skill_candidate is not None for e in eps), [e.skill_rejection for e in eps]


def test_an_evaluator_that_loses_results_is_a_clear_error(problems, library, profile, scripted):
    from davinci.errors import DavinciError

    with pytest.raises(DavinciError, match="returned 0 results for 1 candidates"):
        run_episodes(problems[:1], library, scripted, profile, epoch=0, group_size=1, greedy=True, evaluate_fn=lambda items: [])


def test_with_the_real_evaluator(problems, library, profile, scripted):
    """The kernelgym contract itself: evaluate_batch on the CPU (Triton interpreter, fresh processes)."""
    from davinci.kernelgym import GymConfig, evaluate_batch

    gym = GymConfig(device="cpu", measure_performance=False, correctness_trials=1, baselines=())
    eps = run_episodes(problems[1:], library, scripted, profile, epoch=0, group_size=1, greedy=True,
                       evaluate_fn=lambda items: evaluate_batch(items, gym))
    (ep,) = eps
    first, second = ep.turns
    assert not first.correct and first.result.error_kind in ("mismatch", "runtime", "compile")
    assert first.result.feedback and first.result.feedback in second.generation.messages[3]["content"]
    assert second.correct and second.result.flags == ()
    assert Episode.from_dict(json.loads(json.dumps(ep.to_dict()))) == ep
