"""Audit rounds: timed requests that look like any other to the candidate, with the evidence switched on.

A candidate can tell a correctness call from a timed one (the harness's frames, the call count, the inputs'
buffers) and compute with PyTorch only when it is timed, or run its own kernels only when it is watched.
So after the last scored round (`perf.timing`), the supervisor sends one or two more `time` requests over
the same input sets, fresh inputs, the same harness path; their samples are never used:

    audit A  every large PyTorch result of the fill and the calls poisoned (accounting.PoisonMode), and on the
             CPU the kernels' stores recorded and every value read traced to an observed writer (provenance.py,
             on inputs no earlier call saw, so state left by earlier calls holds nothing of the answer): a
             spot-checked output that no longer matches is `torch_compute`, an output the kernels did not store
             or values of unknown origin are `host_compute`; a request that took far longer than the
             scored rounds (10x their median wall + 5 ms) means the candidate behaves differently when it can
             see it is watched (`watched_behaviour`). When only its op digests would flag (what Python decided
             changed between its calls), more requests like it follow until the window holds
             AUDIT_WINDOW_CALLS calls (`_more_calls`): a state rotating with the call count repeats there;
    audit B  (GPU) the calls under torch.profiler: every kernel and copy of timed calls, for the coverage and
             decoy checks (CUPTI stays attached afterwards, so this is the last request timed at all);
    audit U  (before A) a request with nothing switched on that torch can report (no dispatch mode, no
             profiler) and, on the CPU, the kernels' stores recorded. The share of the timed outputs the
             kernels stored (glue copies not credited: tracking them needs the mode) must not fall below half of
             what it is in audit A: a candidate that runs its kernels only when a mode or the profiler is on,
             and PyTorch plus a token launch otherwise, stores ~100% of its output in A and ~0% here
             (`watched_behaviour`; attack: cheats_v2/c2_fb_watch_token_switch). Every scored CPU request
             records the stores and loads too and reports both shares (the lowest of them and U's are compared;
             the load share from the inputs' own storages: a copy kernel of NumPy's answer stores the whole output
             but loads none of the input), so a candidate that finds the store record in its own process and runs
             honestly only while it records (cheats_v2/c2_fb_watch_recorder_flag) runs honestly in every scored
             request, and one that runs honestly only under a dispatch mode shows in either share.
             On a GPU, U is a request no different from a scored one; after U and after A the supervisor has
             their Triton launches run again (replay.py): the share of the output they rewrite and the share
             that changes with the inputs must not fall in U below half of what they are in A (the token
             launch and a copy kernel of PyTorch's answer: `watched_behaviour`).

    audit_rounds(job, sets, rng, acc, canary_limit_ms)
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from davinci.kernelgym import replay
from davinci.kernelgym.accounting import torch_verdict
from davinci.kernelgym.hostdata import Record, merge_records, ops_only, provenance_from, provenance_record
from davinci.kernelgym.job import KERNEL_SHARE_MIN, Job, ask, fresh_inputs, hidden_evidence, ref

Shares = dict[str, float | None]  # by SHARE_WORDS name
AUDIT_SEED = 1 << 21
# An audit request this many times the scored rounds' median wall (plus WATCHED_SLACK_MS) is a candidate that
# behaves differently when watched. Honest code pays the dispatch mode's microseconds per op and, on the CPU,
# the store record: up to 3.3x measured for Triton-interpreter kernels on a loaded 2-core box.
WATCHED_RATIO, WATCHED_SLACK_MS = 10.0, 5.0
# Calls in audit A's window when its op digests alone would flag it (`_more_calls`): an honest state that rotates
# with the call count (a round-robin start row, honest_v2_rt4_rr_rows) repeats within this many calls.
AUDIT_WINDOW_CALLS = 16


def _request(job: Job, sets: list[str], rng: random.Random, n: int, limit: float | None, then_replay: bool = False,
             **flags: Any) -> tuple[dict[str, Any], list, float, dict[str, Any]]:
    """One audit request on fresh native inputs; (reply, blobs, wall ms, spot comparison or {}). With `then_replay`
    the request's Triton launches are then run again (replay.py: `reply["replay"]`, asked for only after the
    reply, so the candidate's calls cannot tell this request from a scored one by it)."""
    r = len(sets)
    order, spot = rng.sample(range(r), r), rng.randrange(r)
    host = job.lane.transport == "host"
    fresh, fill_blobs, held = fresh_inputs(job, {"op": "refresh", "seed": job.timing_seed + AUDIT_SEED + n,
                                                 "spot": spot, "host": host, "dist": "native"})
    job.lane.thaw(held)  # stopped while its slots were rewritten; runs again as its timed request is sent
    w0 = time.monotonic()
    reply, blobs = ask(job, {"op": "time", "sets": sets, "order": order, "warmup": job.cfg.warmup_reps,
                             "fill": fresh.get("fill"), "canary_limit_ms": limit, **flags}, fill_blobs)
    wall = (time.monotonic() - w0) * 1e3
    comparison: dict[str, Any] = {}
    outputs = reply.get("outputs") or []
    if reply.get("ok") and len(outputs) == r:
        check, _ = ref(job, {"op": "check_spot", "outputs": outputs[order.index(spot)],
                             "seed": job.timing_seed + AUDIT_SEED + n}, blobs)
        comparison = check["comparison"]
        if then_replay:  # on the CPU one call of the request, drawn (an interpreted replay costs a call's time)
            calls = None if job.lane.cuda else [rng.randrange(r)]
            reply["replay"], _ = ask(job, {"op": "replay", "tag": "timed", "seed": rng.randrange(1 << 30),
                                           "calls": calls})
    ask(job, {"op": "release", "tags": ["timed"]})
    return reply, blobs, wall, comparison


def replaying(job: Job) -> bool:
    """Whether audit U and audit A are followed by a launch replay (`GymConfig.launch_replay`)."""
    return replay.wanted(job.cfg, job.lane.cuda)


def _unwatched(job: Job, sets: list[str], rng: random.Random, limit: float | None,
               acc: dict[str, Any]) -> Shares:
    """Audit U: on the CPU the kernels' shares of the timed outputs (stored) and inputs (loaded) with nothing
    torch can report switched on, each the lowest with the scored requests'; with a replay, its shares of a
    request no different from a scored one (rewritten, input-dependent). None where there is no figure."""
    cuda = job.lane.cuda
    reply, _, _, comparison = _request(job, sets, rng, 2, limit, replaying(job), **({} if cuda else {"stores": True}))
    if reply.get("ok") and comparison and not comparison["ok"]:
        job.evidence.timed_mismatch = job.evidence.timed_mismatch or comparison["reason"]
    shares = _shares(reply, cuda, failed=0.0)
    for key, scored in (("stored", "scored_shares"), ("loaded", "scored_reads")):
        if key in shares:
            shares[key] = _lowest(shares[key], *acc.get(scored, []))
    for key in ("rewrote", "depends"):  # and the replays of a trial and the scored rounds
        if key in shares:
            shares[key] = _lowest(shares[key], job.unwatched_replay.get(key))
    return shares


def _shares(reply: dict[str, Any], cuda: bool, failed: float | None = None) -> Shares:
    """The shares a request's reply holds, by SHARE_WORDS name: stored and loaded from the CPU's store record,
    rewrote and depends from the replay (replay.py). A replay that failed counts `failed` (0 for the unwatched
    request: its kernels could not be run again, so none of the output is theirs to credit; no figure for
    audit A)."""
    shares: Shares = {} if cuda else {"stored": _raw_share(reply), "loaded": _raw_share(reply, "input_share_raw")}
    return {**shares, **replay.parsed(reply.get("replay"), failed)}


def _raw_share(reply: dict[str, Any], key: str = "kernel_share_raw") -> float | None:
    """A share the worker sent (`kernel_share_raw`: of the timed outputs, glue copies not credited;
    `input_share_raw`: of the timed inputs' elements loaded, from their own storages), if sent."""
    share = reply.get(key)
    return float(share) if isinstance(share, (int, float)) else None


def _lowest(*shares: float | None) -> float | None:
    return min((s for s in shares if s is not None), default=None)


SHARE_WORDS = {"rewrote": "its kernels, run again after the call, rewrote {}% of the output",
               "depends": "{}% of the output its kernels wrote again changed with the inputs",
               "stored": "its kernels stored {}% of the output",
               "loaded": "its kernels loaded {}% of the input elements"}


def unwatched_drop(watched: float | None, unwatched: float | None, what: str = "stored") -> str | None:
    """The verdict of audit U against audit A: the kernels' share falls below half of the watched one (which is
    at least half: a candidate whose outputs are mostly glue copies has nothing to compare). `what` names the
    share (SHARE_WORDS)."""
    if watched is None or unwatched is None or watched < 0.5 or unwatched >= 0.5 * watched:
        return None
    seen = SHARE_WORDS[what].format(f"{100 * unwatched:.0f}")
    return (f"in a timed request with no accounting visible to the candidate {seen}, "
            f"against {100 * watched:.0f}% with the accounting on: the candidate computes another way "
            "when it cannot see it is watched")


def _poisoned(job: Job, sets: list[str], rng: random.Random, acc: dict[str, Any], limit: float | None,
              unwatched: Shares | None = None) -> None:
    ev = job.evidence
    reply, _, wall, comparison = _request(job, sets, rng, 0, limit, replaying(job), audit=True)
    watched = _shares(reply, job.lane.cuda)
    for what in SHARE_WORDS:  # the replay's first where there is one
        if unwatched and what in unwatched:
            ev.watched = ev.watched or unwatched_drop(watched.get(what), unwatched[what], what)
    if not reply.get("ok") or not comparison:
        ev.torch_compute = ev.torch_compute or "a timed call failed once PyTorch's own results were poisoned"
    else:
        changed = None if comparison["ok"] else \
            f"a timed call's answer changed once PyTorch's own results were poisoned ({comparison['reason']})"
        ev.torch_compute = ev.torch_compute or torch_verdict(changed, reply.get("torch_work"),
                                                             (job.info.get("work") or {}).get("torch_work"),
                                                             *hidden_evidence(reply))
    if reply.get("ok"):  # data the host made is counted unless the accounting calls saw the same (a constant)
        record = provenance_record(reply)
        verdict = provenance_from(record, job.prov_seen, job.prov_codes)
        window = verdict is not None and not ev.host_compute and ops_only(record, job.prov_seen, job.prov_codes)
        ev.host_compute = ev.host_compute or verdict  # stands if the window cannot clear it (time, a failure)
        if window and _more_calls(job, sets, rng, limit, record, wall / 1e3):
            ev.host_compute = None
    share = reply.get("kernel_share")
    if share is not None and share < KERNEL_SHARE_MIN:
        ev.host_compute = ev.host_compute or (
            f"in a timed call only {100 * share:.0f}% of the output's elements hold values the candidate's kernels "
            "stored there; the rest was computed elsewhere (NumPy, Python)")
    walls = acc["walls"].get("cand") or []
    # the profiler beside the mode costs its own time inside this request (hidden.HiddenWork.overhead_ms),
    # which no scored round pays: taken off the wall compared, never more than most of it
    own = reply.get("accounting_ms")
    wall -= min(float(own), 0.9 * wall) if isinstance(own, (int, float)) and own > 0 else 0.0
    if walls and wall > WATCHED_RATIO * statistics.median(walls) + WATCHED_SLACK_MS:
        ev.watched = (f"a timed request with the evaluator's accounting on took {wall:.1f} ms against a median of "
                      f"{statistics.median(walls):.1f} ms for the scored ones: the candidate behaves differently "
                      "when it can see it is watched")


def _profiled(job: Job, sets: list[str], rng: random.Random) -> None:
    # no idle probe: its spin kernels would count as device time of the forward (its samples are never used)
    reply, _, _, comparison = _request(job, sets, rng, 1, None, profile=True)
    if reply.get("ok") and comparison and not comparison["ok"]:
        job.evidence.timed_mismatch = job.evidence.timed_mismatch or comparison["reason"]
    if reply.get("kernels") is not None:
        job.evidence.profiler_kernels = [tuple(k) for k in reply["kernels"]]


def audit_rounds(job: Job, sets: list[str], rng: random.Random, acc: dict[str, Any], limit: float | None,
                 profile: bool) -> None:
    """Audit U, audit A, then (GPU, `profile`) audit B; see the module docstring."""
    if "torch_compute" in job.checks or "host_compute" in job.checks:
        wanted = "watched_behaviour" in job.checks and (not job.lane.cuda or replaying(job))
        unwatched = _unwatched(job, sets, rng, limit, acc) if wanted else None
        _poisoned(job, sets, rng, acc, limit, unwatched)
    if profile and job.lane.cuda:
        _profiled(job, sets, rng)


def _more_calls(job: Job, sets: list[str], rng: random.Random, limit: float | None, first: Record,
                wall_s: float) -> bool:
    """Whether audit A's record, over a window of AUDIT_WINDOW_CALLS calls, clears the op digests that alone
    flagged it: more requests like audit A, each on fresh inputs, their records judged as one
    (`hostdata.merge_records`). Two calls cannot tell the numbers of a state that changes every call (a rotating
    start row) from numbers the data decided; over the window a state repeats and data does not. False, and audit
    A's own verdict stands, when the window would not fit before the deadline (each request costs about audit A's
    `wall_s`), or a request fails or its spot-checked answer changed (then also `torch_compute`, as in audit A)."""
    more = -(-AUDIT_WINDOW_CALLS // max(1, len(sets))) - 1
    if time.monotonic() + 2.0 * more * wall_s > job.run_deadline:
        return False
    records = [first]
    for k in range(more):
        reply, _, _, comparison = _request(job, sets, rng, 8 + k, limit, audit=True)
        record = provenance_record(reply) if reply.get("ok") else None
        if record is None or not comparison or not comparison["ok"]:
            reason = comparison.get("reason") if comparison else "the call failed"
            job.evidence.torch_compute = job.evidence.torch_compute or (
                f"a timed call of a longer audit window failed or changed its answer once PyTorch's own results were "
                f"poisoned ({reason})")
            return False
        records.append(record)
    return provenance_from(merge_records(records, len(sets)), job.prov_seen, job.prov_codes) is None
