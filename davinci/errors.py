"""User-facing errors: each names the problem and the fix.

Trust boundaries (the evaluator, parsers of model output) return typed results instead of raising; these
exceptions are for bad *user* input: a missing file, an unknown profile key, an unknown run id. The CLI
prints `error: <message>` plus the hint and exits non-zero, never a traceback.
"""

from __future__ import annotations


class DavinciError(Exception):
    """Base class. `hint` says how to fix it; `exit_code` is what the CLI exits with."""

    exit_code = 2

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.hint}" if self.hint else self.message


class ConfigError(DavinciError):
    """A profile, a `--set key=value` override or a config value is invalid."""


class InputNotFound(DavinciError):
    """A file, folder, run or artifact the user named does not exist."""


class UnknownName(DavinciError):
    """A registry lookup failed; the message lists the valid names."""

    def __init__(self, kind: str, name: str, valid: list[str] | tuple[str, ...]) -> None:
        super().__init__(
            f"unknown {kind} {name!r}",
            f"use one of: {', '.join(sorted(valid))}",
        )
        self.valid = tuple(sorted(valid))


class MalformedInput(DavinciError):
    """A file exists but its content is not what it should be (bad problem file, corrupt skill, ...)."""
