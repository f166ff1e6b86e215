"""agents: the three roles on one backbone (selection, policy, summary) and the multi-turn episode runner.

Modules:
  config     AgentsConfig (turns, group size, stop rule, token budgets, skill text budget)
  prompts/   the prompt templates (`string.Template` text files)
  render     prompt rendering: `policy_messages`, `selection_messages`, `summary_messages`, `Attempt`
  parsers    `extract_code` -> `CodeParse` (never raises), `detect_backend_hint`
  episode    `Generation`, `Turn`, `Episode` (JSONL round trip)
  runner     `run_episodes` (selection -> policy turns -> summary, batched), `episode_metrics`
  starts     `StartState`, `read_start_states`: RL start states (a kept revision's parent as turn 0's history)
  materialise  `materialise`: the policy applies one skill under the admission gate (CLI `skills materialise`)
  sft_data   `sft_examples_for`: one problem + its solution -> role-tagged SFT examples

    from davinci.agents import run_episodes, policy_messages, extract_code
"""

from davinci.agents.config import AgentsConfig
from davinci.agents.episode import Episode, Generation, Turn
from davinci.agents.parsers import CodeParse, detect_backend_hint, extract_code
from davinci.agents.render import (
    Attempt,
    policy_messages,
    selection_messages,
    summary_messages,
    template_corpus,
)
from davinci.agents.runner import episode_metrics, library_skills, run_episodes
from davinci.agents.sft_data import reference_skill, sft_examples_for

__all__ = [
    "AgentsConfig",
    "Attempt",
    "CodeParse",
    "Episode",
    "Generation",
    "Turn",
    "detect_backend_hint",
    "episode_metrics",
    "extract_code",
    "library_skills",
    "policy_messages",
    "reference_skill",
    "run_episodes",
    "selection_messages",
    "sft_examples_for",
    "summary_messages",
    "template_corpus",
]
