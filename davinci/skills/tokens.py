"""Code-aware tokenization for BM25: skill documents and problem queries share one vocabulary.

Choices:
- Identifiers are split on dots, underscores, digits/letter boundaries and camelCase, lowercased; a
  multi-part identifier also yields its parts joined (`LayerNorm`, `layer_norm` -> `layer`, `norm`,
  `layernorm`), so the two spellings of one operator match. Tokens of one character, pure numbers and
  stopwords (English glue words and Python keywords) are dropped.
- The query for a problem is built from its AST (`codeinfo.extract_ops`): operator names, their
  taxonomy categories and dtype hints, each once. Unparsable code falls back to plain text tokens.
- A skill document is its text fields plus the operators of its `before` example; operators and
  patterns are repeated (`FIELD_WEIGHTS`) because they are the most specific evidence of relevance.

    code_tokens("torch.nn.functional.layer_norm(xTensor)")
    # ['torch', 'nn', 'functional', 'layer', 'norm', 'layernorm', 'tensor', 'xtensor']
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

from davinci.skills.codeinfo import extract_ops

if TYPE_CHECKING:
    from davinci.skills.schema import Skill

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+[A-Za-z][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
STOPWORDS = frozenset(
    """a an and are as at be by for from if in into is it its of on or that the this to with when where
    which while than then there these those was were will can may must should use used using not no yes
    do does done so such each per via than also only more most less very your you we our they them
    def return self class import none true false lambda pass elif else try except finally raise
    while for in is not and or with as yield global nonlocal assert del break continue print""".split()
)
# How many times each field's tokens count in a skill document.
FIELD_WEIGHTS = {"title": 2, "intent": 1, "ops": 3, "patterns": 2, "preconditions": 1, "guidance": 1, "failure_modes": 1, "example_ops": 1}


def split_identifier(word: str) -> list[str]:
    """`layer_norm` -> [layer, norm]; `LayerNorm` -> [layer, norm]; `conv2d` -> [conv, 2, d]."""
    parts: list[str] = []
    for chunk in word.split("_"):
        parts.extend(m.group(0).lower() for m in _CAMEL.finditer(chunk))
    return parts


def code_tokens(text: str) -> list[str]:
    """Tokens of code or prose, in order, with joined multi-part identifiers after their parts."""
    out: list[str] = []
    for match in _WORD.finditer(text):
        out.extend(word_tokens(match.group(0)))
    return out


@lru_cache(maxsize=1 << 16)
def word_tokens(word: str) -> tuple[str, ...]:
    """Tokens of one identifier (memoized: vocabularies are small, documents are many)."""
    parts = split_identifier(word)
    out = [p for p in parts if _keep(p)]
    joined = "".join(parts)
    if len(parts) > 1 and _keep(joined):
        out.append(joined)
    # `BatchNorm2d` -> also `batchnorm`, `conv_transpose2d` -> `convtranspose`: the name without its
    # dimension suffix, so the 1d/2d/3d variants of an operator meet the plain name.
    words = [p for p in parts if not p.isdigit() and len(p) > 1]
    stem = "".join(words)
    if len(words) > 1 and stem != joined and _keep(stem):
        out.append(stem)
    return tuple(out)


def _keep(token: str) -> bool:
    return len(token) > 1 and not token.isdigit() and token not in STOPWORDS


def query_tokens(problem_code: str) -> list[str]:
    """The BM25 query for a problem: its operators, their categories and dtype hints (each once)."""
    info = extract_ops(problem_code)
    if not info.ops:
        return list(dict.fromkeys(code_tokens(problem_code)))
    words = list(info.ops) + list(info.categories) + list(info.dtypes)
    tokens: list[str] = []
    for word in words:
        tokens.extend(code_tokens(word) or [word])
    return list(dict.fromkeys(tokens))


def skill_tokens(skill: "Skill", example_ops: tuple[str, ...] | None = None) -> list[str]:
    """The BM25 document of a skill. `example_ops` may be passed in when the caller memoizes it."""
    if example_ops is None:
        info = extract_ops(skill.example.before)
        example_ops = info.ops + info.categories
    pre = skill.preconditions
    fields = {
        "title": skill.title,
        "intent": skill.intent,
        "ops": " ".join(skill.applies_to.ops),
        "patterns": " ".join(skill.applies_to.patterns),
        "preconditions": " ".join((*pre.dtypes, pre.shapes, pre.layout, pre.hardware)),
        "guidance": skill.guidance,
        "failure_modes": " ".join(skill.failure_modes),
        "example_ops": " ".join(example_ops),
    }
    tokens: list[str] = [skill.backend]
    for name, text in fields.items():
        tokens.extend(code_tokens(text) * FIELD_WEIGHTS[name])
    return tokens
