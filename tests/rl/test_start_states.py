"""RL start states (kept evolution revisions) in an RL epoch: the parent kernel and its feedback reach the policy's
first prompt, held-out problems never get one, the draw is seeded, a malformed file names its line, and the
fraction is range-checked.

The epoch test is the production path except the language model's text: a scripted backend (a double of a
text-only chat server, as in test_epoch_real.py) stands in for the policy and answers every policy prompt with
the problem's reference solution; kernelgym really evaluates every answer on CPU (Triton interpreter). The
start states are written by the real writer (`davinci.evolve.revisions.start_state`), and the held-out split is
the built-in suite's default held-out list (`data_prep.builtin.default_heldout_ids`, the data stage's eval split).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.builtin import builtin_problems, default_heldout_ids
from davinci.agents.starts import StartState, read_start_states
from davinci.config import load_profile, profile_from_dict
from davinci.errors import ConfigError, MalformedInput
from davinci.evolve.archive import ArchiveEntry
from davinci.evolve.revisions import Revision, start_state
from davinci.jsonl import write_jsonl
from davinci.llm.types import GenOutput
from davinci.rl.rollout import assign_start_states

BUILTIN = {p.id: p for p in builtin_problems()}
FEEDBACK = "correct; speedup 0.91x over eager (parent of a kept revision)"


def _state(pid: str) -> dict:
    """A kept revision's start state, written by the real writer: the parent runs with BLOCK_SIZE = 256."""
    code = BUILTIN[pid].reference_solution
    parent = ArchiveEntry("parent-" + pid, code.replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 256"), 0, correct=True,
                          speedup=0.91, ci_low=0.9, ci_high=0.92, feedback=FEEDBACK)
    child = ArchiveEntry("child-" + pid, code, 1, (parent.code_hash,), "mutation", True, 1.3, 1.2, 1.4)
    return start_state(Revision(BUILTIN[pid], parent, child))


class ScriptedServer:
    """Text-only answers: each policy prompt gets its problem's reference solution; every prompt is kept."""

    def __init__(self) -> None:
        self.prompts: list = []

    def generate(self, prompts, sampling):
        self.prompts.extend(prompts)
        outs = []
        for prompt in prompts:
            problem = next(p for p in BUILTIN.values() if p.code.strip() in prompt[1]["content"])
            outs.append(GenOutput(f"```python\n{problem.reference_solution}\n```", (), (), (), "stop"))
        return outs


def test_start_state_reaches_the_policy_prompt_and_never_a_heldout_problem(tmp_path: Path) -> None:
    from davinci.llm.tiny import create_tiny_backbone
    from davinci.rl.epoch import Collaborators, EpochInputs, run_rl_epoch
    from davinci.rl.records import read_rollouts
    from davinci.skills import SkillStore
    from davinci.tracking import MemoryLogger

    relu, gelu = BUILTIN["builtin/relu"], BUILTIN["builtin/gelu_tanh"]
    assert gelu.id in default_heldout_ids() and relu.id not in default_heldout_ids()
    write_jsonl(tmp_path / "start_states.jsonl", [_state(relu.id), _state(gelu.id)])
    # the eval split of the data stage: the suite's held-out problems
    write_jsonl(tmp_path / "eval.jsonl", [BUILTIN[i].to_dict() for i in default_heldout_ids()])
    profile = profile_from_dict({
        "model": {"tiny_hidden": 32, "tiny_layers": 1, "tiny_heads": 2, "tiny_vocab": 600, "max_seq_len": 4096},
        "agents": {"group_size": 2, "turns": 1, "summarize": False}, "skills": {"rerank": False},
        "gym": {"device": "cpu", "measure_performance": False, "workers": 1},
        "rl": {"problems_per_epoch": 0, "batch_size": 4, "start_state_fraction": 1.0},
    }, name="rl-start-states")  # fmt: skip
    bb = create_tiny_backbone([relu.code, gelu.code, relu.reference_solution] * 4, profile.model, seed=0)
    bb.save(tmp_path / "sft")
    SkillStore(tmp_path / "skills").commit([], parent=None, note="empty")
    server, logger = ScriptedServer(), MemoryLogger()
    # a held-out problem among the training problems (a broken split) still never starts from a state
    out = run_rl_epoch(
        EpochInputs(checkpoint_dir=str(tmp_path / "sft"), output_dir=str(tmp_path / "e0"), skill_store_root=str(tmp_path / "skills"),
                    library_version="latest", problems=(relu, gelu), profile=profile, epoch=0, device="cpu", logger=logger,
                    start_states=str(tmp_path / "start_states.jsonl"), heldout_problems=str(tmp_path / "eval.jsonl")),
        Collaborators(make_backend=lambda backbone, prof: server),
    )  # fmt: skip
    records = {r.episode.episode_id: r.episode for r in read_rollouts(out.rollouts_path)}
    assert {e.problem_id: e.start_state for e in records.values()} == {relu.id: "parent-" + relu.id, gelu.id: None}
    for prompt in server.prompts:
        text = "\n".join(m["content"] for m in prompt)
        if relu.code.strip() in prompt[1]["content"]:  # the parent kernel as the earlier attempt, then its feedback
            assert [m["role"] for m in prompt] == ["system", "user", "assistant", "user"]
            assert "BLOCK_SIZE = 256" in prompt[2]["content"] and FEEDBACK in prompt[3]["content"]
        else:
            assert len(prompt) == 2 and "BLOCK_SIZE = 256" not in text and FEEDBACK not in text
    assert all(t.correct for e in records.values() for t in e.turns)  # real evaluations of real kernels
    assert (out.metrics["start_state_rollouts"], out.metrics["start_state_groups"]) == (2.0, 1.0)
    assert (out.metrics["start_states_available"], out.metrics["start_states_heldout"]) == (1.0, 1.0)
    assert logger.series("rollout/start_state_rollouts")


def test_assignment_is_seeded_and_follows_the_fraction() -> None:
    problems = [BUILTIN[i] for i in sorted(BUILTIN) if i not in default_heldout_ids()]
    states = [StartState.from_dict({**_state("builtin/relu"), "problem_id": p.id}) for p in problems]
    draw = lambda frac, epoch: assign_start_states(problems, states, frac, seed=3, epoch=epoch).starts  # noqa: E731
    assert draw(0.5, 1) == draw(0.5, 1)  # a retried epoch assigns the same
    assert draw(0.0, 0) == {} and len(draw(1.0, 0)) == len(problems)
    assert 0 < len(draw(0.5, 0)) < len(problems) and draw(0.5, 0) != draw(0.5, 1)
    # a problem's draw does not depend on the other problems of the epoch
    assert {k: v for k, v in draw(0.5, 0).items() if k == "builtin/relu"} == \
        assign_start_states([BUILTIN["builtin/relu"]], states, 0.5, seed=3, epoch=0).starts


def test_malformed_start_states_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "start_states.jsonl"
    good = json.dumps(_state("builtin/relu"))
    path.write_text(good + "\n\n" + json.dumps({**_state("builtin/relu"), "code": None}) + "\n")
    with pytest.raises(MalformedInput, match=r"start_states\.jsonl:3 is not a start state: field 'code'") as err:
        read_start_states(path)
    assert "line 3" in err.value.hint
    path.write_text(good + "\n{not json\n")
    with pytest.raises(MalformedInput, match=r"start_states\.jsonl:2 is not JSON"):
        read_start_states(path)
    path.write_text(good + "\n")
    assert read_start_states(path)[0].code.count("BLOCK_SIZE = 256") == 1


def test_start_state_fraction_out_of_range_lists_the_range() -> None:
    with pytest.raises(ConfigError, match=r"rl.start_state_fraction = 1.5 is out of range: it must be in \[0, 1\]"):
        load_profile("tiny", ["rl.start_state_fraction=1.5"])
    assert load_profile("tiny").rl.start_state_fraction == 0.25


def test_rl_stage_passes_start_states_only_when_the_data_stage_wrote_them(tmp_path: Path) -> None:
    from artifacts.refs import StageOutputs
    from flows.stages.rl import _start_state_paths

    files = {"train": "problems/train.jsonl", "eval": "problems/eval.jsonl"}
    assert _start_state_paths(StageOutputs("data", str(tmp_path), files, {})) == {}
    with_states = StageOutputs("data", str(tmp_path), {**files, "start_states": "evolution/start_states.jsonl"}, {})
    assert _start_state_paths(with_states) == {"start_states_path": str(tmp_path / "evolution/start_states.jsonl"),
                                               "heldout_path": str(tmp_path / "problems/eval.jsonl")}
