"""Evolution revisions as a data source: kept parent -> child steps from `davinci-kernel evolve` become policy SFT
examples and RL start states, decontaminated and diversity-filtered like every other source.

- Input: the `revisions.jsonl` files an evolve run wrote (`DataConfig.evolution_revisions`; read by
  `davinci.evolve.revisions.read_revisions`, the one reader of that format).
- Decontamination: a revision whose problem is too similar to an eval problem (the same fingerprints and
  threshold as `decontam.decontaminate`) is dropped with the problem's drop record.
- Diversity: a revision is a step, so two steps are near-duplicates when their *edits* are: the Jaccard
  similarity of the changed-line sets (`edit_signature`: lines removed and added, stripped) at or above
  `dedup_threshold`, within the same problem. The strongest revision (largest conservative gain) is kept.
- Output: SFT examples (`revision_example`: problem, parent attempt with its feedback, child as answer) and
  start states (`start_state`), in the order of the kept revisions.

    data = evolution_source(paths, eval_problems, cfg.decontam_threshold, cfg.dedup_threshold)
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Sequence

from data_prep.decontam import decontaminate
from data_prep.records import DropRecord
from davinci.types import Problem


@dataclass(frozen=True)
class EvolutionData:
    examples: list[Any]
    start_states: list[dict[str, Any]]
    drops: list[DropRecord]
    loaded: int


def edit_signature(parent: str, child: str) -> frozenset[str]:
    """The changed lines of a step, `-line` / `+line` (stripped; blank lines ignored)."""
    out = set()
    for line in difflib.ndiff(parent.splitlines(), child.splitlines()):
        if line[:2] in ("- ", "+ ") and line[2:].strip():
            out.add(line[0] + line[2:].strip())
    return frozenset(out)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def dedup_revisions(revisions: Sequence[Any], threshold: float) -> tuple[list[Any], list[DropRecord]]:
    """Keep revisions strongest first, dropping a step whose edit is a near-duplicate of a kept step's on the
    same problem; the kept ones come back in input order."""
    order = sorted(range(len(revisions)), key=lambda i: -revisions[i].gain)
    kept: list[int] = []
    drops: list[DropRecord] = []
    sigs = [edit_signature(r.parent.code, r.child.code) for r in revisions]
    for i in order:
        r = revisions[i]
        match = max(((j, _jaccard(sigs[i], sigs[j])) for j in kept if revisions[j].problem.id == r.problem.id),
                    key=lambda t: t[1], default=None)
        if match is not None and match[1] >= threshold:
            other = revisions[match[0]]
            drops.append(DropRecord("diversity", r.problem.id, "near-duplicate",
                                    f"evolution revision {r.parent.code_hash}->{r.child.code_hash} repeats the edit of "
                                    f"{other.parent.code_hash}->{other.child.code_hash}", other.child.code_hash, match[1]))
            continue
        kept.append(i)
    return [revisions[i] for i in sorted(kept)], drops


def evolution_source(paths: Sequence[str], eval_problems: Sequence[Problem], decontam_threshold: float,
                     dedup_threshold: float) -> EvolutionData:
    from davinci.evolve.revisions import read_revisions, revision_example, start_state

    revisions = [r for path in paths for r in read_revisions(path)]
    loaded = len(revisions)
    problems = list({r.problem.id: r.problem for r in revisions}.values())
    clean, drops = decontaminate(problems, eval_problems, decontam_threshold)
    clean_ids = {p.id for p in clean}
    eval_ids = {p.id for p in eval_problems}
    revisions = [r for r in revisions if r.problem.id in clean_ids and r.problem.id not in eval_ids]
    kept, dup_drops = dedup_revisions(revisions, dedup_threshold)
    return EvolutionData([revision_example(r) for r in kept], [start_state(r) for r in kept], [*drops, *dup_drops],
                         loaded)
