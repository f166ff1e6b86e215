"""Step-centric data from evolution: kept revisions (parent -> child) as SFT examples and RL start states.

A revision is kept when both programs are correct and the child is faster beyond the timing noise: the
lower bound of the child's speedup CI exceeds the upper bound of the parent's CI times `min_gain`
(`is_kept_revision`, a pure function). Crossover children are credited to their first parent.
`revisions.jsonl` (one `Revision.to_dict()` a line, written and read only by `write_revisions` /
`read_revisions` through `davinci.jsonl`) carries the problem too, so the data stage can rebuild the
policy prompt: the problem, the parent as the earlier attempt with its evaluator feedback, and the child
as the answer (`revision_example`); the RL start state is the same prompt without the answer
(`start_state`).

    kept = kept_revisions(problem, entries, min_gain=1.0); write_revisions(path, kept)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from davinci.errors import MalformedInput
from davinci.evolve.archive import ArchiveEntry
from davinci.jsonl import read_jsonl, write_jsonl
from davinci.types import Problem


@dataclass(frozen=True)
class Revision:
    problem: Problem
    parent: ArchiveEntry
    child: ArchiveEntry

    @property
    def gain(self) -> float:
        """Conservative speed gain: child CI lower bound / parent CI upper bound."""
        return float(self.child.ci_low or 0.0) / max(float(self.parent.ci_high or 0.0), 1e-12)

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem.to_dict(), "parent": self.parent.to_dict(), "child": self.child.to_dict(),
                "gain": self.gain}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Revision":
        return cls(Problem.from_dict(d["problem"]), ArchiveEntry.from_dict(d["parent"]), ArchiveEntry.from_dict(d["child"]))


def is_kept_revision(parent: ArchiveEntry, child: ArchiveEntry, min_gain: float = 1.0) -> bool:
    """Both correct, both timed, and child.ci_low > parent.ci_high * min_gain (strict)."""
    if not (parent.correct and child.correct):
        return False
    if child.ci_low is None or parent.ci_high is None:
        return False
    return child.ci_low > parent.ci_high * min_gain


def kept_revisions(problem: Problem, entries: Sequence[ArchiveEntry], min_gain: float = 1.0) -> list[Revision]:
    """Every kept revision among evaluated `entries` (children whose first parent is also among them)."""
    by_hash = {e.code_hash: e for e in entries}
    out = []
    for child in entries:
        parent = by_hash.get(child.parents[0]) if child.parents else None
        if parent is not None and is_kept_revision(parent, child, min_gain):
            out.append(Revision(problem, parent, child))
    return out


def write_revisions(path: str | Path, revisions: Sequence[Revision]) -> str:
    return write_jsonl(path, [r.to_dict() for r in revisions])


def read_revisions(path: str | Path) -> list[Revision]:
    """Revisions of a `revisions.jsonl`; a missing file or a malformed row is `InputNotFound`/`MalformedInput`."""
    from davinci.errors import InputNotFound

    if not Path(path).is_file():
        raise InputNotFound(f"no revisions file {path}", "pass the revisions.jsonl that `davinci-kernel evolve` wrote")
    out = []
    for n, row in enumerate(read_jsonl(path), 1):
        try:
            out.append(Revision.from_dict(row))
        except (KeyError, TypeError) as exc:
            raise MalformedInput(f"{path}:{n} is not a revision ({type(exc).__name__}: {exc})",
                                 "regenerate it with `davinci-kernel evolve`") from None
    return out


def _prompt(revision: Revision) -> list[Any]:
    from davinci.agents.render import Attempt, policy_messages

    parent = revision.parent
    attempt = Attempt(code=parent.code, response="", feedback=parent.feedback, correct=True)
    return policy_messages(revision.problem, (), [attempt])


def revision_example(revision: Revision) -> Any:
    """The SFT example (`ChatExample`, agent `policy`): prompt with the parent attempt, answer = child code."""
    from davinci.agents.render import code_block
    from davinci.llm.types import ChatExample

    messages = (*_prompt(revision), {"role": "assistant", "content": code_block(revision.child.code)})
    return ChatExample(agent="policy", messages=tuple(messages), problem_id=revision.problem.id)


def start_state(revision: Revision) -> dict[str, Any]:
    """An RL start state (`agents.starts.StartState.to_dict()`): the problem, the parent program and its feedback
    (the prompt the policy continues; the RL stage reads it back with `agents.starts.read_start_states`)."""
    from davinci.agents.starts import StartState

    parent = revision.parent
    return StartState(revision.problem.id, parent.code_hash, parent.code, parent.feedback, parent.speedup).to_dict()
