"""The evolution loop with a scripted evaluator: budgets, resume after an interruption, no double evaluation,
replay files and the mutator registry. (The real-kernelgym runs are in test_evolve_kernelgym.py.)

The evaluator here reads `# speed=S` from a program: correct with speedup S and CI [S-0.05, S+0.05]; a
program with `# broken` is incorrect. The replay edits raise the speed step by step.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from davinci.errors import ConfigError, InputNotFound, MalformedInput, UnknownName
from davinci.evolve.config import EvolveConfig
from davinci.evolve.mutators import make_mutator
from davinci.evolve.outputs import fast_p_of_best, summary_of, write_outputs
from davinci.evolve.search import run_evolution
from davinci.types import Problem

PROBLEM = Problem("builtin/toy", "builtin", 1, "toy", "class Model: pass\n")
CFG = EvolveConfig(mutator="replay", population=2, generations=3, children_per_generation=2, crossover_rate=0.0, archive_size=3,
                   diversity_slots=1)


def _speed(code: str) -> float:
    return float(code.split("# speed=")[1].split()[0])


class Scripted:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, items):
        out = []
        for _, cand in items:
            self.seen.append(cand.code)
            s = _speed(cand.code)
            ok = "# broken" not in cand.code
            out.append(SimpleNamespace(correct=ok, flags=(), speedup=s, speedup_ci=(s - 0.05, s + 0.05),
                                       feedback=f"speedup {s}", error_kind=None if ok else "mismatch"))
        return out


def _replay(tmp_path, rows=None):
    rows = rows or [
        {"problem_id": PROBLEM.id, "role": "seed", "code": "# speed=0.5 a"},
        {"problem_id": PROBLEM.id, "role": "seed", "code": "# speed=0.4 b # broken"},
        {"problem_id": PROBLEM.id, "find": "speed=0.5", "replace": "speed=0.8"},
        {"problem_id": PROBLEM.id, "find": "speed=0.8", "replace": "speed=1.3"},
        {"problem_id": PROBLEM.id, "find": "speed=1.3", "replace": "speed=1.31"},
        {"problem_id": PROBLEM.id, "find": " a", "replace": " a2"},
    ]
    path = tmp_path / "replay.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(tmp_path, folder, evaluator, cfg=CFG, **kw):
    mutator = make_mutator(cfg, replay_path=str(_replay(tmp_path)))
    return run_evolution(PROBLEM, cfg, mutator, evaluator, tmp_path / folder, **kw)


def test_evolution_climbs_and_keeps_revisions(tmp_path) -> None:
    ev = Scripted()
    result = _run(tmp_path, "run", ev)
    assert result.stopped_by == "generations" and result.generations_done == 4
    assert result.best.speedup >= 1.3
    assert len(ev.seen) == len(set(ev.seen)) == result.evaluations
    # 0.5 -> 0.8 -> 1.3 are beyond the noise; 1.3 -> 1.31 is inside it
    kept = {(_speed(r.parent.code), _speed(r.child.code)) for r in result.revisions}
    assert (0.5, 0.8) in kept and (0.8, 1.3) in kept and (1.3, 1.31) not in kept
    files = write_outputs(result, tmp_path / "run")
    graph = json.loads((tmp_path / "run" / files["lineage"]).read_text())
    assert {n["id"] for n in graph["nodes"]} == {e.code_hash for e in result.entries}
    assert any(n["best"] for n in graph["nodes"]) and graph["edges"]
    assert (tmp_path / "run" / "lineage.svg").read_text().startswith("<svg")
    assert summary_of(result)["speedup"] == result.best.speedup
    assert fast_p_of_best([summary_of(result), {"correct": False, "speedup": None}])["fast_1"] == 0.5


def test_interrupted_run_resumes_to_the_same_archive_without_re_evaluating(tmp_path) -> None:
    whole = _run(tmp_path, "whole", Scripted())

    def stop_after_1(gen: int) -> None:
        if gen == 1:
            raise KeyboardInterrupt

    first = Scripted()
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "split", first, on_generation=stop_after_1)
    second = Scripted()
    resumed = _run(tmp_path, "split", second)
    assert not set(first.seen) & set(second.seen)                 # nothing evaluated twice
    assert [e.code_hash for e in resumed.archive] == [e.code_hash for e in whole.archive]
    assert resumed.evaluations == whole.evaluations == len(first.seen) + len(second.seen)
    again = Scripted()
    assert _run(tmp_path, "split", again).new_evaluations == 0 and again.seen == []


def test_budgets_stop_the_run(tmp_path) -> None:
    ev = Scripted()
    result = _run(tmp_path, "evals", ev, cfg=replace(CFG, max_evaluations=3))
    assert result.stopped_by == "evaluations" and len(ev.seen) == 3
    result = _run(tmp_path, "wall", Scripted(), cfg=replace(CFG, wall_time_s=1e-9))
    assert result.stopped_by == "wall_time" and result.generations_done == 1


class Clock:
    """A fake monotonic clock that only the evaluator moves: 0.2 s per batch."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_the_wall_budget_counts_each_generation_once(tmp_path, monkeypatch) -> None:
    # generations of 0.2 s against a 0.5 s budget: the stop comes once the sum passes 0.5 s (after the third
    # generation), not at half of it, which is where counting this call's generations twice stopped it
    import davinci.evolve.search as search

    clock, ev = Clock(), Scripted()

    def timed(items):
        clock.now += 0.2
        return ev(items)

    monkeypatch.setattr(search, "time", clock)
    result = _run(tmp_path, "wall2", timed, cfg=replace(CFG, generations=10, wall_time_s=0.5))
    assert result.stopped_by == "wall_time" and result.generations_done == 3


def test_given_kernels_seed_the_population(tmp_path) -> None:
    ev = Scripted()
    result = _run(tmp_path, "given", ev, kernels=["# speed=0.5 a"])
    assert ev.seen[0] == "# speed=0.5 a" and result.best.speedup > 1


def test_bad_replay_input_names_the_fix(tmp_path) -> None:
    with pytest.raises(InputNotFound, match="--replay"):
        make_mutator(CFG, replay_path=str(tmp_path / "nope.jsonl"))
    (tmp_path / "bad.jsonl").write_text("not json\n")
    with pytest.raises(MalformedInput, match="bad.jsonl:1"):
        make_mutator(CFG, replay_path=str(tmp_path / "bad.jsonl"))
    (tmp_path / "bad2.jsonl").write_text('{"problem_id": "x", "find": "a"}\n')
    with pytest.raises(MalformedInput, match="find/replace"):
        make_mutator(CFG, replay_path=str(tmp_path / "bad2.jsonl"))
    other = make_mutator(CFG, replay_path=str(_replay(tmp_path, [{"problem_id": "other", "role": "seed", "code": "x"}])))
    with pytest.raises(MalformedInput, match="no rows for problem builtin/toy"):
        other.seeds(PROBLEM, 1)
    with pytest.raises(ConfigError, match="replay"):
        make_mutator(CFG)
    with pytest.raises(UnknownName, match="policy, replay, rules"):
        make_mutator(CFG, name="genetic")
    with pytest.raises(ConfigError, match="--checkpoint"):
        make_mutator(CFG, name="policy")


def test_rules_mutator_moves_past_known_children() -> None:
    from davinci.evolve.archive import ArchiveEntry
    from davinci.evolve.mutators import MutationRequest
    from davinci.evolve.state import code_hash

    parent = ArchiveEntry("p", "BLOCK = 1024\n", 0, correct=True)
    rules = make_mutator(replace(CFG, mutator="rules"))
    assert rules.seeds(PROBLEM, 2) == []  # no reference solution
    known = frozenset(code_hash(c) for c in ("BLOCK = 2048\n", "BLOCK = 512\n"))
    # every single move is known: two moves (2048 -> 4096)
    assert rules.propose([MutationRequest(PROBLEM, parent, None, (), 0, known)]) == ["BLOCK = 4096\n"]
    assert rules.propose([MutationRequest(PROBLEM, parent, None, (), 1)]) == ["BLOCK = 512\n"]


def test_policy_mutator_prompts_with_parent_feedback_archive_and_partner() -> None:
    """A replay backend (recorded answers; no model is loaded here) behind the policy mutator."""
    from davinci.evolve.archive import ArchiveEntry
    from davinci.evolve.mutators import MutationRequest
    from davinci.llm.types import GenOutput

    class Backend:
        def __init__(self) -> None:
            self.prompts = []

        def generate(self, prompts, sampling):
            self.prompts.extend(prompts)
            return [GenOutput("```python\nclass ModelNew: pass  # speed=2.0\n```", (), (), (), "stop") if i == 0 else
                    GenOutput("no code here", (), (), (), "stop") for i, _ in enumerate(prompts)]

    backend = Backend()
    policy = make_mutator(replace(CFG, mutator="policy"), backend=backend)
    parent = ArchiveEntry("p", "# parent speed=1.0", 1, correct=True, feedback="correct; speedup 1.0")
    other = ArchiveEntry("o", "# partner speed=0.9", 1, correct=True)
    example = ArchiveEntry("e", "# example speed=0.8", 1, correct=True, speedup=0.8)
    out = policy.propose([MutationRequest(PROBLEM, parent, other, (example,), 0), MutationRequest(PROBLEM, parent, None, (), 1)])
    assert out[0].strip() == "class ModelNew: pass  # speed=2.0" and out[1] is None
    text = "\n".join(m["content"] for m in backend.prompts[0])
    assert all(s in text for s in ("# parent speed=1.0", "correct; speedup 1.0", "# example speed=0.8", "# partner speed=0.9"))
