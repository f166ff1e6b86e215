"""Episodes as MLflow traces: open one rollout in the MLflow UI and read what the model wrote, what the
evaluator said and what reward it got.

One trace per `Episode` (davinci.agents.episode), attached to its stage run (`run_id`, so the run page's
Traces tab lists it): a root span `episode <problem> e<epoch> s<sample>` (inputs: problem, epoch, sample;
outputs: solved, best speedup, reward), a `selection` span (BM25 candidates, the skills picked and the
model's answer), per policy turn a `policy turn N` LLM span (the last prompt message, the code written) with an
`evaluate` TOOL span under it (the verdict: compiled, correct, speedup, flags, the error line, the feedback
the model saw next), and a `summary` span (the candidate skill, or why there was none).

Choices:
- Written by the flows from the episodes files after an RL epoch or the eval task (the engine imports no
  MLflow); span times are when the trace was written, not when the episode ran.
- Sampled per profile (`tracking.trace_sample`), by a hash of the episode id: the same episodes on every
  resume, and the overhead stays a small share of a step (`benchmarks/trace_overhead.py` measures it).
- Long texts are clipped (`MAX_TEXT`) so a trace stays a few KB; the full episode is in the stage folder.
- Idempotent per run: a marker file next to the episodes says which runs already hold their traces.

    from artifacts.traces import log_episode_traces
    stats = log_episode_traces(store, run_id, episodes, sample=0.25, stage="rl", marker_dir=epoch_dir)
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from artifacts.tables import error_line

if TYPE_CHECKING:
    from artifacts.store import TrackingStore
    from davinci.agents.episode import Episode, Generation, Turn
    from davinci.kernelgym.result import EvalResult

MAX_TEXT = 4000


@dataclass(frozen=True)
class TraceStats:
    logged: int
    skipped: int
    seconds: float


def sampled(episode_id: str, rate: float) -> bool:
    """Deterministic: the same episode is in or out of the sample on every run."""
    if rate >= 1.0:
        return True
    bucket = int(hashlib.sha256(episode_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return bucket < rate


def _clip(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"\n... [{len(text) - MAX_TEXT} more characters]"


def _prompt(gen: "Generation") -> str:
    return _clip(gen.messages[-1]["content"]) if gen.messages else ""


def verdict(result: "EvalResult | None") -> dict[str, Any]:
    """The evaluate span's outputs from a turn's typed verdict (None: no code was extracted)."""
    if result is None:
        return {"evaluated": False, "error": "no code to evaluate"}
    return {"compiled": result.compiled, "correct": result.correct, "speedup": result.speedup,
            "flags": list(result.flags), "error": error_line(result.to_dict()), "feedback": _clip(result.feedback)}


def _export_to(tracking_uri: str) -> None:
    """Traces are exported to MLflow's process-wide tracking URI, not the client's: point it at the store.

    `mlflow.set_tracking_uri` also writes $MLFLOW_TRACKING_URI, which the project reads as the user's choice of
    store (`StoreLocation.resolve`): the variable is put back as it was, so nothing later in this process (another
    project home, a test, a notebook cell) is sent to this store."""
    import os

    import mlflow

    if mlflow.get_tracking_uri() != tracking_uri:
        before = os.environ.get("MLFLOW_TRACKING_URI")
        mlflow.set_tracking_uri(tracking_uri)
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before


class _TraceWriter:
    """Spans of one trace, written through `MlflowClient`'s explicit-id tracing API."""

    def __init__(self, store: "TrackingStore", run_id: str, name: str, inputs: dict[str, Any], tags: dict[str, str]):
        _export_to(store.location.tracking_uri)
        self.client = store.client
        root = self.client.start_trace(name, span_type="AGENT", inputs=inputs, tags=tags,
                                       experiment_id=store.experiment_id, run_id=run_id)
        self.trace_id, self.root = root.trace_id, root.span_id

    def span(self, name: str, kind: str, inputs: Any, outputs: Any, parent: str | None = None,
             attributes: dict[str, Any] | None = None) -> str:
        span = self.client.start_span(name, trace_id=self.trace_id, parent_id=parent or self.root, span_type=kind,
                                      inputs=inputs, attributes=attributes)
        self.client.end_span(self.trace_id, span.span_id, outputs=outputs)
        return span.span_id

    def end(self, outputs: dict[str, Any], ok: bool) -> str:
        self.client.end_trace(self.trace_id, outputs=outputs, status="OK" if ok else "ERROR")
        return self.trace_id


def _turn_spans(writer: _TraceWriter, turn: "Turn", reward: float | None) -> None:
    gen = turn.generation
    code = turn.candidate.code if turn.candidate is not None else None
    policy = writer.span(f"policy turn {turn.index}", "LLM", {"prompt": _prompt(gen)},
                         {"code": _clip(code) if code else None, "raw": None if code else _clip(gen.output.text)},
                         attributes={"parse_ok": gen.parse_ok, "finish_reason": gen.output.finish_reason,
                                     "reward": reward})
    writer.span("evaluate", "TOOL", {"code_chars": len(code or "")}, verdict(turn.result), parent=policy)


def log_episode_trace(store: "TrackingStore", run_id: str, episode: "Episode", stage: str,
                      rewards: Mapping[str, Any] | None = None) -> str:
    """One episode as one trace on `run_id`; returns the trace id."""
    best = episode.best_turn()
    scores = list((rewards or {}).get("turn_scores") or [])
    tags = {"stage": stage, "problem_id": episode.problem_id, "epoch": str(episode.epoch),
            "solved": str(episode.solved).lower(), "episode_id": episode.episode_id}
    writer = _TraceWriter(store, run_id, f"episode {episode.problem_id} e{episode.epoch} s{episode.sample_index}",
                          {"problem_id": episode.problem_id, "epoch": episode.epoch, "sample": episode.sample_index}, tags)
    if episode.selection is not None:
        writer.span("selection", "RETRIEVER", {"bm25_candidates": list(episode.bm25_ids)},
                    {"selected": list(episode.selected_ids), "answer": _clip(episode.selection.output.text)})
    for turn in episode.turns:
        _turn_spans(writer, turn, scores[turn.index] if turn.index < len(scores) else None)
    if episode.summary is not None or episode.skill_rejection:
        writer.span("summary", "LLM", {"prompt": _prompt(episode.summary) if episode.summary else ""},
                    {"skill": episode.skill_candidate, "rejected_because": episode.skill_rejection})
    outputs = {"solved": episode.solved, "best_turn": best.index if best else None,
               "best_speedup": best.speedup if best else None, "turn_scores": scores or None}
    return writer.end(outputs, ok=episode.solved)


def log_episode_traces(store: "TrackingStore", run_id: str, episodes: Sequence["Episode"], sample: float, stage: str,
                       rewards: Sequence[Mapping[str, Any] | None] = (), marker_dir: Path | None = None) -> TraceStats:
    """Trace the sampled episodes once per run (a marker in `marker_dir` remembers); never raises."""
    marker = marker_dir / f".traced-{run_id}" if marker_dir is not None else None
    if sample <= 0 or (marker is not None and marker.exists()):
        return TraceStats(0, len(episodes), 0.0)
    start, logged = time.perf_counter(), 0
    for i, episode in enumerate(episodes):
        if not sampled(episode.episode_id, sample):
            continue
        try:
            log_episode_trace(store, run_id, episode, stage, rewards[i] if i < len(rewards) else None)
            logged += 1
        except Exception:  # a trace is a view; a failed write must not fail the stage
            continue
    if marker is not None:
        marker.write_text(str(logged))
    return TraceStats(logged, len(episodes) - logged, time.perf_counter() - start)
