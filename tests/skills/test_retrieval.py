"""Tokenizer, query-from-AST extraction, and BM25 scores against rank-bm25 and a simple reference."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from davinci.skills.codeinfo import apply_shape_overrides, extract_ops, module_constants
from davinci.skills.retrieval import BM25Retriever
from davinci.skills.seed import seed_skills
from davinci.skills.tokens import code_tokens, query_tokens, split_identifier

KB_STYLE = '''import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x):
        x = self.gemm(x)
        x = F.gelu(x) * 2.0
        x = self.norm(x + 1.0)
        return torch.softmax(x, dim=-1).sum(dim=1)

batch_size = 128
in_features = 64
height = width = 32

def get_inputs():
    return [torch.rand(batch_size, in_features, dtype=torch.float16)]

def get_init_inputs():
    return [in_features, 10]
'''


@pytest.mark.parametrize(
    "word, parts",
    [
        ("layer_norm", ["layer", "norm"]),
        ("LayerNorm", ["layer", "norm"]),
        ("HTTPServer", ["http", "server"]),
        ("conv2d", ["conv", "2", "d"]),
        ("x_ptr", ["x", "ptr"]),
    ],
)
def test_split_identifier(word, parts):
    assert split_identifier(word) == parts


def test_code_tokens_hand_computed():
    # dots split; parts then the joined form; 1-char, numeric and stop words dropped.
    assert code_tokens("torch.nn.functional.layer_norm(x, self.eps)") == ["torch", "nn", "functional", "layer", "norm", "layernorm", "eps"]
    assert code_tokens("nn.Conv2d and the BatchNorm2d") == ["nn", "conv", "conv2d", "batch", "norm", "batchnorm2d", "batchnorm"]
    assert code_tokens("fp16 GELU-tanh, 4096 rows") == ["fp", "fp16", "gelu", "tanh", "rows"]
    assert code_tokens("conv_transpose3d") == ["conv", "transpose", "convtranspose3d", "convtranspose"]


def test_extract_ops_reads_operators_from_the_ast():
    info = extract_ops(KB_STYLE)
    assert info.ops == ("linear", "layernorm", "gelu", "mul", "add", "softmax", "sum")
    for cat in ("matmul", "normalization", "elementwise", "epilogue", "softmax", "reduction", "fusion"):
        assert cat in info.categories
    assert "fp16" in info.dtypes
    assert dict(info.constants) == {"batch_size": 128, "in_features": 64, "height": 32, "width": 32}
    # Calls on self submodules and input constructors are not operators.
    assert "gemm" not in info.ops and "rand" not in info.ops
    q = query_tokens(KB_STYLE)
    assert q[:3] == ["linear", "layernorm", "gelu"] and len(q) == len(set(q))
    assert query_tokens("this is not python (") == ["python"]  # falls back to plain text tokens


def test_shape_overrides_rewrite_only_the_named_constants():
    code = apply_shape_overrides(KB_STYLE, {"height": 5, "batch_size": 3})
    assert module_constants(code) == {"batch_size": 3, "in_features": 64, "height": 5, "width": 32}
    assert code.replace("batch_size = 3", "batch_size = 128").replace("height = 5\nwidth = 32", "height = width = 32") == KB_STYLE
    from davinci.errors import MalformedInput

    with pytest.raises(MalformedInput, match="one of: batch_size"):
        apply_shape_overrides(KB_STYLE, {"channels": 3})


def reference_bm25(corpus: list[list[str]], query: list[str], k1: float = 1.5, b: float = 0.75, eps: float = 0.25) -> list[float]:
    """Okapi BM25 written from the formula, with rank-bm25's idf floor for very common terms."""
    n = len(corpus)
    avgdl = sum(len(d) for d in corpus) / n
    df = Counter(t for d in corpus for t in set(d))
    idf = {t: math.log(n - f + 0.5) - math.log(f + 0.5) for t, f in df.items()}
    floor = eps * sum(idf.values()) / len(idf)
    idf = {t: (v if v >= 0 else floor) for t, v in idf.items()}
    scores = []
    for d in corpus:
        tf = Counter(d)
        s = 0.0
        for q in query:
            if q in tf:
                s += idf[q] * tf[q] * (k1 + 1) / (tf[q] + k1 * (1 - b + b * len(d) / avgdl))
        scores.append(s)
    return scores


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bm25_scores_match_rank_bm25_and_reference(seed):
    skills = seed_skills(evidence_path=None)
    rng = random.Random(seed)
    retriever = BM25Retriever(rng.sample(skills, 12))
    vocab = sorted({t for doc in retriever.corpus for t in doc})
    query = rng.sample(vocab, 8) + ["not-a-term"]
    fast = retriever.scores(query)
    np.testing.assert_allclose(fast, retriever.bm25.get_scores(query), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fast, reference_bm25(retriever.corpus, query), rtol=1e-9, atol=1e-9)


def test_search_ranks_the_obvious_skill_first_and_is_deterministic():
    retriever = BM25Retriever(seed_skills(evidence_path=None))
    from davinci.skills.seed import SEED_DIR

    rmsnorm_problem = (SEED_DIR / "triton-rmsnorm-rowwise" / "before.py.txt").read_text()
    hits = retriever.search(rmsnorm_problem, k=5)
    assert hits[0][0].id in {"triton-rmsnorm-rowwise", "triton-channel-reduction-coalesced"}
    assert [s for s, _ in hits] == [s for s, _ in retriever.search(rmsnorm_problem, k=5)]
    assert all(a >= b for (_, a), (_, b) in zip(hits, hits[1:]))
    assert retriever.search("", k=5) == [] and retriever.search(rmsnorm_problem, k=0) == []
    assert BM25Retriever([]).search(rmsnorm_problem, k=3) == []


def test_ties_break_by_library_order():
    skills = seed_skills(evidence_path=None)
    twin = replace(skills[0], id="zz-twin-of-first")
    retriever = BM25Retriever([skills[0], twin] + skills[1:4])
    query = sorted(set(retriever.corpus[0]))  # the first skill's own words: the twins tie on top
    hits = retriever.search_tokens(query, k=2)
    assert hits[0][1] == hits[1][1]
    assert [s.id for s, _ in hits] == [skills[0].id, "zz-twin-of-first"]
    reordered = BM25Retriever([twin, skills[0]] + skills[1:4])
    assert [s.id for s, _ in reordered.search_tokens(query, k=2)] == ["zz-twin-of-first", skills[0].id]


def test_retrievable_skills_follow_the_configured_statuses(skill_factory):
    from davinci.skills.config import SkillsConfig
    from davinci.skills.retrieval import retrievable_skills

    lib = [replace(skill_factory("aaa"), status="admitted"), skill_factory("bbb"), replace(skill_factory("ccc"), status="retired")]
    assert [s.id for s in retrievable_skills(lib, SkillsConfig())] == ["aaa"]
    probation = SkillsConfig(retrieve_statuses=("candidate", "admitted"))
    assert [s.id for s in retrievable_skills(lib, probation)] == ["aaa", "bbb"]
