"""Episodes: what one rollout of the three agents on one problem produced (exact types of the contract).

An `Episode` holds every call of the backbone (`Generation`: the agent, its prompt messages, the backend's
`GenOutput`, whether its output parsed) and, per policy turn, the candidate and the evaluator's typed
verdict (`EvalResult`; serialized with `to_dict`). That is everything the trainer needs: rewards come from the verdicts, and the
trainable tokens of each generation are exactly `output.response_ids` (the prompt, with the problem,
retrieved skill text, earlier attempts and evaluator feedback, is context only).

"Best turn" has one rule, `best_turn(turns)`: the fastest correct turn (earliest on ties), else the last
evaluated turn, else None. Summaries, the eval stage's per-problem record and skill usage all use it.

Episodes of one (problem_id, epoch) form a group (advantages are computed within it). `to_dict` gives
JSON-safe plain data (tuples become lists); `Episode.from_dict(json.loads(json.dumps(e.to_dict()))) == e`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from davinci.kernelgym.result import EvalResult
from davinci.llm.types import AgentRole, GenOutput, Message
from davinci.types import Candidate

def genoutput_to_dict(out: GenOutput) -> dict[str, Any]:
    return {
        "text": out.text,
        "prompt_ids": list(out.prompt_ids),
        "response_ids": list(out.response_ids),
        "logprobs": list(out.logprobs),
        "finish_reason": out.finish_reason,
    }


def genoutput_from_dict(d: Mapping[str, Any]) -> GenOutput:
    return GenOutput(
        text=d["text"],
        prompt_ids=tuple(int(i) for i in d.get("prompt_ids", ())),
        response_ids=tuple(int(i) for i in d.get("response_ids", ())),
        logprobs=tuple(float(x) for x in d.get("logprobs", ())),
        finish_reason=d.get("finish_reason", ""),
    )


@dataclass(frozen=True)
class Generation:
    """One call of the backbone by one agent."""

    agent: AgentRole
    messages: tuple[Message, ...]
    output: GenOutput
    parse_ok: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "messages": [{"role": m["role"], "content": m["content"]} for m in self.messages],
            "output": genoutput_to_dict(self.output),
            "parse_ok": self.parse_ok,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Generation":
        messages = tuple({"role": m["role"], "content": m["content"]} for m in d["messages"])
        return cls(d["agent"], messages, genoutput_from_dict(d["output"]), bool(d["parse_ok"]))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Turn:
    """One policy turn: its generation, the parsed candidate (None: no code) and the evaluator's verdict."""

    index: int
    generation: Generation
    candidate: Candidate | None
    result: EvalResult | None  # None when there was nothing to evaluate

    @property
    def correct(self) -> bool:
        return self.result is not None and self.result.correct

    @property
    def speedup(self) -> float | None:
        return self.result.speedup if self.result is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "generation": self.generation.to_dict(),
            "candidate": self.candidate.to_dict() if self.candidate else None,
            "result": self.result.to_dict() if self.result is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Turn":
        cand = Candidate.from_dict(d["candidate"]) if d.get("candidate") else None
        result = EvalResult.from_dict(d["result"]) if d.get("result") else None
        return cls(int(d["index"]), Generation.from_dict(d["generation"]), cand, result)


def best_turn(turns: Sequence[Turn]) -> Turn | None:
    """The fastest correct turn (earliest on ties), else the last evaluated turn, else None."""
    correct = [t for t in turns if t.correct]
    if correct:
        return max(correct, key=lambda t: (t.speedup if t.speedup is not None else 0.0, -t.index))
    evaluated = [t for t in turns if t.result is not None]
    return evaluated[-1] if evaluated else None


@dataclass(frozen=True)
class Episode:
    """Selection -> policy turns -> summary for one problem, one sample of its group."""

    episode_id: str
    problem_id: str
    epoch: int
    sample_index: int  # group = (problem_id, epoch)
    selection: Generation | None
    bm25_ids: tuple[str, ...]
    selected_ids: tuple[str, ...]
    turns: tuple[Turn, ...]
    summary: Generation | None
    skill_candidate: dict | None  # Skill.to_dict() of the summary's candidate skill
    skill_rejection: str | None  # why the summary did not give a skill
    start_state: str | None = None  # parent_hash of the RL start state it began from (`starts.py`); None = from scratch
    start_speedup: float | None = None  # that parent's measured speedup: a revision's turns are scored against it

    @property
    def solved(self) -> bool:
        return any(t.correct for t in self.turns)

    def best_turn(self, max_turns: int | None = None) -> Turn | None:
        """`best_turn` of the first `max_turns` turns (all when None)."""
        return best_turn(self.turns if max_turns is None else [t for t in self.turns if t.index < max_turns])

    def generations(self) -> list[Generation]:
        """Every backbone call of the episode in order: selection, turns, summary."""
        gens = [self.selection] if self.selection else []
        gens += [t.generation for t in self.turns]
        return gens + ([self.summary] if self.summary else [])

    def to_dict(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "problem_id": self.problem_id,
            "epoch": self.epoch,
            "sample_index": self.sample_index,
            "selection": self.selection.to_dict() if self.selection else None,
            "bm25_ids": list(self.bm25_ids),
            "selected_ids": list(self.selected_ids),
            "turns": [t.to_dict() for t in self.turns],
            "summary": self.summary.to_dict() if self.summary else None,
            "skill_candidate": self.skill_candidate,
            "skill_rejection": self.skill_rejection,
            "start_state": self.start_state,
            "start_speedup": self.start_speedup,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Episode":
        return cls(
            episode_id=d["episode_id"],
            problem_id=d["problem_id"],
            epoch=int(d["epoch"]),
            sample_index=int(d["sample_index"]),
            selection=Generation.from_dict(d["selection"]) if d.get("selection") else None,
            bm25_ids=tuple(d.get("bm25_ids", ())),
            selected_ids=tuple(d.get("selected_ids", ())),
            turns=tuple(Turn.from_dict(t) for t in d.get("turns", ())),
            summary=Generation.from_dict(d["summary"]) if d.get("summary") else None,
            skill_candidate=d.get("skill_candidate"),
            skill_rejection=d.get("skill_rejection"),
            start_state=d.get("start_state"),
            start_speedup=d.get("start_speedup"),
        )
