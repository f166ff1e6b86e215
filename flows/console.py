"""What the pipeline prints: one line per event, prefixed by the stage, flushed at once."""

from __future__ import annotations

import sys


def say(stage: str, message: str) -> None:
    print(f"[{stage}] {message}", file=sys.stdout, flush=True)


def banner(text: str) -> None:
    print(f"\n=== {text} ===", file=sys.stdout, flush=True)
