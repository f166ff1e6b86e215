"""Episodes -> training samples (ids, groups, per-agent advantages) and the summary agent's delayed credit."""

from __future__ import annotations

import dataclasses
import doctest

import pytest

import davinci.rl.credit as credit_mod
from davinci.llm.config import ModelConfig
from davinci.llm.tiny import create_tiny_backbone
from davinci.llm.types import GenOutput
from davinci.config import Profile
from davinci.rl.config import RLConfig
from davinci.rl.rewards import minimal_result
from davinci.rl.credit import admission_row, delayed_summary_rewards, read_admissions, write_admissions
from davinci.rl.samples import PendingSummary, build_samples, generation_ids, summary_samples, to_pending

FAIL = minimal_result(False, None)


def ok(speedup: float):
    return minimal_result(True, speedup)


def prof(**rl):
    """The default profile with these rl values (build_samples reads rl and the turn horizon)."""
    return Profile(rl=RLConfig(**rl))


@pytest.fixture(scope="module")
def backbone():
    corpus = ["def forward(self, x): return torch.relu(x)", "import triton\n@triton.jit\ndef k(x_ptr): pass"] * 20
    return create_tiny_backbone(corpus, ModelConfig(tiny_hidden=32, tiny_layers=1, tiny_heads=2, tiny_vocab=300), seed=0)


def test_build_samples_groups_and_advantages_by_hand(episode_factory, backbone):
    # Dr. Kernel scores (gamma 1): ep A turns [fail, 1.0x] -> s = [0, 1.0], R = [1.0, 1.0], best 1.0
    #                              ep B turns [2.0x, 3.0x] -> s = [1.5, 2.0], R = [3.5, 2.0], best 2.0
    # TRLOO per (problem, turn): turn0 [1.0, 3.5] -> [-2.5, 2.5]; turn1 [1.0, 2.0] -> [-1, 1]
    # selection per problem: [1.0, 2.0] -> [-1, 1]; one stored summary (reward 2.0) alone -> A = 2.0
    a = episode_factory("A", "p", [FAIL, ok(1.0)])
    b = episode_factory("B", "p", [ok(2.0), ok(3.0)])
    pend = PendingSummary("old", "q", 0, "s9", (5, 6, 20, 21), 2, (-0.3, -0.2))
    samples, rewards, _ = build_samples([a, b], prof(), backbone, [pend], [2.0])
    adv = {s.key: s.advantage for s in samples}
    assert adv == pytest.approx(
        {"A/policy/0": -2.5, "A/policy/1": -1.0, "A/selection/0": -1.0, "B/policy/0": 2.5, "B/policy/1": 1.0, "B/selection/0": 1.0, "old/summary/0": 2.0}
    )
    assert rewards[1].turn_returns == pytest.approx((3.5, 2.0))
    s = next(s for s in samples if s.key == "A/policy/1")
    # input = prompt ids + response ids; only the response (from prompt_len on) is ever trained
    assert s.input_ids == (5, 6, 8, 12, 12, 2) and s.prompt_len == 3 and s.response_len == 3
    assert s.old_logprobs == ()  # recompute (default): the trainer scores them with its own forward pass
    summ = next(s for s in samples if s.agent == "summary")
    assert summ.old_logprobs == (-0.3, -0.2) and summ.prompt_len == 2  # stored at generation time, epoch 0


def test_backend_logprobs_kept_when_asked(episode_factory, backbone):
    samples, _, _ = build_samples([episode_factory("A", "p", [ok(1.0)])], prof(behaviour_logprobs="backend"), backbone)
    assert samples[0].old_logprobs == (-1.0, -0.5, -0.1)


def test_missing_ids_are_re_encoded(backbone):
    # a backend that returns no ids (an HTTP server without the ids extension): prompt through the chat
    # template with the generation header, response through the tokenizer, + end-of-turn when it stopped
    msgs = ({"role": "user", "content": "def forward(self, x):"},)
    gen = type("G", (), {"messages": msgs, "output": GenOutput("return torch.relu(x)", (), (), (), "stop")})()
    prompt, response, lp = generation_ids(gen, backbone)
    assert prompt == backbone.encode_chat(list(msgs), add_generation_prompt=True)
    assert response[-1] == backbone.eos_token_id and backbone.decode(response) == "return torch.relu(x)"
    assert lp == ()
    cut = type("G", (), {"messages": msgs, "output": GenOutput("return", (), (), (), "length")})()
    assert backbone.eos_token_id not in generation_ids(cut, backbone)[1]  # cut at max tokens: no stop token


def test_summaries_are_stored_for_next_epoch(episode_factory, backbone):
    eps = [episode_factory("A", "p", [ok(1.0)], summary_text="s", skill_id="sk-a"), episode_factory("B", "p", [FAIL])]
    summ = summary_samples(eps, backbone, RLConfig())
    assert [s.key for s in summ] == ["A/summary/0"]
    scored = [dataclasses.replace(summ[0], old_logprobs=(-1.0, -2.0, -3.0))]
    (p,) = to_pending(eps, scored)
    assert (p.episode_id, p.skill_id, p.old_logprobs, p.input_ids[p.prompt_len :]) == ("A", "sk-a", (-1.0, -2.0, -3.0), (11, 12, 2))
    assert PendingSummary.from_dict(p.to_dict()) == p


def test_credit_doctests():
    assert doctest.testmod(credit_mod).failed == 0


def test_delayed_summary_reward_by_hand(episode_factory, tmp_path):
    # 4 episodes of problem p this epoch; skill "new-a" (from episode A, admitted) selected in episode 0,
    # which solved p; of the 3 that did not select it, 1 solved: effect 1 - 1/3 -> reward 1 + 2/3.
    # B's skill was rejected -> 0; C's was merged into a better skill -> 0; D's JSON was rejected -> 0
    pend = [PendingSummary(e, "p", 0, sid, (1, 2), 1, (-1.0,)) for e, sid in [("A", "a"), ("B", "b"), ("C", "c"), ("D", "")]]
    decisions = [
        {"skill_id": "new-a", "outcome": "admitted", "skill": {"provenance": {"episode_id": "A"}}},
        {"skill_id": "b", "outcome": "rejected"},
        {"skill_id": "c", "outcome": "merged"},
    ]
    path = write_admissions(tmp_path / "admissions.jsonl", decisions)
    rows = read_admissions(path)
    assert rows[0] == {"skill_id": "new-a", "outcome": "admitted", "episode_id": "A"}
    eps = [episode_factory(str(i), "p", [ok(1.0) if i in (0, 3) else FAIL], selected=("new-a",) if i == 0 else ("x",)) for i in range(4)]
    assert delayed_summary_rewards(pend, rows, eps, RLConfig()) == pytest.approx([1 + 2 / 3, 0.0, 0.0, 0.0])
    # selected often but no better than going without: no credit for use (admission only)
    same = [episode_factory(str(i), "p", [ok(1.0)], selected=("new-a",) if i < 3 else ()) for i in range(4)]
    assert delayed_summary_rewards(pend[:1], rows, same, RLConfig()) == pytest.approx([1.0])


def test_admission_row_reads_real_decisions():
    from davinci.skills import AdmissionDecision, SkillProvenance
    from davinci.skills.schema import EvidenceRecord
    from davinci.skills.seed import SEED_DIR, load_seed_skill

    base = load_seed_skill(SEED_DIR / "triton-bias-gelu-residual")
    skill = dataclasses.replace(base, provenance=SkillProvenance(kind="summary", episode_id="ep7", epoch=0))
    decision = AdmissionDecision(skill.id, "admitted", skill, (), EvidenceRecord(kind="admission", decision="admitted"))
    assert admission_row(decision) == {"skill_id": skill.id, "outcome": "admitted", "episode_id": "ep7"}


def test_too_long_generations_are_dropped_and_counted(episode_factory, backbone):
    # every generation here is 3 prompt + 3 response tokens = 6; a limit of 5 drops them all
    samples, _, counts = build_samples([episode_factory("A", "p", [ok(1.0)])], prof(max_train_tokens=5), backbone)
    assert samples == [] and counts["samples_too_long_dropped"] == 2.0  # the policy turn and the selection
    samples, _, counts = build_samples([episode_factory("A", "p", [ok(1.0)])], prof(max_train_tokens=6), backbone)
    assert len(samples) == 2 and counts["samples_too_long_dropped"] == 0.0
