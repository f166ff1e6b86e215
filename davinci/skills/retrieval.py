"""BM25 retrieval of skills for a problem: rank-bm25's Okapi statistics, scored through an inverted index.

Choices:
- The index is `rank_bm25.BM25Okapi` over `tokens.skill_tokens` (its idf with the epsilon floor, its
  k1, b and average document length). `BM25Okapi.get_scores` loops over every document in Python for
  every query token (~20 ms at 10k skills); `search` instead precomputes, per term, the documents that
  contain it and their full BM25 term weight `idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`,
  so a query is a sum of a few small numpy arrays. `scores()` equals `BM25Okapi.get_scores` (tested).
- The query comes from the problem's AST (`tokens.query_tokens`), each token once.
- Only hits with a positive score are returned (nothing shared -> nothing retrieved); ties keep the
  library order, so results are deterministic.

    retriever = BM25Retriever(retrievable_skills(library.skills, profile.skills))
    hits = retriever.search(problem.code, k=8)        # [(Skill, score), ...] best first
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from davinci.skills.codeinfo import extract_ops
from davinci.skills.config import SkillsConfig
from davinci.skills.schema import Skill
from davinci.skills.tokens import query_tokens, skill_tokens


def retrievable_skills(skills: Sequence[Skill], cfg: SkillsConfig) -> list[Skill]:
    """The skills the selection agent may see: those whose status is in `cfg.retrieve_statuses`
    (admitted only by default; adding "candidate" puts unadmitted skills on probation)."""
    return [s for s in skills if s.status in cfg.retrieve_statuses]


@dataclass(frozen=True)
class Posting:
    """Documents containing one term and that term's BM25 weight in each."""

    docs: np.ndarray  # [n_docs_with_term] int64
    weights: np.ndarray  # [n_docs_with_term] float64


def _example_ops_memo(skills: Sequence[Skill]) -> list[tuple[str, ...]]:
    """Operators of each skill's `before` example, parsing each distinct source once."""
    memo: dict[str, tuple[str, ...]] = {}
    out = []
    for skill in skills:
        code = skill.example.before
        if code not in memo:
            info = extract_ops(code)
            memo[code] = info.ops + info.categories
        out.append(memo[code])
    return out


def build_postings(bm25, corpus: Sequence[Sequence[str]]) -> dict[str, Posting]:
    """Per-term postings with precomputed weights from a fitted `BM25Okapi` (`bm25`) and its corpus."""
    k1, b, avgdl = bm25.k1, bm25.b, bm25.avgdl
    docs_of: dict[str, list[int]] = {}
    tfs_of: dict[str, list[int]] = {}
    for i, freqs in enumerate(bm25.doc_freqs):
        for term, tf in freqs.items():
            docs_of.setdefault(term, []).append(i)
            tfs_of.setdefault(term, []).append(tf)
    doc_len = np.asarray(bm25.doc_len, dtype=np.float64)
    postings = {}
    for term, docs in docs_of.items():
        idx = np.asarray(docs, dtype=np.int64)
        tf = np.asarray(tfs_of[term], dtype=np.float64)
        norm = tf + k1 * (1.0 - b + b * doc_len[idx] / avgdl)
        postings[term] = Posting(idx, bm25.idf[term] * tf * (k1 + 1.0) / norm)
    return postings


class BM25Retriever:
    """BM25 over a fixed list of skills (build once per library version; searching is read-only)."""

    def __init__(self, skills: Sequence[Skill], k1: float = 1.5, b: float = 0.75) -> None:
        from rank_bm25 import BM25Okapi  # imported here: the GPU machine only has it when carried

        self.skills: tuple[Skill, ...] = tuple(skills)
        ops = _example_ops_memo(self.skills)
        self.corpus = [skill_tokens(s, o) for s, o in zip(self.skills, ops)]
        # rank-bm25 divides by the corpus size and average length; an empty library has no index.
        self.bm25 = BM25Okapi([doc or ["<empty>"] for doc in self.corpus], k1=k1, b=b) if self.skills else None
        self.postings = build_postings(self.bm25, self.corpus) if self.bm25 else {}

    def __len__(self) -> int:
        return len(self.skills)

    def scores(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every skill for query `tokens` (duplicates count twice, as in rank-bm25)."""
        out = np.zeros(len(self.skills), dtype=np.float64)  # [n_skills]
        for token in tokens:
            posting = self.postings.get(token)
            if posting is not None:
                out[posting.docs] += posting.weights
        return out

    def search(self, problem_code: str, k: int) -> list[tuple[Skill, float]]:
        """The `k` best skills for a problem source, best first, positive scores only."""
        if not self.skills or k <= 0:
            return []
        return self.search_tokens(query_tokens(problem_code), k)

    def search_tokens(self, tokens: Sequence[str], k: int) -> list[tuple[Skill, float]]:
        scores = self.scores(tokens)
        k = min(k, len(scores))
        # Everything scoring at least the k-th best score (ties included), then a stable sort:
        # score descending, library position ascending.
        threshold = -np.partition(-scores, k - 1)[k - 1]
        candidates = np.flatnonzero(scores >= max(threshold, np.finfo(np.float64).tiny))
        top = sorted(candidates.tolist(), key=lambda i: (-scores[i], i))[:k]
        return [(self.skills[i], float(scores[i])) for i in top]
