"""Fingerprints of problems and the similarity scores used by decontamination and the diversity filter.

Choices:
- Text: k-token shingles (k = 5) of `source_ast.canonical_tokens` (comments, docstrings, layout gone; names
  the file defines, numbers and strings canonicalized). Only *informative* shingles are kept: those with at
  least one torch API name or arithmetic operator. Without this filter the KernelBench boilerplate
  (imports, `get_inputs`, `super().__init__()`) makes any two small files look alike (ReLU vs Sigmoid).
- Exact set Jaccard, no MinHash: the stage compares at most a few thousand problems, where exact sets are
  fast enough (all 250 KernelBench files against a few hundred training problems take well under a second)
  and give reproducible, hand-checkable numbers.
- Containment |A & B| / |A| catches a training file embedded in a bigger eval file; it only counts when A
  has at least `MIN_CONTAINMENT_SHINGLES` shingles, since a tiny file is "contained" in anything using the
  same op.
- Operators: `max(SequenceMatcher ratio, multiset Jaccard)` of the two operator signatures, so the same ops
  in a different order (conv->relu->add vs conv->add->relu) still score high.
"""

from __future__ import annotations

import hashlib
import keyword
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher

from data_prep.source_ast import canonical_tokens, operator_signature, signature_family
from davinci.types import Problem

SHINGLE_K = 5
MIN_CONTAINMENT_SHINGLES = 20
_ARITH = frozenset({"+", "-", "*", "/", "@", "**", "+=", "-=", "*=", "/="})
_BORING = frozenset(
    "ID NUM STR self torch nn F functional Module super __init__ forward Model ModelNew get_inputs get_init_inputs "
    "rand randn randint rand_like randn_like Tensor Parameter int float bool str tuple list dict range len device "
    "dtype float32 float16 bfloat16 cuda shape size view reshape contiguous math".split()
)


def _informative(token: str) -> bool:
    if token in _ARITH:
        return True
    return token.isidentifier() and not keyword.iskeyword(token) and token not in _BORING


def shingles(tokens: list[str], k: int = SHINGLE_K) -> frozenset[tuple[str, ...]]:
    """Informative k-token shingles (see module docstring); a file shorter than k gives one shingle."""
    if len(tokens) < k:
        return frozenset({tuple(tokens)}) if any(_informative(t) for t in tokens) else frozenset()
    grams = (tuple(tokens[i : i + k]) for i in range(len(tokens) - k + 1))
    return frozenset(g for g in grams if any(_informative(t) for t in g))


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def containment(a: frozenset, b: frozenset, min_size: int = MIN_CONTAINMENT_SHINGLES) -> float:
    """|a & b| / |a|: how much of `a` appears in `b` (0 when `a` is too small to say)."""
    if len(a) < min_size:
        return 0.0
    return len(a & b) / len(a)


def signature_similarity(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    if not a or not b:
        return 0.0
    ratio = SequenceMatcher(None, a, b, autojunk=False).ratio()
    ca, cb = Counter(a), Counter(b)
    bag = sum((ca & cb).values()) / sum((ca | cb).values())
    return max(ratio, bag)


@dataclass(frozen=True)
class Fingerprint:
    """What the filters compare of one problem."""

    problem_id: str
    token_hash: str  # sha256 of the canonical token stream: equal for exact, renamed and resized copies
    shingles: frozenset[tuple[str, ...]]
    signature: tuple[str, ...]
    family: str


def fingerprint(problem: Problem) -> Fingerprint:
    tokens = canonical_tokens(problem.code)
    blob = " ".join(tokens) if tokens else problem.code
    signature = operator_signature(problem.code)
    return Fingerprint(
        problem_id=problem.id,
        token_hash=hashlib.sha256(blob.encode()).hexdigest()[:20],
        shingles=shingles(tokens),
        signature=signature,
        family=signature_family(signature),
    )


@dataclass(frozen=True)
class Similarity:
    """Scores of a pair (a, b): text = max(jaccard, containment of a in b); overall = max(text, signature)."""

    jaccard: float
    containment: float
    signature: float
    exact: bool

    @property
    def text(self) -> float:
        return 1.0 if self.exact else max(self.jaccard, self.containment)

    @property
    def overall(self) -> float:
        return max(self.text, self.signature)


def compare(a: Fingerprint, b: Fingerprint) -> Similarity:
    return Similarity(
        jaccard=jaccard(a.shingles, b.shingles),
        containment=containment(a.shingles, b.shingles),
        signature=signature_similarity(a.signature, b.signature),
        exact=a.token_hash == b.token_hash,
    )


__all__ = [
    "SHINGLE_K",
    "Fingerprint",
    "Similarity",
    "fingerprint",
    "compare",
    "shingles",
    "jaccard",
    "containment",
    "signature_similarity",
]
