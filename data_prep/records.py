"""Drop records: every problem or example the data stage removes comes back as one of these, with its reason.

One type for all stages (synthesis validation, KernelBench loading, decontamination, diversity filter, SFT
trajectories), so the stage can write a single report table: stage, item, reason code, a sentence, the
matched item and the score that decided.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

DropStage = Literal["synthesis", "decontamination", "diversity", "sft"]
DropReason = Literal[
    "non-finite",  # synthesis: the reference produced NaN/inf
    "trivial-output",  # synthesis: zeros, a constant or another draw's output passes
    "run-error",  # synthesis: the reference raised
    "exact-copy",  # decontamination / diversity: same canonical token stream
    "operator-signature",  # decontamination: the forward's operator sequence matches an eval problem
    "text-overlap",  # decontamination: token-shingle Jaccard/containment with an eval problem
    "near-duplicate",  # diversity: token-shingle Jaccard with a kept problem
    "cluster-cap",  # diversity: the operator family already holds cluster_cap problems
    "bad-trajectory",  # sft: a JSONL trajectory line that is invalid or trains on an eval problem
]


@dataclass(frozen=True)
class DropRecord:
    stage: DropStage
    problem_id: str
    reason: DropReason
    detail: str
    matched_id: str = ""
    score: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["score"] = round(float(self.score), 6)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DropRecord":
        return cls(**d)


__all__ = ["DropRecord", "DropStage", "DropReason"]
