"""Configuration of the skill library: retrieval, rerank, admission, near-duplicates and retirement.

Defaults are the tiny CPU profile except where a comment says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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
    # Statuses the retriever sees. Adding "candidate" puts unadmitted skills on probation: they can be
    # selected, and the episodes that use them become their transfer evidence.
    retrieve_statuses: tuple[Literal["candidate", "admitted"], ...] = ("admitted",)
    # Rerank prompt budget: characters of problem code, and of each candidate's guidance excerpt.
    rerank_max_code_chars: int = 6000
    rerank_guidance_chars: int = 400

    # --- admission ------------------------------------------------------------------------------
    # Unseen shapes per candidate (kernelgym.shape_variants of the example); checked for correctness.
    admission_shape_variants: int = 2
    # Base of the unseen seeds used by admission reruns (each rerun and shape gets its own seed).
    admission_seed: int = 20260
    # Transfer cases (other problems solved while using the skill) a candidate needs before admission;
    # 0 admits on its own example alone. Every available transfer case must pass either way.
    min_transfer_cases: int = 0
    # Transfer cases evaluated per candidate at most (most recent first).
    max_transfer_cases: int = 3
    # Parallel evaluator calls for untimed checks (shapes); timed checks run `admission_timed_workers`
    # at a time so that concurrent runs do not disturb each other's timings.
    admission_workers: int = 2
    admission_timed_workers: int = 1

    # --- near-duplicates ------------------------------------------------------------------------
    # Token-set Jaccard similarity of the text fields at or above which two skills are near-duplicates.
    duplicate_threshold: float = 0.6

    # --- retirement -----------------------------------------------------------------------------
    # Episodes needed both with and without the skill (retrieved but not selected) before judging it.
    retire_min_samples: int = 8
    # Retire when mean reward with the skill is below mean reward without it by more than this margin
    # and the one-sided upper confidence bound of the difference (z below) is below zero.
    retire_margin: float = 0.0
    retire_z: float = 1.645
