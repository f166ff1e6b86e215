"""RL start states: an episode that begins from an earlier program instead of from scratch.

A start state is the parent of a kept evolution revision (`davinci.evolve.revisions.start_state` writes it,
the data stage collects them in `evolution/start_states.jsonl`): the problem id, the parent program, its
evaluator feedback and speedup. An episode started from one shows the policy, on its first turn, the parent
as an earlier correct attempt with its feedback and the "make it faster" instruction: exactly the prompt a
multi-turn continuation would build (`render.policy_messages` with that attempt as history), and exactly the
prompt of the revision's SFT example (`revisions.revision_example`). The parent's text is context only; the
trainable tokens stay the policy's own answers.

`StartState` is the one typed form of a row; `read_start_states(path)` is the one reader and names the file
and line of a malformed row (`MalformedInput`), so a hand-edited file fails before any rollout.

    states = read_start_states("runs/data/evolution/start_states.jsonl")
    run_episodes(..., starts={"builtin/relu": states[0]})
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from davinci.agents.render import Attempt
from davinci.errors import InputNotFound, MalformedInput

FIELDS = ("problem_id", "parent_hash", "code", "feedback")  # required string fields; `speedup` is optional


@dataclass(frozen=True)
class StartState:
    problem_id: str
    parent_hash: str  # the parent program's code hash (recorded on the episode that starts from it)
    code: str
    feedback: str
    speedup: float | None = None

    def attempt(self) -> Attempt:
        """The parent as the policy's earlier attempt: correct (a kept revision's parent is), with its feedback."""
        return Attempt(code=self.code, response="", feedback=self.feedback, correct=True)

    def to_dict(self) -> dict[str, Any]:
        return {"problem_id": self.problem_id, "parent_hash": self.parent_hash, "code": self.code,
                "feedback": self.feedback, "speedup": self.speedup}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "StartState":
        """Raises ValueError naming the first missing or mistyped field."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a row must be a JSON object, not {type(d).__name__}")
        for name in FIELDS:
            if not isinstance(d.get(name), str):
                raise ValueError(f"field {name!r} is missing or not a string")
        speedup = d.get("speedup")
        if speedup is not None and (isinstance(speedup, bool) or not isinstance(speedup, (int, float))):
            raise ValueError(f"field 'speedup' is {speedup!r}, not a number or null")
        return cls(d["problem_id"], d["parent_hash"], d["code"], d["feedback"], None if speedup is None else float(speedup))


def read_start_states(path: str | Path) -> list[StartState]:
    """Every start state of a `start_states.jsonl` (blank lines skipped); a bad row is `MalformedInput` with file:line."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFound(f"no start states file {path}", "rerun the data stage with `data.sources` including evolution")
    fix = f"fix or delete line {{n}} of {path}, or regenerate it with the data stage (data.sources: [..., evolution])"
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(StartState.from_dict(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise MalformedInput(f"{path}:{n} is not JSON ({exc.msg})", fix.format(n=n)) from None
        except ValueError as exc:
            raise MalformedInput(f"{path}:{n} is not a start state: {exc}", fix.format(n=n)) from None
    return out
