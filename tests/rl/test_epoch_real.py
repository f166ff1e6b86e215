"""One RL epoch through the real agents runner and the real kernelgym evaluator (CPU, Triton interpreter).

Everything is the production path except the language model's text: a scripted backend (a double of an
OpenAI-compatible server that returns text only, no ids or logprobs) answers the policy prompts with the
problem's reference Triton solution for even-numbered prompts and a wrong kernel for odd ones, and
answers everything else with prose. So the evaluator really compiles and checks kernels, the rewards come
from real `EvalResult`s, the ids are re-encoded from text, and the group has distinct rewards.
"""

from __future__ import annotations

import pytest

from davinci.config import profile_from_dict
from davinci.llm.tiny import create_tiny_backbone
from davinci.llm.types import GenOutput
from davinci.rl.epoch import Collaborators, EpochInputs, run_rl_epoch
from davinci.rl.records import read_rollouts
from davinci.tracking import MemoryLogger

WRONG = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 0.5
'''


class ScriptedServer:
    """Text-only answers (like a chat-completions server without the ids extension)."""

    def __init__(self, solution: str) -> None:
        self.solution = solution

    def generate(self, prompts, sampling):
        # only policy prompts reach it here (rerank and summaries are off in this profile)
        codes = [self.solution if i % 2 == 0 else WRONG for i in range(len(prompts))]
        return [GenOutput(f"Here is the kernel.\n```python\n{c}\n```", (), (), (), "stop") for c in codes]


@pytest.mark.slow
def test_real_runner_and_evaluator_epoch(tmp_path):
    from data_prep import builtin_problems
    from davinci.skills import SkillStore
    from davinci.skills.seed import SEED_DIR, load_seed_skill

    relu = next(p for p in builtin_problems() if p.id == "builtin/relu")
    profile = profile_from_dict(
        {
            "model": {"tiny_hidden": 32, "tiny_layers": 1, "tiny_heads": 2, "tiny_vocab": 600, "max_seq_len": 4096},
            "agents": {"group_size": 2, "turns": 1, "summarize": False},
            "skills": {"rerank": False},
            "gym": {"device": "cpu", "measure_performance": False, "workers": 1},
            "rl": {"problems_per_epoch": 1, "batch_size": 4},
        },
        name="rl-real",
    )
    bb = create_tiny_backbone([relu.code, relu.reference_solution, WRONG] * 5, profile.model, seed=0)
    bb.save(tmp_path / "sft")
    store = SkillStore(tmp_path / "skills")
    lib = store.commit([load_seed_skill(SEED_DIR / "triton-bias-gelu-residual")], parent=None, note="seed")
    logger = MemoryLogger()
    out = run_rl_epoch(
        EpochInputs(
            checkpoint_dir=str(tmp_path / "sft"), output_dir=str(tmp_path / "e0"), skill_store_root=str(tmp_path / "skills"),
            library_version=lib.version, problems=(relu,), profile=profile, epoch=0, device="cpu", logger=logger,
        ),  # fmt: skip
        Collaborators(make_backend=lambda backbone, prof: ScriptedServer(relu.reference_solution)),
    )
    records = read_rollouts(out.rollouts_path)
    results = [r.episode.turns[0].result for r in records]
    assert [bool(r and r.correct) for r in results] == [True, False], [r and r.error for r in results]
    # Dr. Kernel reward without timings: 0.5 for the correct kernel, 0 for the wrong one; TRLOO +-0.5
    assert [list(r.rewards.turn_scores) for r in records] == [[0.5], [0.0]]
    assert [r.advantages["policy/0"] for r in records] == pytest.approx([0.5, -0.5])
    assert out.timing.evaluation_s > 0 and out.timing.evaluations == 2 and out.metrics["correct_rate"] == 0.5
    assert out.global_step == 1 and logger.series("rl/loss")
