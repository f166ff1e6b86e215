"""Evolutionary search for one problem (Kernel-Smith style): seed, then per generation select parents from the
archive, propose children (mutation or crossover by the mutator), evaluate them in one kernelgym batch, and
offer each correct child to the archive.

Choices:
- Generation 0 is the population: the given kernels, else the mutator's seeds. Generations 1..N are children.
- Budgets (`EvolveConfig`): generations, distinct evaluations (counted across resumes), wall time (summed
  over finished generations across resumes); the first one reached stops the run (`EvolveResult.stopped_by`),
  checked before each generation after the population (generation 0 always runs).
- Parents come from the archive (rank-weighted); while the archive is empty (nothing correct yet) they come
  from the last generation's programs, so a mutator can repair them.
- Everything is persisted per generation (`state.py`): a rerun in the same folder reuses the proposals of
  a generation it had started and evaluates only code hashes it has no verdict for. The archive is rebuilt
  by replaying the insertions in order, so a resumed run ends with the same archive as an uninterrupted one.

    result = run_evolution(problem, cfg, mutator, lambda items: evaluate_batch(items, gym), out_dir)
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from davinci.errors import DavinciError
from davinci.evolve.archive import ArchiveEntry, best, code_features, insert, select_parents
from davinci.evolve.config import EvolveConfig
from davinci.evolve.mutators import MutationRequest, Mutator
from davinci.evolve.revisions import Revision, kept_revisions
from davinci.evolve.state import EvolveState, Proposal, Verdict
from davinci.types import Candidate, Problem, Provenance

EvaluateBatch = Callable[[list[tuple[Problem, Candidate]]], list[Any]]


@dataclass(frozen=True)
class EvolveResult:
    problem: Problem
    archive: tuple[ArchiveEntry, ...]
    entries: tuple[ArchiveEntry, ...]  # every evaluated program, first proposal of each code hash
    generations_done: int
    evaluations: int  # distinct programs evaluated, across resumes
    new_evaluations: int  # evaluated by this call
    stopped_by: str
    revisions: tuple[Revision, ...]

    @property
    def best(self) -> ArchiveEntry | None:
        return best(self.archive)


def _entry(p: Proposal, v: Verdict) -> ArchiveEntry:
    return ArchiveEntry(p.code_hash, p.code, p.generation, p.parents, p.kind, v.correct,
                        v.speedup if v.correct else None, v.ci_low if v.correct else None,
                        v.ci_high if v.correct else None, v.feedback, code_features(p.code))


def _replay_archive(state: EvolveState, cfg: EvolveConfig, upto: int) -> tuple[tuple[ArchiveEntry, ...], list[ArchiveEntry]]:
    """(archive, evaluated entries) after generations 0..upto, by replaying insertions in proposal order."""
    archive: tuple[ArchiveEntry, ...] = ()
    entries: list[ArchiveEntry] = []
    seen: set[str] = set()
    for gen in sorted(g for g in state.proposals if g <= upto):
        for p in state.proposals[gen]:
            v = state.verdicts.get(p.code_hash)
            if v is None or p.code_hash in seen:
                continue
            seen.add(p.code_hash)
            entry = _entry(p, v)
            entries.append(entry)
            archive = insert(archive, entry, cfg.archive_size, cfg.diversity_slots)
    return archive, entries


def _seed_proposals(problem: Problem, cfg: EvolveConfig, mutator: Mutator, kernels: Sequence[str]) -> list[Proposal]:
    codes = list(kernels) if kernels else mutator.seeds(problem, cfg.population)
    if not codes:
        raise DavinciError(f"no starting programs for {problem.id}",
                           "pass --kernel FILE, add seed rows to the replay file, or use a policy that answers")
    return [Proposal(0, i, "seed", (), c) for i, c in enumerate(codes[: max(cfg.population, len(kernels))])]


def _child_proposals(problem: Problem, cfg: EvolveConfig, mutator: Mutator, gen: int,
                     archive: Sequence[ArchiveEntry], entries: Sequence[ArchiveEntry], known: set[str]) -> list[Proposal]:
    rng = random.Random(cfg.seed * 1_000_003 + gen)
    last = max((e.generation for e in entries), default=-1)
    pool = list(archive) or [e for e in entries if e.generation == last]
    if not pool:
        return []
    n = cfg.children_per_generation
    parents = select_parents(pool, n, rng)
    requests = []
    for i, parent in enumerate(parents):
        other = None
        if len(pool) > 1 and rng.random() < cfg.crossover_rate:
            other = rng.choice([e for e in pool if e.code_hash != parent.code_hash])
        examples = tuple(e for e in archive if e.code_hash not in (parent.code_hash, other and other.code_hash))[: cfg.archive_examples]
        requests.append(MutationRequest(problem, parent, other, examples, (gen - 1) * n + i, frozenset(known)))
    out: list[Proposal] = []
    for req, code in zip(requests, mutator.propose(requests)):  # later requests may repeat earlier children
        if not code or Proposal(0, 0, "", (), code).code_hash in known:
            continue
        kind, parents_ = ("crossover", (req.parent.code_hash, req.other.code_hash)) if req.other else ("mutation", (req.parent.code_hash,))
        out.append(Proposal(gen, req.index, kind, parents_, code))
        known.add(out[-1].code_hash)
    return out


def _evaluate(problem: Problem, proposals: Sequence[Proposal], state: EvolveState, evaluate: EvaluateBatch, budget: int | None) -> int:
    todo, seen = [], set()
    for p in proposals:
        if p.code_hash not in state.verdicts and p.code_hash not in seen:
            seen.add(p.code_hash)
            todo.append(p)
    if budget is not None:
        todo = todo[: max(0, budget)]
    if not todo:
        return 0
    items = [(problem, Candidate(problem.id, p.code, "triton", Provenance(agent=f"evolve:{p.kind}", epoch=p.generation, turn=p.index)))
             for p in todo]
    results = evaluate(items)
    state.add_verdicts([Verdict.from_result(p.code_hash, r) for p, r in zip(todo, results)])
    return len(todo)


def _stop_reason(cfg: EvolveConfig, state: EvolveState, gen: int) -> str:
    if gen > cfg.generations:
        return "generations"
    if gen == 0:  # the population is always evaluated
        return ""
    if cfg.max_evaluations and len(state.verdicts) >= cfg.max_evaluations:
        return "evaluations"
    # (state.elapsed_s already holds every finished generation, this call's included; the wall time since
    # the last one finished is what it does not hold)
    if cfg.wall_time_s and state.elapsed_s >= cfg.wall_time_s:
        return "wall_time"
    return ""


def run_evolution(problem: Problem, cfg: EvolveConfig, mutator: Mutator, evaluate: EvaluateBatch, out_dir: str | Path, *,
                  kernels: Sequence[str] = (), on_generation: Callable[[int], None] | None = None) -> EvolveResult:
    """Evolve `problem` in `out_dir` (resuming whatever is there); see the module docstring."""
    state = EvolveState.load(Path(out_dir))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    new, gen, stopped = 0, 0, ""
    while True:
        stopped = _stop_reason(cfg, state, gen) if gen not in state.done else ""
        if stopped:
            break
        if gen not in state.done:
            t0 = time.monotonic()
            new += _run_generation(problem, cfg, mutator, evaluate, state, gen, kernels)
            archive, _ = _replay_archive(state, cfg, gen)
            state.finish({"generation": gen, "archive": [e.code_hash for e in archive], "evaluated": len(state.verdicts),
                          "elapsed_s": round(time.monotonic() - t0, 6)})
            if on_generation is not None:
                on_generation(gen)
        gen += 1
    archive, entries = _replay_archive(state, cfg, gen)
    revisions = tuple(kept_revisions(problem, entries, cfg.revision_min_gain))
    return EvolveResult(problem, archive, tuple(entries), len(state.done), len(state.verdicts), new, stopped, revisions)


def _run_generation(problem: Problem, cfg: EvolveConfig, mutator: Mutator, evaluate: EvaluateBatch,
                    state: EvolveState, gen: int, kernels: Sequence[str]) -> int:
    proposals = state.proposals.get(gen)
    if proposals is None:
        if gen == 0:
            proposals = _seed_proposals(problem, cfg, mutator, kernels)
        else:
            archive, entries = _replay_archive(state, cfg, gen - 1)
            known = {p.code_hash for ps in state.proposals.values() for p in ps}
            proposals = _child_proposals(problem, cfg, mutator, gen, archive, entries, known)
        state.add_proposals(gen, proposals)
    budget = cfg.max_evaluations - len(state.verdicts) if cfg.max_evaluations else None
    return _evaluate(problem, proposals, state, evaluate, budget)
