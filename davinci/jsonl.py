"""The one JSONL helper of the engine: atomic write (with the digest of the bytes), read, append.

One JSON object per line, keys sorted on write so the same rows give the same bytes (and digest). A write
goes to a temporary sibling first and replaces the file, so a reader never sees half a file; `append`
adds whole lines (a crash can leave at most a partial last line, which `read` reports with its line
number instead of guessing).

    digest = write_jsonl(path, [{"a": 1}]); rows = read_jsonl(path)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from davinci.errors import MalformedInput


def _blob(rows: Iterable[Mapping[str, Any]]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()


def write_jsonl(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> str:
    """Atomic write of `rows`; returns the sha256 of the bytes written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = _blob(rows)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(blob)
    tmp.replace(path)
    return hashlib.sha256(blob).hexdigest()


def append_jsonl(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Append whole lines (creating the file and its folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        fh.write(_blob(rows))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every row of the file ([] when it does not exist); a line that is not JSON raises MalformedInput."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise MalformedInput(f"{path}:{n} is not JSON ({exc})", f"delete or regenerate {path}") from None
    return rows


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
