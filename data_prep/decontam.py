"""Decontamination: drop training problems that are (near) copies of an eval problem.

Choices:
- Every training problem is compared with every eval problem (exact scores, see `similarity`): an exact
  canonical-token match (catches exact, renamed and resized copies), token-shingle Jaccard and
  containment, and the similarity of the forward's operator signature (catches the same task written
  differently, e.g. our `relu` against KernelBench's `19_ReLU`).
- A training problem is dropped when its best score against any eval problem reaches `threshold`
  (score = max(text, signature)); the record names the eval problem, the reason that decided
  (`exact-copy`, `operator-signature` or `text-overlap`) and the numbers behind it.
- Decontamination is deliberately aggressive for single-operator problems: training on ReLU while
  evaluating on ReLU is contamination even when sizes and names differ.

    kept, dropped = decontaminate(train, eval_problems, threshold=0.7)
"""

from __future__ import annotations

from typing import Sequence

from tqdm import tqdm

from data_prep.records import DropRecord
from data_prep.similarity import Fingerprint, Similarity, compare, fingerprint
from davinci.types import Problem


def _best_match(fp: Fingerprint, eval_fps: Sequence[Fingerprint]) -> tuple[Fingerprint, Similarity] | None:
    best: tuple[Fingerprint, Similarity] | None = None
    for other in eval_fps:
        sim = compare(fp, other)
        if best is None or sim.overall > best[1].overall:
            best = (other, sim)
    return best


def _describe(sim: Similarity, fp: Fingerprint, match: Fingerprint) -> tuple[str, str]:
    if sim.exact:
        return "exact-copy", "same canonical tokens (an exact, renamed or resized copy)"
    if sim.signature >= sim.text:
        ops_a, ops_b = " > ".join(fp.signature[:8]), " > ".join(match.signature[:8])
        return "operator-signature", (
            f"operator signature similarity {sim.signature:.2f} ({ops_a} vs {ops_b}); "
            f"token-shingle Jaccard {sim.jaccard:.2f}"
        )
    return "text-overlap", (
        f"token-shingle Jaccard {sim.jaccard:.2f}, containment {sim.containment:.2f}; "
        f"operator signature similarity {sim.signature:.2f}"
    )


def decontaminate(
    train: Sequence[Problem], eval_problems: Sequence[Problem], threshold: float = 0.7, *, progress: bool = False
) -> tuple[list[Problem], list[DropRecord]]:
    """(kept, dropped) of `train` against `eval_problems`; `dropped` carries id, reason, matched eval id, score."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"decontamination threshold must be in (0, 1], got {threshold}")
    eval_fps = [fingerprint(p) for p in eval_problems]
    kept: list[Problem] = []
    dropped: list[DropRecord] = []
    for problem in tqdm(train, desc="decontaminate", disable=not progress, leave=False):
        fp = fingerprint(problem)
        best = _best_match(fp, eval_fps)
        if best is None or best[1].overall < threshold:
            kept.append(problem)
            continue
        match, sim = best
        reason, detail = _describe(sim, fp, match)
        dropped.append(
            DropRecord(
                stage="decontamination",
                problem_id=problem.id,
                reason=reason,  # type: ignore[arg-type]
                detail=detail,
                matched_id=match.problem_id,
                score=sim.overall,
            )
        )
    return kept, dropped


__all__ = ["decontaminate"]
