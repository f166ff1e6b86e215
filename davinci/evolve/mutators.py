"""Who proposes programs during evolution: a registry of mutators, each `seeds(problem, n)` + `propose(requests)`.

- `replay` plays recorded edits from a JSONL file (for tests and the GPU benchmark where no capable model
  can be loaded; every evaluation stays real). Rows: `{"problem_id": P, "role": "seed", "code": SRC}` seeds
  generation 0; `{"problem_id": P, "find": OLD, "replace": NEW}` (or `"code": SRC`) is an edit. Request n
  tries the edits from n (mod count) on and takes the first that changes the parent; a crossover request
  gets the edit on its first parent, else on its second (the lineage records both parents).
- `rules` needs no model: deterministic retuning of tile sizes and launch settings
  (`davinci.skills.rewrites`: one site x2 or /2 per child, the n-th move for request n, skipping children
  already proposed, two moves when every single one is known; a crossover takes the second parent's values at the sites both share). Its population
  is the problem's built-in reference solution unless kernels are given.
- `policy` asks the backbone (any `GenerationBackend`) with the policy's own prompt: the problem, the parent
  as the earlier attempt, and as its feedback the evaluator's verdict, the archive examples and, for a
  crossover, the second parent to combine with.

    mutator = MUTATORS.get("replay")(cfg, backend=None)
    codes = mutator.propose([MutationRequest(problem, parent, None, (), 0)])
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from davinci.errors import ConfigError, InputNotFound, MalformedInput
from davinci.evolve.archive import ArchiveEntry
from davinci.evolve.config import EvolveConfig
from davinci.jsonl import read_jsonl
from davinci.registry import Registry
from davinci.types import Problem


@dataclass(frozen=True)
class MutationRequest:
    """One child to propose: `other` is the second parent of a crossover; `index` numbers requests per problem."""

    problem: Problem
    parent: ArchiveEntry
    other: ArchiveEntry | None
    examples: tuple[ArchiveEntry, ...]
    index: int
    avoid: frozenset[str] = frozenset()  # code hashes already proposed (a mutator may skip to another child)


class Mutator(Protocol):
    name: str

    def seeds(self, problem: Problem, n: int) -> list[str]: ...

    def propose(self, requests: Sequence[MutationRequest]) -> list[str | None]: ...


MUTATORS: Registry[Callable[..., Mutator]] = Registry("mutator")


# --- replay ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    code: str = ""
    find: str = ""
    replace: str = ""

    def apply(self, parent: str) -> str | None:
        if self.code:
            return self.code if self.code != parent else None
        if self.find and self.find in parent:
            child = parent.replace(self.find, self.replace)
            return child if child != parent else None
        return None


_FIX = "each line must be a JSON object with problem_id and either code, or find and replace (see davinci/evolve/mutators.py)"


def _row_edit(path: Path, n: int, row: Any) -> tuple[str, str, Edit]:
    if not isinstance(row, dict) or not isinstance(row.get("problem_id"), str):
        raise MalformedInput(f"{path}:{n} has no problem_id", _FIX)
    code, find = row.get("code"), row.get("find")
    if isinstance(code, str) and code.strip():
        edit = Edit(code=code)
    elif isinstance(find, str) and find and isinstance(row.get("replace"), str):
        edit = Edit(find=find, replace=row["replace"])
    else:
        raise MalformedInput(f"{path}:{n} has neither code nor find/replace", _FIX)
    role = row.get("role", "edit")
    if role not in ("seed", "edit") or (role == "seed" and not edit.code):
        raise MalformedInput(f"{path}:{n}: role must be seed (with code) or edit, got {role!r}", _FIX)
    return row["problem_id"], role, edit


def read_replay(path: str | Path) -> dict[str, dict[str, list[Edit]]]:
    """{problem_id: {"seed": [...], "edit": [...]}} from a replay file; bad input raises with the fix."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFound(f"replay file {path} does not exist", "pass --replay FILE (a JSONL of recorded edits) or --mutator policy")
    out: dict[str, dict[str, list[Edit]]] = {}
    for n, row in enumerate(read_jsonl(path), 1):
        pid, role, edit = _row_edit(path, n, row)
        out.setdefault(pid, {"seed": [], "edit": []})[role].append(edit)
    return out


class ReplayMutator:
    """Recorded edits (see the module docstring). Deterministic: the same requests give the same children."""

    name = "replay"

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.rows = read_replay(path)

    def _for(self, problem: Problem) -> dict[str, list[Edit]]:
        rows = self.rows.get(problem.id)
        if rows is None:
            raise MalformedInput(f"replay file {self.path} has no rows for problem {problem.id}",
                                 f"add rows with \"problem_id\": \"{problem.id}\" (known: {', '.join(sorted(self.rows)) or 'none'})")
        return rows

    def seeds(self, problem: Problem, n: int) -> list[str]:
        return [e.code for e in self._for(problem)["seed"][:n]]

    def _one(self, req: MutationRequest) -> str | None:
        edits = self._for(req.problem)["edit"]
        for parent in (req.parent, req.other):
            for k in range(len(edits)):
                child = edits[(req.index + k) % len(edits)].apply(parent.code) if parent is not None else None
                if child is not None:
                    return child
        return None

    def propose(self, requests: Sequence[MutationRequest]) -> list[str | None]:
        return [self._one(r) for r in requests]


@MUTATORS.register("replay")
def _replay(cfg: EvolveConfig, backend: Any = None, replay_path: str = "") -> Mutator:
    path = replay_path or cfg.replay_path
    if not path:
        raise ConfigError("the replay mutator needs a replay file", "pass --replay FILE or --set evolve.replay_path=FILE")
    return ReplayMutator(path)


# --- rules --------------------------------------------------------------------------------------------


class RulesMutator:
    """Model-free retuning (see the module docstring)."""

    name = "rules"

    def seeds(self, problem: Problem, n: int) -> list[str]:
        return [problem.reference_solution] if problem.reference_solution else []

    def _one(self, req: MutationRequest) -> str | None:
        from davinci.evolve.state import code_hash
        from davinci.skills.rewrites import crossover, moves, retune

        fresh = lambda c: c is not None and code_hash(c) not in req.avoid  # noqa: E731
        if req.other is not None and fresh(child := crossover(req.parent.code, req.other.code)):
            return child
        n = len(moves(req.parent.code))
        firsts = [retune(req.parent.code, req.index + k) for k in range(n)]
        for child in firsts:  # one move, starting at the request's own
            if fresh(child):
                return child
        for first in firsts:  # every single move is known: two moves
            for k in range(len(moves(first or ""))):
                child = retune(first or "", req.index + k)
                if fresh(child) and child != req.parent.code:
                    return child
        return None

    def propose(self, requests: Sequence[MutationRequest]) -> list[str | None]:
        return [self._one(r) for r in requests]


@MUTATORS.register("rules")
def _rules(cfg: EvolveConfig, backend: Any = None, replay_path: str = "") -> Mutator:
    return RulesMutator()


# --- policy ---------------------------------------------------------------------------------------------


def _feedback(req: MutationRequest) -> str:
    parts = [req.parent.feedback.strip() or "(no feedback)"]
    for ex in req.examples:
        parts.append(f"Another correct program from the archive (speedup {ex.speedup}):\n```python\n{ex.code.strip()}\n```")
    if req.other is not None:
        parts.append("Combine the best ideas of your program and this one:\n"
                     f"```python\n{req.other.code.strip()}\n```")
    return "\n\n".join(parts)


class PolicyMutator:
    """The backbone with the policy's prompt (one batched `generate` per call)."""

    name = "policy"

    def __init__(self, backend: Any, max_new_tokens: int, temperature: float, seed: int) -> None:
        self.backend, self.max_new_tokens, self.temperature, self.seed = backend, max_new_tokens, temperature, seed

    def _generate(self, prompts: list[list[Any]], offset: int) -> list[str | None]:
        from davinci.agents.parsers import extract_code
        from davinci.llm.types import Sampling

        sampling = Sampling(self.max_new_tokens, temperature=self.temperature, seed=self.seed + offset)
        outputs = self.backend.generate(prompts, sampling) if prompts else []
        return [extract_code(o.text).code for o in outputs]

    def seeds(self, problem: Problem, n: int) -> list[str]:
        from davinci.agents.render import policy_messages

        return [c for c in self._generate([policy_messages(problem, ()) for _ in range(n)], 0) if c]

    def propose(self, requests: Sequence[MutationRequest]) -> list[str | None]:
        from davinci.agents.render import Attempt, policy_messages

        prompts = [policy_messages(r.problem, (), [Attempt(r.parent.code, "", _feedback(r), r.parent.correct)]) for r in requests]
        return self._generate(prompts, 1 + (requests[0].index if requests else 0))


@MUTATORS.register("policy")
def _policy(cfg: EvolveConfig, backend: Any = None, replay_path: str = "", max_new_tokens: int = 1024,
            temperature: float = 1.0) -> Mutator:
    if backend is None:
        raise ConfigError("the policy mutator needs a model", "pass --checkpoint DIR (a trained checkpoint) or use --mutator replay")
    return PolicyMutator(backend, max_new_tokens, temperature, cfg.seed)


def make_mutator(cfg: EvolveConfig, *, name: str = "", backend: Any = None, replay_path: str = "") -> Mutator:
    """The mutator named `name` (default `cfg.mutator`); an unknown name raises `UnknownName` listing the valid ones."""
    return MUTATORS.get(name or cfg.mutator)(cfg, backend=backend, replay_path=replay_path)
