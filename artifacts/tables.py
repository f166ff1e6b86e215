"""Rows for the result tables logged to MLflow, so a table explains itself without opening episodes.jsonl.

- `error_line(result)`: the actual error class and message of an evaluation (`IndentationError: expected an
  indented block ... (line 96)`), read from the last exception line of the evaluator's traceback, else its
  `error_kind`; an empty string for a correct result.
- `eval_rows(records, episodes)`: the eval stage's per-problem table (one row per problem, its best turn),
  with that error column filled from the episode's turn.

    from artifacts.tables import eval_rows
    store.log_table(run_id, eval_rows(records, episodes), "results/per_problem.json")
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Timeout|Warning)\w*(?::.*)?$")
MAX_CHARS = 300

NO_CODE = "no_code: the policy's answer held no code block"


def error_line(result: Mapping[str, Any] | None, error_kind: str | None = None) -> str:
    """The error class and message of one evaluation result (a dict from `EvalResult.to_dict()`)."""
    if not result:
        return NO_CODE if error_kind == "no_code" else (error_kind or "")
    if result.get("correct"):
        return ""
    text = str(result.get("error") or "").strip()
    kind = result.get("error_kind") or error_kind or ""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if _EXC_LINE.match(line):
            return line[:MAX_CHARS]
    if text:
        last = text.splitlines()[-1].strip()
        return (f"{kind}: {last}" if kind and not last.startswith(kind) else last)[:MAX_CHARS]
    reasons = result.get("flag_reasons") or result.get("flags") or []
    if reasons:
        return f"{kind or 'flagged'}: {'; '.join(map(str, reasons))}"[:MAX_CHARS]
    return kind


def _best_turn(episode: Mapping[str, Any] | None, index: int | None) -> Mapping[str, Any] | None:
    for turn in (episode or {}).get("turns", []):
        if turn.get("index") == index:
            return turn.get("result")
    return None


def eval_rows(records: Sequence[Mapping[str, Any]], episodes: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per-problem rows of the eval table: flags and CI as text, the error column from the best turn."""
    rows = []
    for rec in records:
        result = _best_turn(episodes.get(rec["problem_id"]), rec.get("turn"))
        rows.append({**rec, "flags": ",".join(rec.get("flags") or []), "speedup_ci": str(rec.get("speedup_ci")),
                     "error": error_line(result, rec.get("error_kind"))})
    return rows
