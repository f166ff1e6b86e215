"""The skill library: schema, versioned store, BM25 retrieval + rerank, verified admission, retirement, seeds.

Modules (each opens with its own docstring):
  schema      `Skill` and its records (example, effect, evidence, usage); validation; (de)serialization
  parse       `parse_skill_json`: the summary agent's text -> `Skill` or `SkillRejection` (never raises)
  store       `SkillStore`: immutable numbered versions, atomic commits, idempotent on content
  export      markdown / HTML exports and `to_rows` (a flat table for mlflow.log_table)
  codeinfo    AST facts about KernelBench sources: size constants, shape overrides, operators
  tokens      the code-aware tokenizer shared by BM25 documents and queries
  retrieval   `BM25Retriever` (rank-bm25 statistics, inverted-index scoring)
  rerank      the rerank prompt (template files in prompts/) and its garbage-proof parser
  dedup       near-duplicate detection and merging
  admission   `admit`: reruns, unseen shapes, transfer problems, CI bar, near-duplicates -> decisions
  usage       usage statistics from episodes and `retire`
  seed        the project's seed skills (data files in seed/) with their GPU evidence
  cli         `skills list` / `skills show`

Nothing here imports Prefect, MLflow or davinci.llm; kernelgym is imported only when admission runs
without an explicit `evaluate_fn`, and rank-bm25 only when a retriever is built.

    from davinci.skills import SkillStore, seed_skills, BM25Retriever
    store = SkillStore(root); lib = store.commit(seed_skills(), parent=None, note="seed")
    hits = BM25Retriever(retrievable_skills(lib.skills, cfg)).search(problem.code, k=8)
"""

from davinci.skills.admission import AdmissionDecision, TransferCase, admit, apply_decisions
from davinci.skills.cli import list_command, show_command
from davinci.skills.codeinfo import apply_shape_overrides, extract_ops, module_constants
from davinci.skills.config import SkillsConfig
from davinci.skills.dedup import merge_skills, near_duplicates, similarity
from davinci.skills.export import export_html, export_markdown, render_skill_markdown, to_rows
from davinci.skills.parse import SUMMARY_SCHEMA, SkillRejection, parse_skill_json
from davinci.skills.rerank import RerankResult, apply_order, parse_rerank, rerank_messages
from davinci.skills.retrieval import BM25Retriever, retrievable_skills
from davinci.skills.schema import (
    AppliesTo,
    CheckRecord,
    Effect,
    EvidenceRecord,
    Example,
    Measurement,
    Preconditions,
    Skill,
    SkillProvenance,
    UsageStats,
    validate_skill,
)
from davinci.skills.seed import seed_skills
from davinci.skills.store import LibraryVersion, SkillStore
from davinci.skills.tokens import code_tokens, query_tokens
from davinci.skills.usage import RetirementDecision, UsageObservation, apply_retirements, retire, update_usage, with_usage

__all__ = [
    "AdmissionDecision",
    "AppliesTo",
    "BM25Retriever",
    "CheckRecord",
    "Effect",
    "EvidenceRecord",
    "Example",
    "LibraryVersion",
    "Measurement",
    "Preconditions",
    "RerankResult",
    "RetirementDecision",
    "SUMMARY_SCHEMA",
    "Skill",
    "SkillProvenance",
    "SkillRejection",
    "SkillStore",
    "SkillsConfig",
    "TransferCase",
    "UsageObservation",
    "UsageStats",
    "admit",
    "apply_decisions",
    "apply_order",
    "apply_retirements",
    "apply_shape_overrides",
    "code_tokens",
    "export_html",
    "export_markdown",
    "extract_ops",
    "list_command",
    "merge_skills",
    "module_constants",
    "near_duplicates",
    "parse_rerank",
    "parse_skill_json",
    "query_tokens",
    "render_skill_markdown",
    "rerank_messages",
    "retire",
    "retrievable_skills",
    "seed_skills",
    "show_command",
    "similarity",
    "to_rows",
    "update_usage",
    "validate_skill",
    "with_usage",
]
