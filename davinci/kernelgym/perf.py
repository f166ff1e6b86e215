"""The timing phase of an evaluation, cached baselines, device ceilings and speed-of-light numbers.

Timing protocol (one round; rounds repeat until `stats.should_stop` or the run deadline nears):
  1. the reference worker refreshes R input sets in place (fresh values from the problem's own
     `get_inputs()` on the device, same buffers, so a cache keyed on pointers goes stale) and computes the
     reference output for one secretly chosen set;
  2. the candidate times R calls over the sets in a shuffled order (`timing.DeviceTimer`) and keeps the
     outputs; the supervisor clocks the whole request;
  3. the candidate shares the output of the chosen call; the reference worker compares it (a replayed or
     deferred result fails here);
  4. each live baseline (eager by default) times the same R calls on the same buffers in the reference
     worker's clean process, clocked by the supervisor too (A/B/A/B interleaving).
Samples are the defended per-call times (`stats.defended`). Baselines not timed live come from the disk
cache (`baselines.DiskCache`), measured once per (problem, device, torch version).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from davinci.kernelgym.baselines import DiskCache, cache_key
from davinci.kernelgym.job import Job, ask, gpu_phase, ref
from davinci.kernelgym.sol import roofline_violation, sol_percent
from davinci.kernelgym.stats import defended, should_stop


def rotation_count(job: Job) -> int:
    if job.cfg.rotation_sets:
        return job.cfg.rotation_sets
    if not job.lane.cuda:
        return 2
    per_set = int(job.info.get("in_bytes", 0)) + 2 * int(job.info.get("out_bytes", 0))
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


def _time_baselines(job: Job, order: list[int], live: list[str], acc: dict[str, Any]) -> None:
    for name in live:
        w0 = time.monotonic()
        base, _ = ref(job, {"op": "time_baseline", "name": name, "order": order, "warmup": job.cfg.warmup_reps})
        acc["walls"][name].append((time.monotonic() - w0) * 1e3)
        _add_samples(job, acc, name, base["event_ms"], base["host_ms"], base["overhead_ms"])


def _add_samples(job: Job, acc: dict[str, Any], name: str, events: list[float], hosts: list[float],
                 overhead_ms: float) -> None:
    """A program's defended samples, and the two clocks behind them (`sources` in the result's details)."""
    acc["samples"][name] += defended(events, hosts, overhead_ms, job.lane.cuda)
    raw = acc["raw"].setdefault(name, {"event": [], "host": [], "overhead_ms": 0.0})
    raw["event"] += [float(x) for x in events]
    raw["host"] += [float(x) for x in hosts]
    raw["overhead_ms"] = float(overhead_ms)


def timing_sources(raw: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per program: median event ms, median host ms, the host loop overhead, and the share of calls where
    the host clock (minus overhead) set the defended time. Side by side these say whether a speedup comes
    from the kernels (event) or from launch and synchronize costs (host)."""
    out = {}
    for name, r in raw.items():
        if not r["event"]:
            continue
        host_bound = sum(1 for e, h in zip(r["event"], r["host"]) if h - r["overhead_ms"] > e)
        out[name] = {"event_ms": statistics.median(r["event"]), "host_ms": statistics.median(r["host"]),
                     "overhead_ms": r["overhead_ms"], "host_bound": host_bound / len(r["event"])}
    return out


def _round(job: Job, sets: list[str], order: list[int], spot: int, rnd: int, live: list[str], acc: dict[str, Any],
           baselines_first: bool) -> bool:
    """One timing round; False when the candidate failed (verdict recorded) or its timed output was wrong.

    Whether the baselines run before or after the candidate is drawn per round, so slow drifts (clocks,
    temperature) and the refresh work before the round cannot favour one side.
    """
    host = job.lane.transport == "host"
    fresh, fill_blobs = ref(job, {"op": "refresh", "seed": job.timing_seed + rnd, "spot": spot, "host": host})
    if baselines_first:
        _time_baselines(job, order, live, acc)
    w0 = time.monotonic()
    tr, _ = ask(job, {"op": "time", "sets": sets, "order": order, "warmup": job.cfg.warmup_reps,
                      "fill": fresh.get("fill")}, fill_blobs)
    acc["walls"]["cand"].append((time.monotonic() - w0) * 1e3)
    if not tr.get("ok"):
        job.fail("runtime", str(tr.get("error", "timed call failed")))
        return False
    ev = job.evidence
    ev.cand_event_ms += [float(x) for x in tr["event_ms"]]
    ev.cand_host_ms += [float(x) for x in tr["host_ms"]]
    ev.cand_after_ms += [float(x) for x in tr.get("after_ms") or []]
    ev.overhead_ms = float(tr.get("overhead_ms", 0.0))
    _add_samples(job, acc, "cand", tr["event_ms"], tr["host_ms"], ev.overhead_ms)
    threads = tr.get("threads") or [0, 0, 0, 0]
    ev.timed_native_thread_growth += max(0, int(threads[3]) - int(threads[1]))
    ev.reused_storage += int(tr.get("reused_storage", 0))
    shared, blobs = ask(job, {"op": "share", "tag": "timed", "index": order.index(spot)})
    if not shared.get("ok"):
        ev.timed_mismatch = str(shared.get("subclass") or shared.get("bad_output") or shared.get("error"))
        return False
    spot_check, _ = ref(job, {"op": "check_spot", "outputs": shared["outputs"], "seed": job.timing_seed + rnd}, blobs)
    ask(job, {"op": "release", "tags": ["timed"]})
    if not spot_check["comparison"]["ok"]:
        ev.timed_mismatch = spot_check["comparison"]["reason"]
        return False
    if not baselines_first:
        _time_baselines(job, order, live, acc)
    return True


def timing(job: Job) -> None:
    """Run the interleaved timing rounds; fills job.perf["samples"] (ms per call per program)."""
    r = rotation_count(job)
    sets = [f"t{j}" for j in range(r)]
    descs = []
    for name in sets:
        alloc, _ = ask(job, {"op": "alloc", "slot": name, "spec": job.info["spec"]})
        descs.append(alloc.get("descs"))
    ref(job, {"op": "timing_setup", "sets": descs if job.lane.transport == "ipc" else None, "count": r})
    live = [b for b in enabled_baselines(job) if b in job.cfg.live_baselines]
    acc: dict[str, Any] = {"samples": {"cand": [], **{b: [] for b in live}}, "walls": {"cand": [], **{b: [] for b in live}},
                           "raw": {}}
    rng = random.Random(job.timing_seed)
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
    finally:
        job.evidence.timing_rounds = rnd
        job.perf = {"samples": acc["samples"], "walls": acc["walls"], "rounds": rnd, "rotation": r,
                    "sources": timing_sources(acc["raw"])}
        try:
            ask(job, {"op": "release", "slots": sets})
        except Exception:
            pass  # the candidate is gone or stuck; the original failure is what gets reported
        ref(job, {"op": "drop", "timing": True})
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


def cached_baseline(job: Job, cache: DiskCache, name: str) -> list[float] | None:
    """Samples of a baseline from the disk cache, measuring (and storing) them on a miss."""
    info = job.lane.info
    key = cache_key("baseline", job.code, info.get("device"), info.get("torch"), name, job.cfg.l2_flush_mb)
    hit = cache.get("baselines", key)
    if hit and hit.get("samples"):
        return [float(x) for x in hit["samples"]]
    # a cached number is used forever: measure it with the GPU to ourselves (gpugate)
    with gpu_phase(job, "exclusive"):
        reply, _ = ref(job, {"op": "measure_baseline", "name": name, "rotation": rotation_count(job),
                             "seed": job.timing_seed, "warmup": job.cfg.warmup_reps, "rule": _rule(job)})
    cache.put("baselines", key, {"samples": reply["samples"], "problem": job.problem.id, "name": name,
                                 "device": info.get("device"), "torch": info.get("torch"), "measured_at": time.time()})
    return [float(x) for x in reply["samples"]]


def ceilings(job: Job, cache: DiskCache) -> dict[str, float]:
    lane = job.lane
    if "ceilings" not in lane.info:
        key = cache_key("ceilings", lane.info.get("device"), lane.info.get("torch"))
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
