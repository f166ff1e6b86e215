"""Configuration of the skill library: retrieval, rerank and admission."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SkillsConfig:
    # Start the library from the project's seed skills.
    seed: bool = True
    # BM25 candidates handed to the reranker, and skills finally given to the policy.
    bm25_top_k: int = 8
    select_k: int = 3
    rerank: bool = True
    # Admission: the lower bound of the speedup CI must exceed this (CPU timings cannot show speedups,
    # so the tiny profile sets it to 0 and admission then checks correctness and reproducibility only).
    min_speedup_lower: float = 1.05
    admission_reruns: int = 3
