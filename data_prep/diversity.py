"""Diversity filter: near-duplicate removal, then a cap on problems per operator family.

Choices:
- Near-duplicates: exact token-shingle Jaccard (no MinHash; see `similarity`), greedy over the problems
  in priority order (built-in first, then KernelBench, then synthetic; input order inside a source): a
  problem is dropped when its Jaccard with an already kept problem reaches `dedup_threshold`, or when its
  canonical tokens equal a kept problem's (a renamed or resized copy). O(n^2) pairs, fine to thousands.
- Clusters: a problem's family is the sorted set of operator categories of its forward
  (`source_ast.signature_family`, e.g. `activation+matmul`). A family over `cluster_cap` keeps its
  built-in problems first, then a seeded shuffle of the rest (deterministic for a seed). `cluster_cap`
  <= 0 means no cap.
- The report counts problems per family before and after and lists every drop with its reason.

    kept, dropped, report = diversity_filter(problems, dedup_threshold=0.9, cluster_cap=6, seed=0)
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from data_prep.records import DropRecord
from data_prep.similarity import Fingerprint, fingerprint, jaccard
from davinci.types import Problem

SOURCE_PRIORITY = {"builtin": 0, "kernelbench": 1, "synthetic": 2}
DEDUP_METHOD = "exact token-shingle Jaccard (k=5, informative shingles), greedy in source-priority order"


@dataclass(frozen=True)
class DiversityReport:
    method: str
    dedup_threshold: float
    cluster_cap: int
    clusters_before: dict[str, int]
    clusters_after: dict[str, int]
    drops: tuple[DropRecord, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "dedup_threshold": self.dedup_threshold,
            "cluster_cap": self.cluster_cap,
            "clusters_before": dict(sorted(self.clusters_before.items())),
            "clusters_after": dict(sorted(self.clusters_after.items())),
            "drops": [d.to_dict() for d in self.drops],
        }


def _priority_order(problems: Sequence[Problem]) -> list[int]:
    return sorted(range(len(problems)), key=lambda i: (SOURCE_PRIORITY.get(problems[i].source, 3), i))


def _dedup(
    problems: Sequence[Problem], fps: Sequence[Fingerprint], threshold: float
) -> tuple[list[int], list[DropRecord]]:
    kept: list[int] = []
    dropped: list[DropRecord] = []
    for i in _priority_order(problems):
        best_j, best_sim = -1, 0.0
        for j in kept:
            sim = 1.0 if fps[i].token_hash == fps[j].token_hash else jaccard(fps[i].shingles, fps[j].shingles)
            if sim > best_sim:
                best_j, best_sim = j, sim
        if best_j >= 0 and best_sim >= threshold:
            other = problems[best_j].id
            dropped.append(
                DropRecord("diversity", problems[i].id, "near-duplicate",
                           f"near-duplicate of {other} at similarity {best_sim:.2f}", other, best_sim)
            )
        else:
            kept.append(i)
    return kept, dropped


def _cap(
    problems: Sequence[Problem], fps: Sequence[Fingerprint], kept: list[int], cap: int, seed: int
) -> tuple[list[int], list[DropRecord]]:
    if cap <= 0:
        return kept, []
    by_family: dict[str, list[int]] = {}
    for i in kept:
        by_family.setdefault(fps[i].family, []).append(i)
    rng = random.Random(seed)
    survivors: set[int] = set()
    dropped: list[DropRecord] = []
    for family in sorted(by_family):
        members = by_family[family]
        if len(members) <= cap:
            survivors.update(members)
            continue
        builtins = [i for i in members if problems[i].source == "builtin"]
        others = sorted((i for i in members if problems[i].source != "builtin"), key=lambda i: problems[i].id)
        rng.shuffle(others)
        ranked = builtins + others
        survivors.update(ranked[:cap])
        for i in ranked[cap:]:
            dropped.append(
                DropRecord("diversity", problems[i].id, "cluster-cap",
                           f"family {family} holds {len(members)} problems; cap {cap}", "", float(len(members)))
            )
    order = {i: rank for rank, i in enumerate(kept)}
    dropped.sort(key=lambda d: d.problem_id)
    return sorted(survivors, key=order.__getitem__), dropped


def diversity_filter(
    problems: Sequence[Problem], dedup_threshold: float = 0.9, cluster_cap: int = 6, seed: int = 0
) -> tuple[list[Problem], list[DropRecord], DiversityReport]:
    """(kept, dropped, report); `kept` keeps the input's relative order."""
    if not 0.0 < dedup_threshold <= 1.0:
        raise ValueError(f"dedup_threshold must be in (0, 1], got {dedup_threshold}")
    fps = [fingerprint(p) for p in problems]
    kept, near_dups = _dedup(problems, fps, dedup_threshold)
    kept, capped = _cap(problems, fps, kept, cluster_cap, seed)
    kept_sorted = sorted(kept)
    report = DiversityReport(
        method=DEDUP_METHOD,
        dedup_threshold=dedup_threshold,
        cluster_cap=cluster_cap,
        clusters_before=dict(Counter(fp.family for fp in fps)),
        clusters_after=dict(Counter(fps[i].family for i in kept_sorted)),
        drops=tuple(near_dups + capped),
    )
    return [problems[i] for i in kept_sorted], near_dups + capped, report


__all__ = ["diversity_filter", "DiversityReport", "DEDUP_METHOD"]
