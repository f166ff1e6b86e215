"""`Evaluator`: warm lanes for one `GymConfig`, and the assembly of one `EvalResult` from one `Job`.

    with Evaluator(GymConfig(device="cpu")) as ev:
        r = ev.evaluate(problem, candidate, seed=0)
        rs = ev.evaluate_batch([(p, c), ...], progress=True)

`evaluate` never raises for anything the problem or the candidate does; a misconfigured `GymConfig`
(an unknown check name) raises `UnknownName` when the Evaluator is built. Seeds: the candidate's weights
come from `init_seed = f(problem, seed)` (the same rule as KernelBench: ModelNew must build its parameters
in the order Model does); trial inputs from `f(secret, problem, seed or random, trial)`, where the
secret is `DAVINCI_GYM_SECRET` or 16 random bytes per Evaluator and never leaves the supervisor.
"""

from __future__ import annotations

import os
import queue
import random
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Mapping, Sequence

from davinci.kernelgym import feedback as fb
from davinci.kernelgym import perf
from davinci.kernelgym.audit import unwatched_drop
from davinci.kernelgym.backend import detect_backend
from davinci.kernelgym.baselines import DiskCache, cache_key
from davinci.kernelgym.checks.runtime import runtime_backend
from davinci.kernelgym.checks import ADVISORY, resolve_checks, runtime_findings, static_findings
from davinci.kernelgym.config import GymConfig
from davinci.kernelgym.gpugate import GateBusy
from davinci.errors import DavinciError
from davinci.kernelgym.job import (BuildBusy, CandidateFailure, Job, ReferenceFailure, acquire_build_lock, build,
                                   cleanup, correctness, derive_seed, describe_exit, fork_twin, gather_evidence, gpu_phase,
                                   load_problem, log_tail, phase, probe_isolation, ref, account_pass, accounts)
from davinci.kernelgym.isolation import REQUIRED
from davinci.kernelgym.lane import Lane, WorkerDied
from davinci.kernelgym.problem import apply_shape_overrides
from davinci.kernelgym.result import EvalResult
from davinci.kernelgym.stats import ratio_ci, summarize
from davinci.types import Candidate, Problem

PROTOCOL_VERSION = "kernelgym/1"
_PROBE_CODE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1
def get_inputs():
    return [torch.rand(4096)]
def get_init_inputs():
    return []
"""
PROBE_PROBLEM = Problem(id="kernelgym/probe", source="builtin", level=0, name="probe", code=_PROBE_CODE)
PROBE_CANDIDATE = Candidate(problem_id="kernelgym/probe", backend="triton",
                            code=_PROBE_CODE.replace("class Model(", "class ModelNew("))


def resolve_device(device: str) -> str:
    """"cpu", or "cuda" when a GPU is visible; "none" when "cuda" was asked for and there is no GPU."""
    if device == "cpu":
        return "cpu"
    try:
        import torch

        available = torch.cuda.is_available()
    except Exception:
        available = False
    if device == "cuda":
        return "cuda" if available else "none"
    return "cuda" if available else "cpu"


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def resolve_cache_dir(cache_dir: str) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser().resolve()
    cache = os.environ.get("DAVINCI_CACHE_DIR")  # set by the CLI: <home>/.davinci/cache
    if cache:
        return Path(cache).expanduser().resolve() / "kernelgym"
    home = os.environ.get("DAVINCI_HOME")
    return (Path(home) / ".davinci" if home else Path.cwd() / ".davinci").resolve() / "kernelgym"


class IsolationMissing(DavinciError):
    """`gym.require_isolation` is on and a sandbox layer does not hold on this machine."""


class Evaluator:
    def __init__(self, config: GymConfig) -> None:
        self.cfg = config
        self.checks = resolve_checks(config.checks)
        self.device = resolve_device(config.device)
        self.gpus = gpu_count() if self.device == "cuda" else 0
        self.cache_root = resolve_cache_dir(config.cache_dir)
        self.cache = DiskCache(self.cache_root)
        self.secret = os.environ.get("DAVINCI_GYM_SECRET") or os.urandom(16).hex()
        self.lanes: list[Lane] = []
        self.layers: dict[str, Any] = {}   # the sandbox layers that held in the isolation probe
        self._free: queue.Queue[Lane] = queue.Queue()
        self._lock = threading.Lock()

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- lanes ---
    def lane_count(self) -> int:
        if self.device == "cuda":
            return max(1, self.cfg.workers or self.gpus)
        return max(1, self.cfg.workers or 2)

    def ensure_lanes(self, n: int) -> None:
        with self._lock:
            new = []
            while len(self.lanes) < min(n, self.lane_count()):
                i = len(self.lanes)
                gpu = (i % max(1, self.gpus)) if self.device == "cuda" else None
                lane = Lane(i, "cuda:0" if self.device == "cuda" else "cpu", gpu, self.cfg, self.cache_root)
                self.lanes.append(lane)
                new.append(lane)
            errors: list[BaseException] = []

            def start(lane: Lane) -> None:
                try:
                    lane.start()
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=start, args=(lane,)) for lane in new]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                for lane in new:
                    lane.close()
                    self.lanes.remove(lane)
                for exc in errors:  # the installation's problem, with its fix, as it is (whichever lane saw it)
                    if isinstance(exc, DavinciError):
                        raise exc
                raise WorkerDied(f"could not start an evaluation lane: {errors[0]}")
            if new and not self.layers:
                self.layers = probe_isolation(new[0])
                self._check_isolation()
            for lane in new:
                if lane.transport == "ipc" and self.cfg.transport == "auto":
                    self._probe_ipc(lane)
                self._free.put(lane)

    def _check_isolation(self) -> None:
        """`require_isolation`: every layer of isolation.REQUIRED held in the probe, or a clear error now."""
        missing = [layer for layer in REQUIRED if not self.layers.get(layer)]
        if self.cfg.require_isolation and missing:
            reasons = "; ".join(f"{k}: {v}" for k, v in (self.layers.get("errors") or {}).items())
            raise IsolationMissing(
                f"the candidate sandbox is missing layers {', '.join(missing)}" + (f" ({reasons})" if reasons else ""),
                "run the evaluator as root (a container's root needs CAP_SYS_ADMIN, e.g. docker --cap-add SYS_ADMIN "
                "--security-opt seccomp=unconfined), or allow unprivileged user namespaces for the namespace layers; "
                "or accept the missing layers with --set gym.require_isolation=false")

    def _probe_ipc(self, lane: Lane) -> None:
        """Evaluate a tiny known-good program over CUDA IPC; on failure the lane falls back to host copies."""
        r = evaluate_on(self, lane, PROBE_PROBLEM, PROBE_CANDIDATE, 0, None, measure=False)
        if not r.numerics_ok:
            lane.transport = "host"
            # the error's end says what failed (a traceback's last lines)
            lane.transport_note = f"CUDA IPC probe failed ({r.error_kind}: {r.error[-600:]}); using host copies"

    def close(self) -> None:
        with self._lock:
            for lane in self.lanes:
                lane.close()
            self.lanes = []
            self._free = queue.Queue()

    # --- evaluation ---
    def evaluate(self, problem: Problem, candidate: Candidate, *, seed: int | None = None,
                 shape_overrides: Mapping[str, int] | None = None) -> EvalResult:
        t0 = time.monotonic()
        if self.device == "none":
            return _simple_result(problem, candidate, "needs_gpu", "device='cuda' was requested but no GPU is "
                                  "visible; evaluate with device='cpu' (Triton interpreter) or on a GPU machine", t0)
        try:
            self.ensure_lanes(1)
        except Exception as exc:
            return _simple_result(problem, candidate, "internal", f"evaluator could not start: {exc}", t0)
        lane = self._free.get()
        try:
            return evaluate_on(self, lane, problem, candidate, seed, shape_overrides)
        finally:
            self._free.put(lane)

    def evaluate_batch(self, items: Sequence[tuple[Problem, Candidate]], *, progress: bool = False,
                       seed: int | None = None) -> list[EvalResult]:
        from davinci.kernelgym.batch import run_batch

        return run_batch(self, items, progress=progress, seed=seed)


def _simple_result(problem: Problem, candidate: Candidate, kind: str, message: str, t0: float,
                   device: str = "cpu") -> EvalResult:
    info = detect_backend(candidate.code, candidate.backend)
    verdict = {"needs_gpu": "needs a GPU", "internal": "evaluator error (not your fault)",
               "reference": "the problem itself failed"}.get(kind, kind)
    return EvalResult(problem_id=problem.id, candidate_hash=candidate.code_hash, backend=info.backend, compiled=False,
                      correct=False, numerics_ok=False, flags=(), error_kind=kind, error=message,
                      feedback=fb.render(verdict, detail=message), device=device,
                      timing_label="cuda" if device.startswith("NVIDIA") or "cuda" in device else "cpu",
                      level=problem.level, wall_s=time.monotonic() - t0)


def make_job(ev: Evaluator, lane: Lane, problem: Problem, candidate: Candidate, seed: int | None,
             overrides: Mapping[str, int] | None) -> Job:
    code = apply_shape_overrides(problem.code, overrides)
    public = seed if seed is not None else random.SystemRandom().getrandbits(62)
    init_seed = derive_seed("init", problem.code_hash, seed if seed is not None else 0) % (2 ** 31)
    trials = [derive_seed(ev.secret, "trial", problem.code_hash, public, t) for t in range(ev.cfg.correctness_trials)]
    return Job(lane=lane, problem=problem, candidate=candidate, cfg=ev.cfg, code=code,
               backend=detect_backend(candidate.code, candidate.backend), checks=ev.checks,
               key=cache_key("problem", code, init_seed), init_seed=init_seed, trial_seeds=trials,
               timing_seed=derive_seed(ev.secret, "timing", problem.code_hash, public) % (2 ** 40),
               cache_root=ev.cache_root, seed=seed)


def _run(ev: Evaluator, job: Job, measure: bool) -> None:
    """The evaluation's phases in order; each one's wall time lands in `details.phase_s`."""
    found = static_findings(job.checks, job.candidate.code, job.problem.code, job.backend)
    job.static = [f for f in found if f.check not in ADVISORY]
    job.advice = [f for f in found if f.check in ADVISORY]  # feedback only (checks/__init__.ADVISORY)
    if job.backend.backend == "cuda" and not job.lane.cuda:
        job.fail("needs_gpu", "this candidate builds CUDA kernels (load_inline); it needs a GPU. On the CPU only "
                              "Triton candidates run (interpreter)")
        return
    with phase(job, "setup"):
        load_problem(job)
        acquire_build_lock(job)  # evaluations of the same code take turns on its build folder (see there)
        job.child = job.lane.take_child()
    job.defer_profile = measure and not job.static  # it will be timed: keep the profiler out until then
    with phase(job, "build"):
        build(job)
    if not job.compiled:
        return
    # Other lanes on this GPU may run correctness beside ours, but never while one of them times (gpugate).
    with gpu_phase(job, "shared"):
        job.run_deadline = time.monotonic() + job.cfg.run_timeout_s
        with phase(job, "correctness"):
            correctness(job)
        with phase(job, "evidence"):
            if job.numerics_ok and measure and not job.static and perf.twin_wanted(job):
                fork_twin(job)  # the twin's device start overlaps the evidence phase
            if job.numerics_ok:
                gather_evidence(job)
    if not job.numerics_ok:
        return
    with phase(job, "accounting"):
        _accounting(job)  # before timing: a candidate that hangs when timed is still accounted for
    # Only the enabled checks' findings stop timing: evidence of a check left out of gym.checks stays evidence
    # (the accounting call runs for host_compute alone and still records torch_compute's evidence).
    found = runtime_findings(job.checks, _evidence(job))
    if measure and not job.static and not found and job.error_kind is None:
        with gpu_phase(job, "exclusive") as waited_s:
            job.run_deadline += waited_s  # the queue for the GPU is not the candidate's time
            job.phase_s["gpu_queue"] = waited_s
            with phase(job, "timing"):
                _timing(job)
        if job.perf.get("rounds") and not job.timing_incomplete and job.error_kind is None:
            with phase(job, "evidence"):
                gather_evidence(job)  # identities again: a patch made during timing shows up too


def _accounting(job: Job) -> None:
    found = job.evidence.torch_compute or job.evidence.host_compute
    # (with the determinism check on, trial 0's second call was the accounting call already)
    if job.error_kind is None and job.numerics_ok and accounts(job) and not found and not job.cfg.determinism_check:
        with gpu_phase(job, "shared"):
            job.run_deadline = max(job.run_deadline, time.monotonic() + min(60.0, job.cfg.run_timeout_s))
            account_pass(job)


def _timing(job: Job) -> None:
    """perf.timing; a candidate whose correctness held but whose timing ran out of time stays correct, with
    its timing marked incomplete (`details.timing_incomplete`), never a timeout verdict. If it ran out before the
    audit rounds, no time is reported (`assemble`): a candidate must not dodge them by hanging in a late round."""
    try:
        perf.timing(job)
    except CandidateFailure as f:
        if f.kind != "timeout":
            raise
        job.timing_incomplete = f.message
    finally:  # the scored requests' kernel share against the accounting call's: needs no audit round to have run
        job.evidence.watched = job.evidence.watched or unwatched_drop(job.acct_share_raw,
                                                                      job.evidence.scored_kernel_share)


def _evidence(job: Job):
    ev = job.evidence
    for what in ("rewrote", "depends"):  # the launch replays (replay.py): the accounting call against unwatched ones
        ev.watched = ev.watched or unwatched_drop(job.acct_replay.get(what), job.unwatched_replay.get(what), what)
    ev.backend, ev.kernel_names, ev.cuda = job.backend.backend, job.backend.kernel_names, job.lane.cuda
    ev.coverage, ev.min_coverage = _coverage(job), job.cfg.min_kernel_coverage
    return ev


def evaluate_on(ev: Evaluator, lane: Lane, problem: Problem, candidate: Candidate, seed: int | None,
                overrides: Mapping[str, int] | None, *, measure: bool | None = None) -> EvalResult:
    t0 = time.monotonic()
    try:
        job = make_job(ev, lane, problem, candidate, seed, overrides)
    except Exception as exc:
        return _simple_result(problem, candidate, "reference", f"bad shape override: {exc}", t0)
    exit_note = ""
    try:
        _run(ev, job, ev.cfg.measure_performance if measure is None else measure)
    except CandidateFailure as f:
        status = lane.end_child(job.child, grace=0.5 if f.kind in ("crash", "compile") else 0.0) if job.child else {}
        job.child = None
        if f.channel:
            job.evidence.channel = f.channel
        kind = "compile" if f.kind == "compile" else f.kind
        tail = fb.excerpt(fb.strip_paths(log_tail(job), str(job.job_dir)), 8)
        exit_note = describe_exit(status)
        job.fail(kind, f"{f.message}; process {exit_note}" + (f"\n{tail}" if tail else ""))
    except ReferenceFailure as f:
        job.fail("reference", f"the reference program failed: {fb.excerpt(str(f), 6)}")
    except (WorkerDied, BuildBusy, GateBusy) as f:
        job.fail("internal", str(f))
    except Exception as exc:
        job.fail("internal", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-2000:])
    finally:
        with phase(job, "cleanup"):
            _finish(lane, job)
    try:
        return assemble(ev, job, time.monotonic() - t0)
    except Exception as exc:
        return _simple_result(problem, candidate, "internal", f"result assembly failed: {exc!r}", t0)


def _finish(lane: Lane, job: Job) -> None:
    try:
        for child in (job.child, job.twin):
            if child is not None:
                lane.end_child(child)
        job.twin = None
        if job.lane.ref is not None and job.key in job.lane.problems:
            # every trial and kept output this evaluation may have left (the accounting call's too): the
            # reference worker outlives the candidate and would otherwise keep its device memory mapped
            ref(job, {"op": "drop", "trials": [f"in{t}" for t in range(job.cfg.correctness_trials)] + ["acct"],
                      "timing": True, "kept": [f"{p}{t}" for p in "ab" for t in range(job.cfg.correctness_trials)] + ["acct"]})
    except Exception:
        pass
    try:
        lane.sweep()  # escaped descendants die before the build folder is taken back and unlocked
    finally:
        cleanup(job)


def _timing_block(ev: Evaluator, job: Job) -> dict[str, Any]:
    samples = job.perf.get("samples") or {}
    cand = samples.get("cand") or []
    if not cand:
        return {}
    label = "cuda" if job.lane.cuda else "cpu"
    runtime = summarize(cand, host=job.evidence.cand_host_ms, label=label, seed=job.timing_seed)
    base_samples = {k: v for k, v in samples.items() if k != "cand" and v}
    for name in perf.enabled_baselines(job):
        if name not in base_samples:
            cached = perf.cached_baseline(job, ev.cache, name)
            if cached:
                base_samples[name] = cached
    baselines = {k: summarize(v, label=label, seed=job.timing_seed) for k, v in base_samples.items()}
    speedups = {k: ratio_ci(v, cand, seed=job.timing_seed) for k, v in base_samples.items()}
    sol = perf.speed_of_light(job, runtime.median_ms, ev.cache)
    return {"runtime": runtime, "baselines": baselines, "speedups": speedups, "sol": sol, "label": label}


def _coverage(job: Job) -> float | None:
    names = job.backend.kernel_names
    if not names or not job.compiled:
        return None
    kernels = job.evidence.profiler_kernels
    if kernels:
        from davinci.kernelgym.backend import kernel_matches

        own = names + tuple(sorted(job.evidence.launched))  # declared, or launched through the Triton runtime
        total = sum(us for _, us in kernels)
        mine = sum(us for name, us in kernels if kernel_matches(name, own))
        return mine / total if total > 0 else None
    if not job.lane.cuda and job.forward_ms > 0:
        return min(1.0, job.kernel_ms / job.forward_ms)
    return None


_VERDICTS = {"compile": "compile error", "runtime": "runtime error", "timeout": "timeout", "crash": "crash",
             "needs_gpu": "needs a GPU", "reference": "the problem itself failed (not your fault)",
             "internal": "evaluator error (not your fault)"}


def _verdict(job: Job, flags: dict[str, str], correct: bool) -> str:
    if correct:
        return "correct"
    if job.error_kind == "mismatch":
        where = f"trial {job.trials_run}/{job.cfg.correctness_trials}"
        return f"incorrect (mismatch in {where}" + (f", {job.failed_dist} inputs)" if job.failed_dist else ")")
    if job.error_kind is None and flags:
        return "flagged as a hack" + (" (the outputs were right)" if job.numerics_ok else "")
    return _VERDICTS.get(job.error_kind or "", job.error_kind or "incorrect")


def _safe_timing(ev: Evaluator, job: Job, notes: list[str]) -> dict[str, Any]:
    if not job.perf.get("samples") or job.error_kind is not None:
        return {}
    try:
        return _timing_block(ev, job)
    except (ReferenceFailure, WorkerDied, GateBusy) as exc:
        notes.append(f"note: a baseline could not be measured ({str(exc)[:200]})")
        return {}


def assemble(ev: Evaluator, job: Job, wall_s: float) -> EvalResult:
    notes: list[str] = [f"advice ({f.check}): {f.reason}" for f in job.advice]
    if job.timing_incomplete:
        notes.append(f"note: timing ran out before it finished ({job.timing_incomplete}); " + (
            "the speedup is from the rounds that completed" if job.audited else "it ran out before the audit rounds "
            "(audit.py), so no time is reported: a speedup stands only on rounds that were audited"))
    timing = _safe_timing(ev, job, notes) if job.audited or not job.timing_incomplete else {}
    flags: dict[str, str] = {}
    for f in job.static + runtime_findings(job.checks, _evidence(job)):
        flags.setdefault(f.check, f.reason)
    correct = job.numerics_ok and not flags and job.error_kind is None
    kind, error = job.error_kind, job.error
    if kind is None and flags:
        kind, error = "hack", "; ".join(f"{k}: {v}" for k, v in flags.items())
    speedups = timing.get("speedups", {})
    coverage = _coverage(job)
    lane, info = job.lane, job.lane.info
    shown_error = fb.excerpt(fb.strip_paths(error, str(job.job_dir)), 14) if kind not in (None, "mismatch", "hack") else ""
    text = fb.render(
        _verdict(job, flags, correct), detail=shown_error or (error if kind == "mismatch" and not job.failure else ""),
        comparison=job.failure,
        timing=fb.describe_timing(timing.get("label", "cpu"), timing.get("runtime"), timing.get("baselines", {}), speedups),
        sol=timing.get("sol"), coverage=coverage if job.numerics_ok else None,
        kernels=tuple(sorted(job.evidence.launched)), flags=flags, notes=notes)
    eager, comp = speedups.get("eager", (None, None)), speedups.get("compile", (None, None))
    worst = job.failure or job.worst
    return EvalResult(
        problem_id=job.problem.id, candidate_hash=job.candidate.code_hash,
        backend=runtime_backend(job.evidence, job.backend.backend), compiled=job.compiled, correct=correct, numerics_ok=job.numerics_ok, flags=tuple(flags), error_kind=kind,
        error=error, feedback=text, device=str(info.get("device", lane.device)),
        timing_label="cuda" if lane.cuda else "cpu", level=job.problem.level, flag_reasons=flags,
        trials_passed=job.trials_passed, trials_run=job.trials_run,
        max_abs_error=worst["max_abs_error"] if worst else None, max_rel_error=worst["max_rel_error"] if worst else None,
        runtime=timing.get("runtime"), baselines=timing.get("baselines", {}), speedup=eager[0], speedup_ci=eager[1],
        speedup_compile=comp[0], speedup_compile_ci=comp[1], sol_percent=timing.get("sol"), kernel_coverage=coverage,
        kernels_launched=tuple(sorted(job.evidence.launched)), seed=job.seed, wall_s=wall_s,
        shape_overrides={k: int(v) for k, v in (job.problem.code != job.code and _overrides(job) or {}).items()},
        versions={"torch": str(info.get("torch", "")), "triton": str(info.get("triton", "")),
                  "cuda": str(info.get("cuda", "")), "protocol": PROTOCOL_VERSION, "transport": lane.transport,
                  "l2_reset": str(info.get("l2_reset", ""))},
        details={"sandbox": job.sandbox, "distributions": list(job.cfg.distributions), "failed_dist": job.failed_dist,
                 "timing_rounds": job.perf.get("rounds", 0), "rotation": job.perf.get("rotation", 0),
                 "timing_sources": job.perf.get("sources", {}), "allowance_ms": job.perf.get("allowance_ms"),
                 "eager_timer": job.perf.get("eager_timer"), "timing_incomplete": job.timing_incomplete or None,
                 "wall_floor_ratios": [round(r, 3) for r in job.evidence.wall_floor_ratios],
                 "wall_excess_ms": [round(e, 3) for e in job.evidence.wall_excess_ms],
                 "advice": {f.check: f.reason for f in job.advice},
                 # the profiled round's device time per kernel or copy (us), the harness's own left out
                 "kernels": [[n, round(us, 1)] for n, us in (job.evidence.profiler_kernels or [])[:12]],
                 "work": job.info.get("work"), "transport_note": lane.transport_note,
                 "hidden_work_error": job.hidden_work_error or None,
                 "scored_kernel_share": job.evidence.scored_kernel_share,
                 "phase_s": {k: round(v, 3) for k, v in job.phase_s.items()},
                 "round_trips": {k: [int(n), round(sec, 4)] for k, (n, sec) in job.round_trips.items()},
                 "runs_ms": job.runs_ms},
    )


def _overrides(job: Job) -> dict[str, int]:
    from davinci.kernelgym.problem import size_constants

    before, after = size_constants(job.problem.code), size_constants(job.code)
    return {k: v for k, v in after.items() if before.get(k) != v}
