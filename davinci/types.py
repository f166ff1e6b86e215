"""Core value types shared by every part of the engine: a problem and a candidate solution.

Both are frozen dataclasses of plain data (strings and ints) so they cross process boundaries, Prefect
task boundaries and JSONL files unchanged. Other core types live with the code that owns them:
`kernelgym.result.EvalResult`, `skills.schema.Skill`, `agents.episode.Episode`.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Backend = Literal["triton", "cuda"]
ProblemSource = Literal["builtin", "kernelbench", "synthetic"]


@dataclass(frozen=True)
class Problem:
    """A PyTorch program in KernelBench format: `Model`, `get_inputs()`, `get_init_inputs()`.

    `id` is stable and unique across sources, e.g. `builtin/relu_bias`, `kernelbench/L1/19_ReLU`.
    `code` is the full reference source. `reference_solution` is an optional known-correct `ModelNew`
    source (the built-in suite ships one per problem; it seeds SFT data and tests the evaluator).
    """

    id: str
    source: ProblemSource
    level: int
    name: str
    code: str
    reference_solution: str | None = None
    tags: tuple[str, ...] = ()

    @property
    def code_hash(self) -> str:
        return hashlib.sha256(self.code.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tags"] = list(self.tags)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Problem":
        return cls(**{**d, "tags": tuple(d.get("tags", ()))})


@dataclass(frozen=True)
class Provenance:
    """Where a candidate came from: which episode and turn of which epoch (empty for hand-written code)."""

    episode_id: str = ""
    epoch: int = -1
    turn: int = -1
    agent: str = ""


@dataclass(frozen=True)
class Candidate:
    """A candidate solution: source defining `ModelNew`, for one problem, in one backend."""

    problem_id: str
    code: str
    backend: Backend
    provenance: Provenance = field(default_factory=Provenance)

    @property
    def code_hash(self) -> str:
        return hashlib.sha256(self.code.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Candidate":
        prov = d.get("provenance") or {}
        return cls(problem_id=d["problem_id"], code=d["code"], backend=d["backend"], provenance=Provenance(**prov))
