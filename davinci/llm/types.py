"""Shared data types of the learning core: roles, chat messages, SFT examples, sampling, generation output.

These are the exact types of docs/ARCHITECTURE.md ("Shared data types of the learning core"): the agents
package renders `Message` lists, every generation backend returns `GenOutput`, the rl package trains on
`GenOutput.response_ids` and compares `GenOutput.logprobs` with its own forward pass. All are plain data
(frozen dataclasses of tuples, strings and numbers) so they cross process boundaries and JSONL files.

Conventions every backend follows:
- `prompt_ids` are the chat-template tokens of the prompt ending in the assistant header
  (`Backbone.encode_chat(messages, add_generation_prompt=True)`); `response_ids` are the sampled tokens,
  including the end-of-turn token when generation stopped on it (so training teaches the model to stop).
- `logprobs[i]` is log p(response_ids[i] | prefix) under the *raw* model distribution (temperature 1,
  no top-p), i.e. what a forward pass of the same weights gives; `len(logprobs) == len(response_ids)`.
- A backend that cannot return ids or logprobs returns empty tuples; `davinci.llm.backends.ensure_ids`
  re-encodes the ids from the text (logprobs stay empty; the trainer computes its own).
- `finish_reason` is "stop" (end-of-turn token or a stop string) or "length" (max_new_tokens reached).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence, TypedDict

AgentRole = Literal["selection", "policy", "summary"]
AGENT_ROLES: tuple[AgentRole, ...] = ("selection", "policy", "summary")


class Message(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class ChatExample:
    """One SFT example; the loss covers only the assistant messages."""

    agent: AgentRole
    messages: tuple[Message, ...]
    problem_id: str = ""


@dataclass(frozen=True)
class Sampling:
    """How to decode. `greedy` ignores temperature/top_p; `seed` makes sampling reproducible."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False
    seed: int | None = None


@dataclass(frozen=True)
class GenOutput:
    """One generated answer. ids/logprobs are empty when a backend cannot return them (then re-encoded)."""

    text: str
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str


class GenerationBackend(Protocol):
    def generate(self, prompts: Sequence[Sequence[Message]], sampling: Sampling) -> list[GenOutput]: ...


__all__ = ["AgentRole", "AGENT_ROLES", "Message", "ChatExample", "Sampling", "GenOutput", "GenerationBackend"]
