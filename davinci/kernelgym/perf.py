"""The timing phase of an evaluation, cached baselines, device ceilings and speed-of-light numbers.

Timing protocol. Setup: the candidate and, for the live eager baseline, the reference twin (a fresh
sandboxed process forked like the candidate's, running the problem's own `Model` through the same
harness, see job.py) each allocate R input sets, in a drawn order. One round (rounds repeat until
`stats.should_stop` or the run deadline nears):
  1. the reference worker refreshes the R sets in place, the same fresh values into both sides (values from
     the problem's own `get_inputs()` on the device, same buffers, so a cache keyed on pointers goes stale),
     and computes the reference output for one secretly chosen set;
  2. the candidate times R calls over the sets in a shuffled order (`timing.DeviceTimer`) and keeps the
     outputs; the supervisor clocks the whole request;
  3. the candidate shares the output of the chosen call; the reference worker compares it (a replayed or
     deferred result fails here);
  4. each live baseline times the same R calls in the same order: eager in the twin, others in the
     reference worker, while every candidate process is frozen (SIGSTOP), clocked by the supervisor too.
Whether 4 comes before 2 is drawn per round. Why a twin: the candidate runs in a process forked for it,
with its own allocations, harness and loop overhead; timing eager in the long-lived reference worker made
the two sides different kinds of process, and the candidate came out 0.1-0.5% slower in every H100 run
(benchmarks/results/h100/kernelgym/self_speedup). With the twin, both sides of the A/B are the same program
in the same kind of process.
Samples are the defended per-call times (`stats.defended`: event time, launch path, and host time beyond
the trusted eager's own host-minus-event gap). Baselines not timed live come from the disk cache
(`baselines.DiskCache`), measured once per (problem, device, torch version).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from davinci.kernelgym.baselines import DiskCache, cache_key, device_model
from davinci.kernelgym.audit import audit_rounds
from davinci.kernelgym.job import (CandidateFailure, Job, ask, ask_twin, build_twin, fresh_inputs, gpu_phase, ref,
                                   wants_profile)
from davinci.kernelgym.lane import wake
from davinci.kernelgym.replay import lowest, unwatched, wanted
from davinci.kernelgym.sol import roofline_violation, sol_percent
from davinci.kernelgym.stats import defended, launch_allowance, should_stop


# Part of every cached baseline's key: samples defended by an older rule are never mixed with new ones.
TIMING_RULE = "defended-v2"


def rotation_count(job: Job, sides: int = 1) -> int:
    """Input sets per side; `sides` programs each hold their own sets (the candidate, the reference twin)."""
    if job.cfg.rotation_sets:
        return job.cfg.rotation_sets
    if not job.lane.cuda:
        return 2
    per_set = (int(job.info.get("in_bytes", 0)) + 2 * int(job.info.get("out_bytes", 0))) * max(1, sides)
    budget = 0.25 * float(job.lane.info.get("memory", 16 << 30))
    return max(1, min(4, int(budget // max(1, per_set))))


def _rule(job: Job) -> dict[str, Any]:
    c = job.cfg
    return {"min_reps": c.timing_min_reps, "max_reps": c.timing_max_reps, "ci_rel": c.timing_ci_rel, "max_s": c.timing_max_s}


def enabled_baselines(job: Job) -> list[str]:
    out = []
    for name in job.cfg.baselines:
        if name == "compile" and not job.lane.cuda and not job.cfg.cpu_compile_baseline:
            continue
        out.append(name)
    return out


def live_baselines(job: Job) -> list[str]:
    """The enabled baselines timed interleaved with the candidate (the rest come from the disk cache)."""
    return [b for b in enabled_baselines(job) if b in job.cfg.live_baselines]


def twin_wanted(job: Job) -> bool:
    """Whether live eager is timed in a reference twin (`GymConfig.eager_timer`)."""
    return job.cfg.eager_timer == "twin" and "eager" in live_baselines(job)


def _time_baselines(job: Job, sets: list[str], order: list[int], fill: tuple[Any, list], live: list[str],
                    acc: dict[str, Any]) -> None:
    """Time each live baseline over this round's sets, every candidate process frozen meanwhile (it can
    neither launch work nor signal the process being timed)."""
    frozen = job.lane.freeze_children(keep=job.twin.pids if job.twin else set())
    if job.twin is not None:
        for pid in job.twin.pids:
            wake(pid)  # a candidate may have stopped the twin just before it was frozen itself
    try:
        for name in live:
            w0 = time.monotonic()
            if name == "eager" and job.twin is not None:
                base, _ = ask_twin(job, {"op": "time", "sets": sets, "order": order, "warmup": job.cfg.warmup_reps,
                                         "fill": fill[0], "canary_limit_ms": canary_limit(job)}, fill[1])
                acc["walls"][name].append((time.monotonic() - w0) * 1e3)  # the same request as the candidate's
                ask_twin(job, {"op": "release", "tags": ["timed"]})
            else:
                base, _ = ref(job, {"op": "time_baseline", "name": name, "order": order, "warmup": job.cfg.warmup_reps,
                                    "canary_limit_ms": canary_limit(job)})
                acc["walls"][name].append((time.monotonic() - w0) * 1e3)
            _note_busy(job, name, base)
            _add_raw(acc, name, base)
    finally:
        job.lane.thaw(frozen)


def canary_limit(job: Job) -> float | None:
    """The idle probe's limit before a timed program: 3x its time at lane start plus 0.5 ms (None on the CPU).
    A context time-slicing with ours delays every probe by a slice (milliseconds)."""
    base = float(job.lane.info.get("canary_ms") or 0.0)
    return 3.0 * base + 0.5 if job.lane.cuda and base > 0 else None


def _note_busy(job: Job, name: str, reply: dict[str, Any]) -> None:
    """Record a baseline timed while the GPU was not ours: every candidate process was frozen, so the work
    was queued before the freeze (or comes from outside the evaluator); its samples would be inflated."""
    limit = canary_limit(job)
    ms = float(reply.get("canary_ms") or 0.0)
    if limit is not None and ms > limit and job.evidence.gpu_busy is None:
        job.evidence.gpu_busy = (f"before timing {name}, with every candidate process stopped, a 0.1 ms probe "
                                 f"kernel took {ms:.2f} ms (limit {limit:.2f} ms, {reply.get('canary_probes')} "
                                 "probes): other work held the GPU")


def _add_raw(acc: dict[str, Any], name: str, reply: dict[str, Any]) -> None:
    """A program's per-call clocks from one round: event, host, launch path (host until the call returned)."""
    raw = acc["raw"].setdefault(name, {"event": [], "host": [], "launch": [], "overhead_ms": 0.0})
    events, hosts = [float(x) for x in reply["event_ms"]], [float(x) for x in reply["host_ms"]]
    after = reply.get("after_ms") or []
    raw["event"] += events
    raw["host"] += hosts
    raw["launch"] += [h - float(a) for h, a in zip(hosts, after)] if len(after) == len(hosts) else hosts
    raw["overhead_ms"] = float(reply.get("overhead_ms", 0.0))
    for phase, ms in (reply.get("phases_ms") or {}).items():
        raw.setdefault("phases", {}).setdefault(str(phase), []).append(float(ms))


def _defend_all(job: Job, acc: dict[str, Any]) -> None:
    """Every program's defended samples under one allowance: the trusted eager baseline's median
    host-minus-event gap, or, with no live eager, the reference worker's calibrated loop overhead; then
    the supervisor's wall-clock floor of every round (`wall_floor`)."""
    eager = acc["raw"].get("eager")
    allowance = launch_allowance(eager["event"], eager["host"]) if eager and eager["event"] else acc["ref_overhead_ms"]
    acc["allowance_ms"] = allowance
    for name, r in acc["raw"].items():
        acc["samples"][name] = defended(r["event"], r["host"], allowance, job.lane.cuda, r["launch"],
                                        acc["ref_launch_ms"])
    if job.twin is not None and acc["samples"].get("eager"):
        sides = (acc["samples"]["cand"], acc["walls"]["cand"], acc["samples"]["eager"], acc["walls"]["eager"],
                 acc["rotation"])
        job.evidence.wall_excess_ms, job.evidence.reported_round_ms = wall_excess(*sides)
        acc["samples"]["cand"], job.evidence.wall_floor_ratios = wall_floor(*sides)


# The floor's slack for honest jitter of the host-side harness work: a fixed part, a share of the twin's gap and
# a multiple of the gap's own spread over the rounds (its median absolute deviation).
WALL_SLACK_MS, WALL_SLACK_REL, WALL_SLACK_MAD = 0.2, 0.1, 3.0
# ... and a share of the round's own reported time (scheduling noise on a loaded host grows with the request)
WALL_SLACK_CALLS = 0.02


def wall_floor(cand: list[float], cand_walls: list[float], twin: list[float], twin_walls: list[float],
               per_round: int) -> tuple[list[float], list[float]]:
    """Raise each round's candidate samples to what the supervisor's clock allows; returns them and, per
    round, floor / reported mean (above 1: the clock caught a time reported too low).

    Round i of each side is one timed request of `per_round` calls, clocked by the supervisor from sending
    it to receiving its reply (inputs, outputs and every call inside). The twin runs the same harness on the
    problem's own Model, so its wall minus its reported total is the harness's own cost (the gap; its median
    over the rounds, so one slow round of the twin's cannot lower the bar). Whatever the candidate's process
    does to its timer, its calls cannot have taken less than (its wall - the gap - slack) / per_round: work
    moved before or after the timed calls, a timer that lies, a result finished when the outputs leave, all
    stay inside its wall. The slack grows with the gap's spread, so honest jitter never raises a figure.
    Shapes: cand, twin [rounds*per_round]; walls [rounds].
    """
    out, ratios = list(cand), []
    r = max(1, per_round)
    rounds = min(len(cand_walls), len(twin_walls), len(cand) // r, len(twin) // r)
    if not rounds:
        return out, ratios
    gaps = [twin_walls[i] - sum(twin[i * r:(i + 1) * r]) for i in range(rounds)]
    gap = statistics.median(gaps)
    spread = statistics.median(abs(g - gap) for g in gaps)
    slack = WALL_SLACK_MS + WALL_SLACK_REL * max(0.0, gap) + WALL_SLACK_MAD * spread
    for i in range(rounds):
        lo, hi = i * r, (i + 1) * r
        mean = sum(cand[lo:hi]) / r
        floor = (cand_walls[i] - gap - slack) / r - WALL_SLACK_CALLS * mean
        ratios.append(floor / mean if mean > 0 else float("inf"))
        if mean > 0 and floor > mean:
            out[lo:hi] = [x * floor / mean for x in cand[lo:hi]]
    return out, ratios


def wall_excess(cand: list[float], cand_walls: list[float], twin: list[float], twin_walls: list[float],
                per_round: int) -> tuple[list[float], list[float]]:
    """Per round: the candidate's wall minus the twin's median gap minus its reported total (ms; about 0 for
    an honest candidate, whose harness cost is the twin's), and its reported total. A clock that runs slow
    in the candidate's process shows as an excess in nearly every round (checks.wall_clock_mismatch)."""
    r = max(1, per_round)
    rounds = min(len(cand_walls), len(twin_walls), len(cand) // r, len(twin) // r)
    if not rounds:
        return [], []
    gap = statistics.median(twin_walls[i] - sum(twin[i * r:(i + 1) * r]) for i in range(rounds))
    totals = [sum(cand[i * r:(i + 1) * r]) for i in range(rounds)]
    return [cand_walls[i] - gap - totals[i] for i in range(rounds)], totals


def timing_sources(raw: dict[str, Any], allowance_ms: float = 0.0, launch_overhead_ms: float = 0.0) -> dict[str, dict[str, float]]:
    """Per program: median event ms, median host ms, median launch path ms, its process's loop overhead, the
    allowance, and the share of calls where a host clock (launch path or host span, not the events) set the
    defended time. Side by side these say whether a speedup comes from the kernels (event) or from launch
    and synchronize costs (host)."""
    out = {}
    for name, r in raw.items():
        if not r["event"]:
            continue
        launch = r.get("launch") or [0.0] * len(r["event"])
        host_bound = sum(1 for e, h, ln in zip(r["event"], r["host"], launch)
                         if max(h - allowance_ms, ln - launch_overhead_ms) > e)
        out[name] = {"phases_ms": {k: statistics.median(v) for k, v in (r.get("phases") or {}).items()},
                     "event_ms": statistics.median(r["event"]), "host_ms": statistics.median(r["host"]),
                     "launch_ms": statistics.median(launch), "overhead_ms": r["overhead_ms"],
                     "allowance_ms": allowance_ms, "host_bound": host_bound / len(r["event"])}
    return out


def _round(job: Job, sets: list[str], order: list[int], spot: int, rnd: int, live: list[str], acc: dict[str, Any],
           baselines_first: bool) -> bool:
    """One timing round; False when the candidate failed (verdict recorded) or its timed output was wrong.

    Whether the baselines run before or after the candidate is drawn per round, so slow drifts (clocks,
    temperature) and the refresh work before the round cannot favour one side.
    """
    host = job.lane.transport == "host"
    dist = job.cfg.distributions[rnd % len(job.cfg.distributions)]  # timed outputs are checked on each of them
    fresh, fill_blobs, held = fresh_inputs(job, {"op": "refresh", "seed": job.timing_seed + rnd, "spot": spot,
                                                 "host": host, "dist": dist})
    fill = (fresh.get("fill"), fill_blobs)
    try:
        if baselines_first:
            _time_baselines(job, sets, order, fill, live, acc)
    finally:
        job.lane.thaw(held)  # the candidate runs again only now, as its timed request is sent
    w0 = time.monotonic()
    # the same idle probe as the baselines get, so both sides start from the same GPU state (its value,
    # from the candidate's own process, is not trusted and not used)
    tr, tr_blobs = ask(job, {"op": "time", "sets": sets, "order": order, "warmup": job.cfg.warmup_reps,
                             "fill": fill[0], "canary_limit_ms": canary_limit(job)}, fill[1])
    acc["walls"]["cand"].append((time.monotonic() - w0) * 1e3)
    if not tr.get("ok"):
        job.fail("runtime", str(tr.get("error", "timed call failed")))
        return False
    ev = job.evidence
    ev.cand_event_ms += [float(x) for x in tr["event_ms"]]
    ev.cand_host_ms += [float(x) for x in tr["host_ms"]]
    ev.cand_after_ms += [float(x) for x in tr.get("after_ms") or []]
    ev.overhead_ms = float(tr.get("overhead_ms", 0.0))
    _add_raw(acc, "cand", tr)
    threads = tr.get("threads") or [0, 0, 0, 0]
    ev.timed_native_thread_growth += max(0, int(threads[3]) - int(threads[1]))
    launches = tr.get("launches") if isinstance(tr.get("launches"), list) else []
    ev.timed_calls += len(order)
    ev.timed_launchless += len(order) - sum(1 for n in launches[:len(order)] if isinstance(n, int) and n > 0)
    share = tr.get("kernel_share_raw")  # CPU: the kernels' share of this scored request's outputs (audit.py)
    if isinstance(share, (int, float)):
        acc.setdefault("scored_shares", []).append(float(share))
        ev.scored_kernel_share = min(acc["scored_shares"])
    read = tr.get("input_share_raw")  # ... and of its inputs' elements their loads reached
    if isinstance(read, (int, float)):
        acc.setdefault("scored_reads", []).append(float(read))
    ev.launched_after.update(str(n) for n in tr.get("launched_after") or [])
    outputs = tr.get("outputs") or []
    if len(outputs) != len(order):
        ev.timed_mismatch = "the timed request did not return every call's output"
        return False
    spot_check, _ = ref(job, {"op": "check_spot", "outputs": outputs[order.index(spot)], "seed": job.timing_seed + rnd},
                        tr_blobs)
    if acc["replays_rounds"]:  # asked for after the reply: the candidate's calls could not know (replay.py)
        replayed, _ = ask(job, {"op": "replay", "tag": "timed", "seed": job.timing_seed + REPLAY_SEED + rnd})
        lowest(job.unwatched_replay, unwatched(replayed, dist == "native"))
    released, _ = ask(job, {"op": "release", "tags": ["timed"], "reused": True})  # (after the clock: worker.op_release)
    ev.reused_storage += int(released.get("reused_storage", 0))
    if not spot_check["comparison"]["ok"]:
        ev.timed_mismatch = spot_check["comparison"]["reason"]
        return False
    if not baselines_first:
        _time_baselines(job, sets, order, fill, live, acc)
    _defend_all(job, acc)
    return True


def _setup(job: Job, rng: random.Random) -> tuple[list[str], list[str], dict[str, Any]]:
    """Input sets in the candidate (and the twin), registered with the reference worker; the accumulator."""
    live = live_baselines(job)
    if twin_wanted(job):
        build_twin(job)
    r = rotation_count(job, sides=2 if job.twin else 1)
    sets = [f"t{j}" for j in range(r)]
    sides = [(ask, "sets")] + ([(ask_twin, "twin_sets")] if job.twin else [])
    rng.shuffle(sides)  # which process allocates first is drawn: placement cannot favour one side
    descs: dict[str, list[Any]] = {}
    for call, key in sides:
        for name in sets:
            alloc, _ = call(job, {"op": "alloc", "slot": name, "spec": job.info["spec"]})
            if not alloc.get("ok"):
                raise CandidateFailure("runtime", str(alloc.get("error", "could not allocate the timing inputs")))
            descs.setdefault(key, []).append(alloc.get("descs"))
    ipc = job.lane.transport == "ipc"
    setup, _ = ref(job, {"op": "timing_setup", "sets": descs["sets"] if ipc else None,
                         "twin_sets": descs.get("twin_sets") if ipc else None, "count": r})
    acc: dict[str, Any] = {"samples": {"cand": [], **{b: [] for b in live}}, "walls": {"cand": [], **{b: [] for b in live}},
                           "replays_rounds": replays_rounds(job),
                           "raw": {}, "ref_overhead_ms": float(setup.get("overhead_ms", 0.0)), "rotation": r,
                           "ref_launch_ms": float(setup.get("launch_overhead_ms", 0.0)), "allowance_ms": 0.0}
    _warm(job, sets, sides)
    return sets, live, acc


def _warm(job: Job, sets: list[str], sides: list[Any]) -> None:
    """Warm-up calls of each timed process on inputs of their own (a refresh no round uses), so every timed
    request holds only timed calls: the wall-clock floor then compares like with like."""
    host = job.lane.transport == "host"
    fresh, blobs = ref(job, {"op": "refresh", "seed": job.timing_seed + WARM_SEED, "spot": 0, "host": host})
    for call, _ in sides:
        reply, _ = call(job, {"op": "warm", "sets": sets, "fill": fresh.get("fill"), "warmup": job.cfg.warmup_reps},
                        blobs)
        if not reply.get("ok"):
            raise CandidateFailure("runtime", str(reply.get("error", "warm-up call failed")))


WARM_SEED, REPLAY_SEED = 1 << 20, 1 << 22


def replays_rounds(job: Job) -> bool:
    """Whether every scored round's launches run again after it (replay.py): on a GPU, where a replay costs
    milliseconds; not on the CPU (interpreted kernels make a replay cost a call's time, and every scored CPU
    request carries the store record already). Compared with the accounting call's replay
    (evaluator._evidence), which needs no audit round to have run."""
    return job.lane.cuda and wanted(job.cfg, job.lane.cuda)


def timing(job: Job) -> None:
    """Run the interleaved timing rounds; fills job.perf["samples"] (ms per call per program)."""
    rng = random.Random(job.timing_seed)
    sets, live, acc = _setup(job, rng)
    r = len(sets)
    t0, rnd = time.monotonic(), 0
    try:
        while True:
            order, spot = rng.sample(range(r), r), rng.randrange(r)
            started = time.monotonic()
            if not _round(job, sets, order, spot, rnd, live, acc, baselines_first=rng.random() < 0.5):
                break
            rnd += 1
            took = time.monotonic() - started
            if should_stop(acc["samples"], min_reps=job.cfg.timing_min_reps, max_reps=job.cfg.timing_max_reps,
                           ci_rel=job.cfg.timing_ci_rel, elapsed_s=time.monotonic() - t0, max_s=job.cfg.timing_max_s):
                break
            if time.monotonic() + 2 * took > job.run_deadline:
                break
        if rnd and job.error_kind is None and not job.evidence.timed_mismatch:
            # after every scored round: timed requests with the evidence on (audit.py; the profiled one last,
            # CUPTI stays attached)
            audit_rounds(job, sets, rng, acc, canary_limit(job), profile=job.defer_profile and wants_profile(job))
            job.audited = True
    finally:
        job.evidence.timing_rounds = rnd
        job.perf = {"samples": acc["samples"], "walls": acc["walls"], "rounds": rnd, "rotation": r,
                    "sources": timing_sources(acc["raw"], acc["allowance_ms"], acc["ref_launch_ms"]),
                    "allowance_ms": acc["allowance_ms"],
                    # where live eager ran: the twin, the reference worker, or nowhere (cached)
                    "eager_timer": ("twin" if job.twin else "reference") if "eager" in live else None}
        try:
            ref(job, {"op": "drop", "timing": True})  # the reference worker lets go of the sets before they are freed
            ask(job, {"op": "release", "slots": sets})
        except Exception:
            pass  # a worker is gone or stuck: the original failure is what gets reported (_finish drops again)
    _wall_estimate(job)


def _wall_estimate(job: Job) -> None:
    """Per-call candidate time implied by the supervisor's clock: (W_cand - W_eager) / R + eager time.

    Round 0 is left out (it holds the warm-up calls); at least two later rounds are needed.
    """
    walls, samples = job.perf["walls"], job.perf["samples"]
    if not samples.get("cand") or not samples.get("eager") or len(walls["cand"]) < 3 or len(walls["eager"]) < 3:
        return
    r = job.perf["rotation"]
    diffs = [(c - e) / r for c, e in zip(walls["cand"][1:], walls["eager"][1:])]
    job.evidence.wall_estimate_ms = statistics.median(diffs) + statistics.median(samples["eager"])
    job.evidence.reported_ms = statistics.median(samples["cand"])


def baseline_key(info: dict[str, Any], code: str, name: str, l2_flush_mb: int) -> str:
    """Cache key of a baseline: problem code, device model (never just "cuda"), torch, baseline, timing rule."""
    return cache_key("baseline", code, device_model(info), info.get("torch"), name, l2_flush_mb, TIMING_RULE)


def cached_baseline(job: Job, cache: DiskCache, name: str) -> list[float] | None:
    """Samples of a baseline from the disk cache, measuring (and storing) them on a miss."""
    info = job.lane.info
    key = baseline_key(info, job.code, name, job.cfg.l2_flush_mb)
    hit = cache.get("baselines", key)
    if hit and hit.get("samples"):
        return [float(x) for x in hit["samples"]]
    # a cached number is used forever: measure it with the GPU to ourselves (gpugate)
    with gpu_phase(job, "exclusive"):
        reply, _ = ref(job, {"op": "measure_baseline", "name": name, "rotation": rotation_count(job),
                             "seed": job.timing_seed, "warmup": job.cfg.warmup_reps, "rule": _rule(job)})
    cache.put("baselines", key, {"samples": reply["samples"], "problem": job.problem.id, "name": name,
                                 "device": device_model(info), "torch": info.get("torch"), "measured_at": time.time()})
    return [float(x) for x in reply["samples"]]


def ceilings(job: Job, cache: DiskCache) -> dict[str, float]:
    lane = job.lane
    if "ceilings" not in lane.info:
        key = cache_key("ceilings", device_model(lane.info), lane.info.get("torch"))
        hit = cache.get("ceilings", key)
        if not hit:
            with gpu_phase(job, "exclusive"):
                reply, _ = lane.ref_call({"op": "ceilings"}, timeout=300.0)
            hit = reply.get("ceilings", {}) if reply.get("ok") else {}
            if hit:
                cache.put("ceilings", key, hit)
        lane.info["ceilings"] = hit
    return lane.info["ceilings"]


def speed_of_light(job: Job, cand_ms: float, cache: DiskCache) -> float | None:
    work = job.info.get("work") or {}
    ceil = ceilings(job, cache)
    if job.lane.cuda:
        job.evidence.roofline = roofline_violation(cand_ms, int(work.get("flops", 0)), int(work.get("bytes", 0)),
                                                   ceil, job.cfg.roofline_margin)
    return sol_percent(cand_ms, int(work.get("flops", 0)), int(work.get("bytes", 0)), work.get("dtype", "float32"), ceil)
