"""Configuration of the three agents and the episode runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class AgentsConfig:
    # Policy turns per episode (T) and rollouts per problem (G, the group for advantages).
    turns: int = 2
    group_size: int = 2
    max_new_tokens: int = 768
    temperature: float = 1.0
    top_p: float = 1.0
    # Summarize successful episodes into candidate skills.
    summarize: bool = True
    # Kernel language the policy is asked to write (prompts say "custom Triton/CUDA kernels").
    backend: Literal["triton", "cuda"] = "triton"
    # When an episode stops before T turns: never; correct (first correct turn); fast (a correct turn
    # with speedup vs eager >= stop_speedup; CPU timings rarely get there, so the tiny profile uses correct).
    stop_when: Literal["never", "correct", "fast"] = "correct"
    stop_speedup: float = 1.0
    # Earlier attempts (code + feedback) shown in a later turn's prompt (the most recent ones).
    history_window: int = 1
    # Characters of each skill's text (intent + guidance) shown to the policy (0 = all). Small for the
    # tiny model, whose prompts must stay short (SFT cost is mostly prompt tokens); 0 for real models.
    skill_chars: int = 200
    # Characters of each candidate's guidance in the selection (rerank) prompt (the skills package's
    # default is 400) and of the problem code there.
    rerank_guidance_chars: int = 100
    rerank_code_chars: int = 6000
    # Token budgets of the selection (a short JSON list) and summary (a skill JSON) answers.
    selection_max_new_tokens: int = 96
    summary_max_new_tokens: int = 512
    # Candidate skills summarized per problem per epoch, from its best successful episodes (0 = all).
    summaries_per_problem: int = 1
    # Evaluate each generation batch's kernels while the next batch generates (davinci.agents.runner):
    # on; off; auto = on when kernelgym runs on a Dask cluster (gym.cluster != local), whose GPUs are not
    # the generator's (lanes on the generating GPU would time kernels beside generation).
    overlap_eval: Literal["auto", "on", "off"] = "auto"
