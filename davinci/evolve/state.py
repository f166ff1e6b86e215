"""The on-disk state of one problem's evolution, so an interrupted run resumes without re-evaluating anything.

Three append-only JSONL files (through `davinci.jsonl`), one reader/writer each here:
    proposals.jsonl     every child proposed, written before its generation is evaluated:
                        {generation, index, kind, parents, code_hash, code}
    evaluations.jsonl   content-addressed verdicts: {code_hash, correct, speedup, ci_low, ci_high, feedback,
                        error_kind, flags}; a code hash found here is never evaluated again
    generations.jsonl   one row per finished generation: {generation, archive, evaluated, elapsed_s}
A generation whose row is missing is redone from its stored proposals (the mutator is not asked again).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from davinci.jsonl import append_jsonl, read_jsonl

PROPOSALS = "proposals.jsonl"
EVALUATIONS = "evaluations.jsonl"
GENERATIONS = "generations.jsonl"


def code_hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Proposal:
    generation: int
    index: int
    kind: str
    parents: tuple[str, ...]
    code: str

    @property
    def code_hash(self) -> str:
        return code_hash(self.code)

    def to_dict(self) -> dict[str, Any]:
        return {"generation": self.generation, "index": self.index, "kind": self.kind, "parents": list(self.parents),
                "code_hash": self.code_hash, "code": self.code}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Proposal":
        return cls(int(d["generation"]), int(d["index"]), str(d["kind"]), tuple(d.get("parents", ())), str(d["code"]))


@dataclass(frozen=True)
class Verdict:
    code_hash: str
    correct: bool
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    feedback: str = ""
    error_kind: str = ""
    flags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "flags": list(self.flags)}

    @classmethod
    def from_result(cls, digest: str, result: Any) -> "Verdict":
        """From a kernelgym `EvalResult`: correct means correct and unflagged; the CI is vs eager."""
        ci = result.speedup_ci or (None, None)
        flags = tuple(result.flags or ())
        return cls(digest, bool(result.correct) and not flags, result.speedup, ci[0], ci[1],
                   str(result.feedback or "")[:4000], str(result.error_kind or ""), flags)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Verdict":
        return cls(**{**d, "flags": tuple(d.get("flags", ()))})


@dataclass
class EvolveState:
    """What a folder holds: proposals by generation, verdicts by code hash, finished generation rows."""

    folder: Path
    proposals: dict[int, list[Proposal]] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    finished: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, folder: str | Path) -> "EvolveState":
        folder = Path(folder)
        state = cls(folder)
        for row in read_jsonl(folder / PROPOSALS):
            p = Proposal.from_dict(row)
            state.proposals.setdefault(p.generation, []).append(p)
        state.verdicts = {v.code_hash: v for v in map(Verdict.from_dict, read_jsonl(folder / EVALUATIONS))}
        state.finished = read_jsonl(folder / GENERATIONS)
        return state

    @property
    def done(self) -> set[int]:
        return {int(r["generation"]) for r in self.finished}

    @property
    def elapsed_s(self) -> float:
        return sum(float(r.get("elapsed_s", 0.0)) for r in self.finished)

    def add_proposals(self, generation: int, proposals: list[Proposal]) -> None:
        self.proposals[generation] = proposals
        append_jsonl(self.folder / PROPOSALS, [p.to_dict() for p in proposals])

    def add_verdicts(self, verdicts: list[Verdict]) -> None:
        for v in verdicts:
            self.verdicts[v.code_hash] = v
        append_jsonl(self.folder / EVALUATIONS, [v.to_dict() for v in verdicts])

    def finish(self, row: dict[str, Any]) -> None:
        self.finished.append(row)
        append_jsonl(self.folder / GENERATIONS, [row])
