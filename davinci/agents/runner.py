"""The multi-turn episode runner: selection -> policy turns -> summary, batched across a group of problems.

For each problem and each of its `group_size` samples (the group of the advantage estimators):
1. Selection: BM25 top-`skills.bm25_top_k` skills of the library (`BM25Retriever` over admitted skills);
   when `skills.rerank` and there are >= 2 candidates, the backbone reranks them (`selection_messages`,
   parsed by `parse_rerank`; an unparsable answer falls back to the BM25 order and counts as a parse
   failure). The first `skills.select_k` become the policy's skills.
2. Policy turns t = 0..T-1: `policy_messages` (turn t > 0 adds the last attempt and the evaluator's
   feedback; a group given an RL start state (`starts`, see `starts.py`) already has the parent program
   and its feedback as that attempt on turn 0, as a multi-turn continuation would); code extracted by
   `extract_code` (no code = parse failure, no evaluation, and the next prompt says so); all candidates
   of a turn are evaluated in one `evaluate_fn` call. An episode stops early per `agents.stop_when`
   (never / correct / fast: correct with speedup >= `agents.stop_speedup`).
3. Summary: for each problem, its best `agents.summaries_per_problem` solved episodes (highest speedup
   first) summarize their best turn into a skill JSON, parsed by `parse_skill_json` with the episode's own
   (problem, kernel) as the skill's example; rejections keep their reason.

Every stage generates for all live episodes in one backend call (the backend batches), so a group costs
one call per stage, not one per episode. Overlap (`agents.overlap_eval`): when the backend streams its
batches (`generate_batches`, the hf backend), a policy turn hands each finished batch's kernels to
`evaluate_fn` on a background thread while the next batch generates; the batches, seeds, outputs and
verdicts are those of the serial path, only the wall time shrinks. Sampling is seeded per (profile seed, epoch, stage); greedy for
eval. Metrics (parse failures per agent, tokens, generation/evaluation seconds) go to `logger` with
`step=epoch`, and `episode_metrics` computes the episode part for anyone holding episodes.

    episodes = run_episodes(problems, library, HFBackend(bb), profile, epoch=0, group_size=4,
                            greedy=False, evaluate_fn=lambda items: evaluate_batch(items, profile.gym))
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from davinci.agents.episode import Episode, Generation, Turn
from davinci.agents.parsers import CodeParse, extract_code
from davinci.agents.render import Attempt, policy_messages, selection_messages, summary_messages, template
from davinci.agents.starts import StartState
from davinci.errors import DavinciError
from davinci.kernelgym.result import EvalResult
from davinci.llm.types import GenerationBackend, GenOutput, Message, Sampling
from davinci.skills import BM25Retriever, Example, Skill, SkillProvenance, parse_rerank, parse_skill_json
from davinci.tracking import MetricLogger
from davinci.types import Candidate, Problem, Provenance

EvaluateFn = Callable[[Sequence[tuple[Problem, Candidate]]], Sequence[Any]]
SUMMARY_STAGE = 999  # seed offset of the summary stage (selection = 0, turn t = t + 1)


@dataclass
class _Draft:
    """An episode while it is being built (mutable; frozen into an `Episode` at the end)."""

    problem: Problem
    episode_id: str
    sample_index: int
    candidates: list[Skill] = field(default_factory=list)
    selected: list[Skill] = field(default_factory=list)
    selection: Generation | None = None
    turns: list[Turn] = field(default_factory=list)
    history: list[Attempt] = field(default_factory=list)
    done: bool = False
    summary: Generation | None = None
    skill_candidate: dict | None = None
    skill_rejection: str | None = None
    start: StartState | None = None  # the RL start state it begins from (its parent is the first history entry)

    def freeze(self, epoch: int) -> Episode:
        return Episode(
            episode_id=self.episode_id,
            problem_id=self.problem.id,
            epoch=epoch,
            sample_index=self.sample_index,
            selection=self.selection,
            bm25_ids=tuple(s.id for s in self.candidates),
            selected_ids=tuple(s.id for s in self.selected),
            turns=tuple(self.turns),
            summary=self.summary,
            skill_candidate=self.skill_candidate,
            skill_rejection=self.skill_rejection,
            start_state=self.start.parent_hash if self.start else None,
            start_speedup=self.start.speedup if self.start else None,
        )


def _draft(problem: Problem, epoch: int, sample: int, start: StartState | None) -> _Draft:
    """A new episode; one with a start state has the parent as its earlier attempt, so turn 0 continues it."""
    history = [start.attempt()] if start is not None else []
    return _Draft(problem, episode_id(problem.id, epoch, sample), sample, history=history, start=start)


@dataclass
class _Run:
    """What every stage needs: the backend, the profile's knobs, the epoch, and the clocks."""

    backend: GenerationBackend
    profile: Any
    epoch: int
    greedy: bool
    gen_seconds: float = 0.0
    eval_seconds: float = 0.0
    overlap: bool = False  # evaluate a finished generation batch while the next one generates

    def sampling(self, max_new_tokens: int, stage: int) -> Sampling:
        cfg = self.profile.agents
        seed = None if self.greedy else (int(self.profile.seed) * 7919 + self.epoch) * 1000 + stage
        return Sampling(max_new_tokens, cfg.temperature, cfg.top_p, greedy=self.greedy, seed=seed)

    def generate(self, prompts: Sequence[Sequence[Message]], sampling: Sampling) -> list[GenOutput]:
        start = time.perf_counter()
        outs = self.backend.generate(prompts, sampling) if prompts else []
        self.gen_seconds += time.perf_counter() - start
        return list(outs)

    def evaluate(self, fn: EvaluateFn, items: list[tuple[Problem, Candidate]]) -> list[EvalResult]:
        if not items:
            return []
        start = time.perf_counter()
        results = list(fn(items))
        self.eval_seconds += time.perf_counter() - start
        if len(results) != len(items):
            raise DavinciError(
                f"evaluate_fn returned {len(results)} results for {len(items)} candidates",
                "evaluate_fn must return one EvalResult per (problem, candidate), in order (kernelgym.evaluate_batch does)",
            )
        bad = [type(r).__name__ for r in results if not isinstance(r, EvalResult)]
        if bad:
            raise DavinciError(f"evaluate_fn returned {bad[0]}, not EvalResult", "return kernelgym EvalResults (evaluate_batch does)")
        return results


def library_skills(library: Any) -> list[Skill]:
    """Admitted skills of a `LibraryVersion`, or the skills of a plain sequence."""
    if library is None:
        return []
    if hasattr(library, "admitted"):
        return list(library.admitted())
    return list(library)


def episode_id(problem_id: str, epoch: int, sample: int) -> str:
    return f"{problem_id}@e{epoch}s{sample}"


# ---------------------------------------------------------------------- stages
def select_skills(drafts: list[_Draft], retriever: Any, run: _Run) -> None:
    """BM25 candidates, then the backbone's rerank; the first select_k become the policy's skills."""
    scfg = run.profile.skills
    hits: dict[str, list[Skill]] = {}
    for d in drafts:
        if d.problem.id not in hits:
            hits[d.problem.id] = [s for s, _ in retriever.search(d.problem.code, scfg.bm25_top_k)]
        d.candidates = hits[d.problem.id]
        d.selected = d.candidates[: scfg.select_k]
    todo = [d for d in drafts if scfg.rerank and len(d.candidates) >= 2]
    acfg = run.profile.agents
    prompts = [
        selection_messages(d.problem, d.candidates, guidance_chars=acfg.rerank_guidance_chars, code_chars=acfg.rerank_code_chars)
        for d in todo
    ]
    outs = run.generate(prompts, run.sampling(acfg.selection_max_new_tokens, 0))
    for d, prompt, out in zip(todo, prompts, outs):
        result = parse_rerank(out.text, [s.id for s in d.candidates])
        by_id = {s.id: s for s in d.candidates}
        # On a parse failure `result.order` is the BM25 order, so the fallback is BM25's top select_k.
        d.selected = [by_id[i] for i in result.order[: scfg.select_k]]
        d.selection = Generation("selection", tuple(prompt), out, result.ok)


def stops(turn: Turn, cfg: Any, start: StartState | None = None) -> bool:
    """The early-stop rule (`agents.stop_when`): does this turn end its episode? (rl.rewards absorbs it.) An
    episode that revises a start state stops only at an improvement on its parent (`rewards.improves`): the
    parent itself is already correct, and stopping on it would end the episode on an echo."""
    if cfg.stop_when == "never" or not turn.correct:
        return False
    from davinci.rl.rewards import Parent, improves

    parent = Parent.of(start.parent_hash, start.speedup) if start is not None else None
    if parent is not None:
        return improves(turn.result, parent)
    return cfg.stop_when == "correct" or (turn.speedup or 0.0) >= cfg.stop_speedup


def overlap_enabled(profile: Any, backend: Any) -> bool:
    """`agents.overlap_eval`: on, off, or auto (on when kernelgym runs on a Dask cluster); needs a streaming backend."""
    mode = profile.agents.overlap_eval
    gym = getattr(profile, "gym", None)
    wanted = mode == "on" or (mode == "auto" and gym is not None and gym.cluster != "local")
    return wanted and callable(getattr(backend, "generate_batches", None))


def _candidate(d: _Draft, parse: CodeParse, index: int, run: _Run) -> Candidate | None:
    if not (parse.ok and parse.code is not None):
        return None
    return Candidate(d.problem.id, parse.code, parse.backend or run.profile.agents.backend, Provenance(d.episode_id, run.epoch, index, "policy"))


def _serial(live: list[_Draft], prompts: list, sampling: Sampling, index: int, evaluate_fn: EvaluateFn, run: _Run) -> tuple[list, list, list, list]:
    """Generate every prompt, then evaluate every candidate in one call."""
    outs = run.generate(prompts, sampling)
    parses = [extract_code(o.text) for o in outs]
    cands = [_candidate(d, p, index, run) for d, p in zip(live, parses)]
    found = iter(run.evaluate(evaluate_fn, [(d.problem, c) for d, c in zip(live, cands) if c is not None]))
    results = [next(found) if c is not None else None for c in cands]
    return outs, parses, cands, results


class _EvalThread:
    """One daemon thread that evaluates submitted batches in order. A daemon, so neither an error in
    generation nor Ctrl-C ever waits for an evaluation in flight (a Dask batch can take minutes); each
    batch's outcome, result or exception, lands in its Future."""

    def __init__(self, run: _Run, evaluate_fn: EvaluateFn) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._run, self._fn = run, evaluate_fn
        threading.Thread(target=self._loop, name="overlap-eval", daemon=True).start()

    def submit(self, items: list) -> Future:
        fut: Future = Future()
        self._jobs.put((fut, items))
        return fut

    def close(self) -> None:
        self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fut, items = job
            if not fut.set_running_or_notify_cancel():  # cancelled while queued
                continue
            try:
                fut.set_result(self._run.evaluate(self._fn, items))
            except BaseException as exc:  # handed to the turn through the Future
                fut.set_exception(exc)


def _failed(pending: list[tuple[list[int], Future]]) -> BaseException | None:
    return next((f.exception() for _, f in pending if f.done() and not f.cancelled() and f.exception()), None)


def _overlapped(live: list[_Draft], prompts: list, sampling: Sampling, index: int, evaluate_fn: EvaluateFn, run: _Run) -> tuple[list, list, list, list]:
    """Generate batch by batch; each batch's candidates go to the evaluator thread as soon as it finishes. A
    failed evaluation stops the turn at the next batch boundary, with its own error."""
    n = len(live)
    outs: list[Any] = [None] * n
    parses: list[Any] = [None] * n
    cands: list[Candidate | None] = [None] * n
    results: list[EvalResult | None] = [None] * n
    pending: list[tuple[list[int], Future]] = []
    worker = _EvalThread(run, evaluate_fn)
    try:
        batches = iter(run.backend.generate_batches(prompts, sampling) if prompts else [])
        while (error := _failed(pending)) is None:
            start = time.perf_counter()
            batch = next(batches, None)
            run.gen_seconds += time.perf_counter() - start
            if batch is None:
                break
            for i, out in batch:
                outs[i], parses[i] = out, extract_code(out.text)
                cands[i] = _candidate(live[i], parses[i], index, run)
            todo = [i for i, _ in batch if cands[i] is not None]
            if todo:
                pending.append((todo, worker.submit([(live[i].problem, cands[i]) for i in todo])))
        if error is not None:
            raise error
        for todo, fut in pending:
            for i, r in zip(todo, fut.result()):
                results[i] = r
    finally:
        for _, fut in pending:
            fut.cancel()  # queued batches never start after an error or Ctrl-C (a running one cannot be stopped)
        worker.close()
    return outs, parses, cands, results


def policy_turn(drafts: list[_Draft], index: int, evaluate_fn: EvaluateFn, run: _Run) -> None:
    """Turn `index` for every live episode: generate, extract code, evaluate (overlapped or in one batch), record."""
    cfg = run.profile.agents
    live = [d for d in drafts if not d.done]
    prompts = [
        policy_messages(
            d.problem, d.selected, d.history, backend=cfg.backend, history_window=cfg.history_window, skill_chars=cfg.skill_chars
        )
        for d in live
    ]
    step = _overlapped if run.overlap else _serial
    outs, parses, cands, results = step(live, prompts, run.sampling(cfg.max_new_tokens, index + 1), index, evaluate_fn, run)
    for d, prompt, out, parse, cand, result in zip(live, prompts, outs, parses, cands, results):
        turn = Turn(index, Generation("policy", tuple(prompt), out, parse.ok), cand, result)
        d.turns.append(turn)
        feedback = result.feedback if result is not None else template("policy_noparse").template
        d.history.append(Attempt(cand.code if cand else None, out.text, feedback, turn.correct))
        d.done = stops(turn, cfg, d.start)


def _summary_drafts(drafts: list[_Draft], per_problem: int) -> list[_Draft]:
    """Per problem, its solved episodes ordered by best-turn speedup (then sample index), capped."""
    chosen: list[_Draft] = []
    by_problem: dict[str, list[_Draft]] = {}
    for d in drafts:
        by_problem.setdefault(d.problem.id, []).append(d)
    for group in by_problem.values():
        best = [(d, d.freeze(0).best_turn()) for d in group]
        solved = [(d, t) for d, t in best if t is not None and t.correct]
        ranked = sorted(solved, key=lambda x: (-(x[1].speedup or 0.0), x[0].sample_index))
        chosen.extend(d for d, _ in (ranked[:per_problem] if per_problem > 0 else ranked))
    return chosen


def summarize(drafts: list[_Draft], run: _Run) -> None:
    """Summary of each chosen solved episode's best turn -> candidate skill (or the rejection reason)."""
    cfg = run.profile.agents
    todo = _summary_drafts(drafts, cfg.summaries_per_problem)
    pairs = [(d, t, t.candidate) for d, t in ((d, d.freeze(run.epoch).best_turn()) for d in todo) if t and t.correct and t.candidate]
    prompts = [summary_messages(d.problem, c.code, d.selected, result=t.result, backend=c.backend) for d, t, c in pairs]
    outs = run.generate(prompts, run.sampling(cfg.summary_max_new_tokens, SUMMARY_STAGE))
    for (d, _, cand), prompt, out in zip(pairs, prompts, outs):
        provenance = SkillProvenance("summary", episode_id=d.episode_id, epoch=run.epoch, problem_id=d.problem.id)
        parsed = parse_skill_json(out.text, provenance, example=Example(d.problem.code, cand.code))
        ok = isinstance(parsed, Skill)
        d.summary = Generation("summary", tuple(prompt), out, ok)
        if ok:
            d.skill_candidate = parsed.to_dict()
        else:
            d.skill_rejection = f"{parsed.reason} (field {parsed.field})" if parsed.field else parsed.reason


# ---------------------------------------------------------------------- entry point
def run_episodes(
    problems: Sequence[Problem],
    library: Any,
    backend: GenerationBackend,
    profile: Any,
    *,
    epoch: int,
    group_size: int,
    greedy: bool,
    evaluate_fn: EvaluateFn,
    retriever: Any = None,
    logger: MetricLogger | None = None,
    starts: Mapping[str, StartState] | None = None,
) -> list[Episode]:
    """Episodes for every problem x group sample, in (problem, sample) order. `starts` (problem id -> start
    state): every sample of that problem's group begins from it (one prompt per group, so the group baseline
    compares answers to the same prompt); the rest begin from scratch."""
    starts = starts or {}
    drafts = [_draft(p, epoch, g, starts.get(p.id)) for p in problems for g in range(group_size)]
    run = _Run(backend, profile, epoch, greedy, overlap=overlap_enabled(profile, backend))
    skills = library_skills(library)
    if retriever is None and skills:
        retriever = BM25Retriever(skills)
    if retriever is not None:
        select_skills(drafts, retriever, run)
    for index in range(profile.agents.turns):
        if all(d.done for d in drafts):
            break
        policy_turn(drafts, index, evaluate_fn, run)
    if profile.agents.summarize:
        summarize(drafts, run)
    episodes = [d.freeze(epoch) for d in drafts]
    if logger is not None:
        metrics = episode_metrics(episodes)
        metrics.update({"agents/gen_seconds": run.gen_seconds, "agents/eval_seconds": run.eval_seconds})
        logger.log_metrics(metrics, step=epoch)
    return episodes


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Parse failures and calls per agent, tokens generated, solve rates, skill candidates (all floats)."""
    gens = [g for e in episodes for g in e.generations()]
    m: dict[str, float] = {"agents/episodes": float(len(episodes))}
    calls = Counter(g.agent for g in gens)
    fails = Counter(g.agent for g in gens if not g.parse_ok)
    for agent in ("selection", "policy", "summary"):
        m[f"agents/{agent}/calls"] = float(calls[agent])
        m[f"agents/{agent}/parse_failures"] = float(fails[agent])
        m[f"agents/{agent}/tokens"] = float(sum(len(g.output.response_ids) for g in gens if g.agent == agent))
    m["agents/tokens_generated"] = float(sum(len(g.output.response_ids) for g in gens))
    m["agents/truncated_generations"] = float(sum(g.output.finish_reason == "length" for g in gens))
    n = max(1, len(episodes))
    m["agents/solved_rate"] = sum(e.solved for e in episodes) / n
    m["agents/first_turn_correct_rate"] = sum(bool(e.turns) and e.turns[0].correct for e in episodes) / n
    m["agents/turns_mean"] = sum(len(e.turns) for e in episodes) / n
    m["agents/skill_candidates"] = float(sum(e.skill_candidate is not None for e in episodes))
    m["agents/skill_rejections"] = float(sum(e.skill_rejection is not None for e in episodes))
    return m
