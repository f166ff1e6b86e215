"""One evaluation on one lane: static checks, build, correctness trials, runtime evidence, timing.

The supervisor drives both sides and keeps the verdict: the candidate's process only ever receives its
inputs and returns outputs and timings; the reference worker produces inputs and references and compares.

    build        fork (or take the spare), send the job (HMAC key, folders, init args), import + ModelNew(...)
                 under `compile_timeout_s`
    correctness  per trial t: the candidate allocates an input slot, the reference worker fills it with
                 fresh inputs (distribution t, secret seed) and computes the reference; the candidate runs
                 once (twice in trial 0: different poison, determinism); the reference worker compares the
                 outputs and checks the inputs for mutation. The first failing trial stops the phase.
    evidence     function identities, global flags, threads; on the GPU one profiled forward (coverage)
    timing       perf.py: interleaved rounds with fresh inputs, spot-checked outputs, the stop rule
Everything after the build shares one deadline (`run_timeout_s`). A candidate that times out, dies or
sends a malformed frame ends the evaluation with that verdict; the lane kills its process group and
sweeps escaped processes either way. Each reply is bounded by what its request can return (`reply_limit`).

We run as root in the host's mount namespace over folders the candidate can write (its job folder, its build
folder), so nothing here opens, chowns or unlinks through a name found there: the logs are files we create
and read through our own descriptor (`create_log`, `log_tail`), the twin's folder lives under the lane's root
(`build_twin`), build folders are walked without following links (`scrub_build_dir`, `_chown_tree`) and bounded
in size after every evaluation (`bound_build`, `evict_when_due`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import time
import uuid
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from davinci.kernelgym.accounting import torch_verdict
from davinci.kernelgym.backend import BackendInfo
from davinci.kernelgym.builddirs import (BuildBusy, bound_build, confine_paths, create_log, evict_when_due,  # noqa: F401 (BuildBusy: re-raised to the evaluator)
                                         lock_build_folder, prepare_dirs, release_build_dir)
from davinci.kernelgym.checks import Evidence, Finding
from davinci.kernelgym.config import GymConfig
from davinci.kernelgym.gpugate import Mode, gpu_gate
from davinci.kernelgym.lane import ChildHandle, Lane, WorkerDied
from davinci.kernelgym import hostdata, replay
from davinci.kernelgym.protocol import Channel, ChannelClosed, ChannelTimeout, ProtocolError, malformed_number
from davinci.types import Candidate, Problem

POISON = (0xFF, 0x7F)  # 0xFF..: NaN in every float type; 0x7F..: large finite values


class CandidateFailure(Exception):
    """The candidate's process timed out, died or broke the protocol (the verdict, not an evaluator bug)."""

    def __init__(self, kind: str, message: str, channel: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.channel = kind, message, channel


BUILD_LOCK_SLACK_S = 900.0


class ReferenceFailure(Exception):
    """The problem's own code failed in the reference worker."""


@dataclass
class Job:
    lane: Lane
    problem: Problem
    candidate: Candidate
    cfg: GymConfig
    code: str                         # problem code after shape overrides
    backend: BackendInfo
    checks: tuple[str, ...]
    key: str                          # problem state key in the reference worker
    init_seed: int
    trial_seeds: list[int]
    timing_seed: int
    cache_root: Path
    seed: int | None = None
    info: dict[str, Any] = field(default_factory=dict)     # the reference worker's "problem" reply
    init_blobs: list[Any] = field(default_factory=list)
    child: ChildHandle | None = None
    twin: ChildHandle | None = None                    # the reference twin (perf.py), when eager is timed live
    defer_profile: bool = False                        # profile after timing, not in trial 0 (see profile_pass)
    job_dir: Path | None = None
    run_deadline: float = 0.0
    evidence: Evidence = field(default_factory=Evidence)
    static: list[Finding] = field(default_factory=list)
    advice: list[Finding] = field(default_factory=list)   # static findings shown as feedback, never flags
    timing_incomplete: str = ""                            # timing ran out after correctness held
    last_kernel_share: float | None = None                 # CPU accounting forward: output elements kernels stored
    acct_share_raw: float | None = None                    # ... glue copies not credited (as scored requests report it)
    audited: bool = False                                  # the audit rounds ran after the scored ones (audit.py)
    acct_replay: dict[str, float | None] = field(default_factory=dict)    # accounting call's launch replay
    unwatched_replay: dict[str, float | None] = field(default_factory=dict)  # lowest of unwatched calls' replays
    last_torch_work: float | None = None                   # accounting forward: work of PyTorch's compute ops
    last_torch_hidden: list[str] | None = None             # accounting forward: ops out of the mode's sight
    hidden_work_error: str = ""                            # why the profiler beside the mode saw nothing
    hidden_tampered: str = ""                              # the candidate switched that profiler off
    last_input_share: float | None = None                  # CPU accounting forward: input elements kernels loaded
    last_record: Any = None                                # CPU accounting forward: its hostdata.Record
    prov_seen: set[str] = field(default_factory=set)       # digests of host-made data seen in the accounting calls
    prov_codes: set[str] = field(default_factory=set)      # digests of the kernels the accounting call launched
    compiled: bool = False
    numerics_ok: bool = False
    trials_run: int = 0
    trials_passed: int = 0
    failure: dict[str, Any] | None = None              # the failing comparison (compare.Comparison fields)
    failed_dist: str = ""
    worst: dict[str, Any] | None = None
    error_kind: str | None = None
    error: str = ""
    kernel_ms: float = 0.0
    forward_ms: float = 0.0
    sandbox: dict[str, bool] = field(default_factory=dict)
    perf: dict[str, Any] = field(default_factory=dict)
    build_lock: int | None = None                      # fd holding the flock on this code's build folder
    log_fd: int | None = None                          # our descriptor on the log file we created (log_tail)
    twin_dir: Path | None = None                       # the twin's folder, under the lane's supervisor-only root
    phase_s: dict[str, float] = field(default_factory=dict)  # wall seconds by phase (details.phase_s: where they go)
    # "cand:<op>", "twin:<op>", "ref:<op>" -> [requests, wall seconds]: inside the phases, which round trips the
    # seconds go to (details.round_trips)
    round_trips: dict[str, list[float]] = field(default_factory=dict)
    # each correctness call: [round trip ms, the forward's ms as the candidate reported it, accounted]
    # (details.runs_ms: what a call costs beyond its forward)
    runs_ms: list[list[Any]] = field(default_factory=list)

    def fail(self, kind: str, message: str) -> None:
        if self.error_kind is None:
            self.error_kind, self.error = kind, message


# --- talking to the candidate ------------------------------------------------------------------------

def ask(job: Job, header: dict[str, Any], blobs=(), deadline: float | None = None,
        child: ChildHandle | None = None) -> tuple[dict[str, Any], list]:
    deadline = deadline or job.run_deadline
    child = child or job.child
    t0 = time.monotonic()
    try:
        child.chan.send(header, blobs, deadline)
        reply, out = child.chan.recv(deadline, max_blob_bytes=reply_limit(job, header))
        count_trip(job, f"{'twin' if child is job.twin else 'cand'}:{header.get('op')}", t0)
    except ChannelTimeout:
        raise CandidateFailure("timeout", f"no answer to {header['op']!r} before the deadline") from None
    except ChannelClosed as exc:
        raise CandidateFailure("crash", f"the candidate's process died during {header['op']!r} ({exc})") from None
    except ProtocolError as exc:
        raise CandidateFailure("crash", f"malformed reply to {header['op']!r}", channel=str(exc)) from None
    if not isinstance(reply, dict):
        raise CandidateFailure("crash", "reply is not an object", channel="non-object reply")
    bad = malformed_number(reply)
    if bad:  # the harness only ever sends numbers there: the candidate's process rewrote what it reports
        raise CandidateFailure("crash", f"malformed reply to {header['op']!r}: {bad} is not a number",
                               channel=f"non-numeric {bad}")
    return reply, out


REPLY_SLACK = 16 << 20  # bytes: non-tensor outputs, a reply's own small blobs


def hidden_evidence(reply: dict[str, Any]) -> tuple[list[str] | None, str]:
    """(unseen op names, tamper reason) from a reply's `hidden.HiddenWork.evidence` fields, as bounded strings
    (they come from the candidate's process)."""
    names = reply.get("torch_hidden")
    return ([str(v)[:80] for v in names[:16]] if isinstance(names, list) else None,
            str(reply.get("torch_hidden_tampered") or "")[:200])


def reply_limit(job: Job, header: dict[str, Any]) -> int:
    """The most payload bytes a reply to `header` can legitimately carry: its outputs (one per timed call of a
    `time` request) and the inputs after the call, from the reference worker's own sizes (`out_bytes`,
    `in_bytes`), four times over (a wider dtype than the reference's is a verdict, not a protocol error),
    plus slack. The channel refuses a frame claiming more before reading or allocating it (protocol.py)."""
    calls = max(1, len(header.get("order") or ()))
    out_b, in_b = int(job.info.get("out_bytes", 0) or 0), int(job.info.get("in_bytes", 0) or 0)
    return 4 * (calls * out_b + in_b) + REPLY_SLACK


def ref(job: Job, header: dict[str, Any], blobs=()) -> tuple[dict[str, Any], list]:
    timeout = max(job.cfg.run_timeout_s, 600.0)
    t0 = time.monotonic()
    reply, out = job.lane.ref_call({**header, "key": job.key}, blobs, timeout=timeout)
    count_trip(job, f"ref:{header.get('op')}", t0)
    if reply.get("not_loaded") and header.get("op") != "problem":
        load_problem(job, force=True)  # evicted from the worker's LRU, or the worker was restarted
        reply, out = job.lane.ref_call({**header, "key": job.key}, blobs, timeout=timeout)
    if reply.get("candidate_error"):  # the candidate's own data failed to decode: its verdict, not the problem's
        msg = str(reply["candidate_error"])[:500]
        raise CandidateFailure("crash", f"the reference worker could not use the candidate's data in "
                                        f"{header.get('op')!r}: {msg}", channel=msg)
    if not reply.get("ok"):
        raise ReferenceFailure(reply.get("error", "reference worker error"))
    return reply, out


def fresh_inputs(job: "Job", header: dict[str, Any]) -> tuple[dict[str, Any], list, list]:
    """The reference worker's `refresh` with every candidate process stopped, and those processes (thaw them
    right before the timed request). Over CUDA IPC the reference worker writes the candidate's input slots in
    place: a thread of the candidate's would otherwise see the fresh values and compute the answers before its
    timed request starts, where neither the samples nor the supervisor's wall clock see the work (host
    transport: the values arrive inside the timed request, nothing to guard)."""
    t0 = time.monotonic()
    held = [] if job.lane.transport == "host" else job.lane.freeze_children(keep=job.twin.pids if job.twin else set())
    count_trip(job, "sup:freeze", t0)  # the supervisor's own share of a refresh, next to the requests' shares
    try:
        reply, blobs = ref(job, header)
    except BaseException:
        job.lane.thaw(held)
        raise
    return reply, blobs, held


def load_problem(job: Job, force: bool = False) -> None:
    """Load the problem into the reference worker once per lane (its reply is cached on the lane)."""
    lane = job.lane
    if force or job.key not in lane.problems:
        reply, blobs = ref(job, {"op": "problem", "code": job.code, "init_seed": job.init_seed,
                                 "spec_seed": job.init_seed + 1})
        lane.problems[job.key] = {"reply": reply, "blobs": [bytes(b) for b in blobs]}
    cached = lane.problems[job.key]
    job.info, job.init_blobs = cached["reply"], cached["blobs"]


# --- build ---------------------------------------------------------------------------------------------

def acquire_build_lock(job: Job) -> None:
    """Take this code's build folder for the whole evaluation (flock on `<builds>/<hash>.lock`).

    Lanes of one evaluator, and other evaluator processes on this host, share the content-hashed build
    folders (a CUDA extension is built once, then loaded). Two evaluations of the same code must take turns:
    torch's own `lock` file cannot tell a live build from one killed mid-way, and a switched-user candidate
    owns the folder only while it runs. The lock file lives in the builds folder, which no candidate can
    write; the kernel drops an flock when its holder dies, so a crashed supervisor leaves nothing stale.
    """
    # The holder is itself bounded (compile + run limits, reference calls, cleanup); the slack covers a queue
    # of identical candidates (GRPO groups) behind it. Timing out here is never the candidate's fault.
    job.build_lock = lock_build_folder(job.lane.build_root, job.candidate.code_hash,
                                       job.cfg.compile_timeout_s + job.cfg.run_timeout_s + BUILD_LOCK_SLACK_S)


def count_trip(job: Job, name: str, t0: float) -> None:
    """One request/reply round trip since `t0` into `job.round_trips[name]`."""
    n, sec = job.round_trips.get(name, (0, 0.0))
    job.round_trips[name] = [n + 1, sec + time.monotonic() - t0]


@contextmanager
def phase(job: Job, name: str):
    """Add the wall time of the block to `job.phase_s[name]` (a phase entered twice adds up)."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        job.phase_s[name] = job.phase_s.get(name, 0.0) + time.monotonic() - t0


def gpu_phase(job: Job, mode: Mode) -> AbstractContextManager[float]:
    """This job's lane's GPU gate in `mode` (see gpugate); waits at most the run limit plus the lock slack."""
    return gpu_gate(job.lane.build_root, job.lane.gpu_id, mode, job.cfg.run_timeout_s + BUILD_LOCK_SLACK_S)


def release_build_lock(job: Job) -> None:
    if job.build_lock is not None:
        os.close(job.build_lock)  # closing the descriptor drops the flock
        job.build_lock = None


def build(job: Job) -> None:
    """Send the job and wait for import + ModelNew(...): sets job.compiled or records the failure."""
    cfg, lane = job.cfg, job.lane
    deadline = time.monotonic() + cfg.compile_timeout_s
    job.job_dir, paths, job.log_fd = prepare_dirs(lane, job.candidate)
    child = job.child
    try:
        if child.ready is None:
            child.ready, _ = child.chan.recv(deadline)
        if child.ready.get("error"):
            raise WorkerDied(f"candidate process failed to initialise: {child.ready['error'][-500:]}")
        job.sandbox = child.ready.get("sandbox", {})
        child.inner = int(child.ready.get("pid") or child.pid)
        secret = os.urandom(32)
        header = {"op": "job", "key": secret.hex(), "device": lane.device, "transport": lane.transport,
                  "l2_flush_mb": cfg.l2_flush_mb, "init": job.info["init"], "init_seed": job.init_seed, **paths}
        child.chan.send(header, job.init_blobs, deadline)
        child.chan = Channel(child.sock, verify_key=secret, max_blob_bytes=REPLY_SLACK)
    except ChannelTimeout:
        raise CandidateFailure("timeout", "the candidate's process did not start in time") from None
    except (ChannelClosed, ProtocolError) as exc:
        raise CandidateFailure("crash", f"the candidate's process died before the build ({exc})") from None
    try:
        reply, _ = _recv_build(job, deadline)
    except CandidateFailure as f:
        f.kind = "compile" if f.kind == "crash" else f.kind
        f.message = f"{f.message} (while importing the candidate / building ModelNew)"
        raise
    job.sandbox = dict(reply.get("sandbox") or job.sandbox)  # both stages (isolation.confine ran in the load)
    if reply.get("ok"):
        job.compiled = True
    else:
        job.fail("compile", str(reply.get("error", "build failed")))


def _recv_build(job: Job, deadline: float) -> tuple[dict[str, Any], list]:
    try:
        return job.child.chan.recv(deadline)
    except ChannelTimeout:
        raise CandidateFailure("timeout", f"the build exceeded {job.cfg.compile_timeout_s:g} s") from None
    except ChannelClosed as exc:
        raise CandidateFailure("crash", f"the candidate's process died ({exc})") from None
    except ProtocolError as exc:
        raise CandidateFailure("crash", "malformed reply to the job", channel=str(exc)) from None


# --- the reference twin ------------------------------------------------------------------------------

def fork_twin(job: Job) -> None:
    """Fork the reference twin early, so its device start overlaps the evidence phase (best effort)."""
    if job.twin is None:
        try:
            job.twin = job.lane.fork_child()
        except WorkerDied:
            job.twin = None


def build_twin(job: Job) -> None:
    """The twin: a candidate-like process (same fork, sandbox and harness) running the problem's own `Model`
    under the candidate's init seed. Its code comes in the job message, never from a folder a candidate can
    write, and its own folder (HOME, TMPDIR, log) is made by us outside every candidate's reach; it marks
    itself non-dumpable. Any failure is the evaluator's (`WorkerDied`), never the candidate's."""
    if job.twin is None:  # not forked early (`fork_twin`), or that fork failed
        job.twin = job.lane.fork_child()
    twin, lane = job.twin, job.lane
    # The twin's folder lives under the lane's root (ours, mode 0711, never writable by a candidate), not in
    # the candidate's job folder where a planted link would make us chown a host folder, or a planted FIFO
    # would hang the twin's start: a fresh name, made by us (no exist_ok), handed over through a descriptor
    # opened without following a link, with its log created by us too.
    twins = lane.root / "twins"
    twins.mkdir(mode=0o711, exist_ok=True)
    folder = job.twin_dir = twins / uuid.uuid4().hex[:12]
    folder.mkdir(mode=0o700)
    os.close(create_log(folder / "log.txt", lane.user))
    if lane.user:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchown(fd, *lane.user)
        finally:
            os.close(fd)
    deadline = time.monotonic() + max(60.0, job.cfg.compile_timeout_s)
    secret = os.urandom(32)
    header = {"op": "job", "key": secret.hex(), "device": lane.device, "transport": lane.transport,
              "l2_flush_mb": job.cfg.l2_flush_mb, "init": job.info["init"], "init_seed": job.init_seed,
              "source": job.code, "module": "reference_twin", "cls": "Model", "twin": True,
              "log": str(folder / "log.txt"), "env": {"HOME": str(folder), "TMPDIR": str(folder)},
              "confine": confine_paths(lane, [folder])}
    try:
        ready, _ = twin.chan.recv(deadline)
        twin.inner = int(ready.get("pid") or twin.pid)
        if ready.get("error"):
            raise WorkerDied(f"the reference twin failed to start: {ready['error'][-500:]}")
        twin.chan.send(header, job.init_blobs, deadline)
        twin.chan = Channel(twin.sock, verify_key=secret, max_blob_bytes=REPLY_SLACK)
        reply, _ = twin.chan.recv(deadline)
    except (ChannelTimeout, ChannelClosed, ProtocolError) as exc:
        raise WorkerDied(f"the reference twin did not start ({exc})") from None
    if not reply.get("ok"):
        raise ReferenceFailure(f"the problem's Model failed in the reference twin: {reply.get('error', '')[-1500:]}")


def probe_isolation(lane: Lane) -> dict[str, Any]:
    """Which sandbox layers hold on this lane: a fresh candidate process goes through both sandbox stages
    with a scratch folder and reports, running no candidate code."""
    child = lane.fork_child()
    folder = lane.root / "jobs" / f"probe-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    if lane.user:
        os.chown(folder, *lane.user)
    deadline = time.monotonic() + START_PROBE_S
    secret = os.urandom(32)
    try:
        ready, _ = child.chan.recv(deadline)
        if ready.get("error"):
            raise WorkerDied(f"the isolation probe failed to start: {ready['error'][-500:]}")
        child.chan.send({"op": "job", "key": secret.hex(), "device": lane.device, "transport": lane.transport,
                         "init": [], "init_seed": 0, "probe": True, "log": str(folder / "log.txt"),
                         "confine": confine_paths(lane, [folder])}, (), deadline)
        child.chan = Channel(child.sock, verify_key=secret, max_blob_bytes=REPLY_SLACK)
        reply, _ = child.chan.recv(deadline)
    except (ChannelTimeout, ChannelClosed, ProtocolError) as exc:
        raise WorkerDied(f"the isolation probe did not answer ({exc})") from None
    finally:
        lane.end_child(child)
        shutil.rmtree(folder, ignore_errors=True)
    return dict(reply.get("sandbox") or {})


START_PROBE_S = 120.0


def ask_twin(job: Job, header: dict[str, Any], blobs=()) -> tuple[dict[str, Any], list]:
    """One request to the twin; its failures are the evaluator's or the problem's, never the candidate's."""
    try:
        reply, out = ask(job, header, blobs, child=job.twin)
    except CandidateFailure as f:
        raise WorkerDied(f"the reference twin failed during {header['op']!r}: {f.message}") from None
    if not reply.get("ok"):
        raise ReferenceFailure(f"the problem's Model failed in the reference twin: {str(reply.get('error', ''))[-1500:]}")
    return reply, out


# --- correctness -----------------------------------------------------------------------------------------

def _run_once(job: Job, slot: str, tag: str, poison: int, fill: Any, fill_blobs: list,
              account: bool = False, replay_native: bool | None = None) -> dict[str, Any] | None:
    """One candidate call + trusted check; returns the check reply, or None after recording a failure. The
    accounting call's launches run again afterwards (replay.py: the watched figure), and so do an unwatched
    call's where `replay_native` is given (whether its inputs are of the native distribution)."""
    if fill is None:  # ipc: the reference worker (re)writes the slot in place
        ref(job, {"op": "rewrite", "name": slot})
    t0 = time.monotonic()
    reply, blobs = ask(job, {"op": "run", "slot": slot, "tag": tag, "poison": poison, "fill": fill,
                             "account": account}, fill_blobs)
    ev = reply.get("evidence") or {}
    job.runs_ms.append([round((time.monotonic() - t0) * 1e3, 2), round(float(ev.get("forward_ms", 0.0)), 2), int(account)])
    job.last_kernel_share = ev.get("kernel_share")
    if account:  # kept for the scored rounds' comparison (evaluator._timing); other runs report none
        job.acct_share_raw = ev.get("kernel_share_raw")
    job.last_torch_work = ev.get("torch_work")
    job.last_torch_hidden, tampered = hidden_evidence(ev)
    job.hidden_tampered = job.hidden_tampered or tampered
    if ev.get("torch_hidden_error"):  # the profiler beside the mode could not look: hidden work unknown
        job.hidden_work_error = str(ev["torch_hidden_error"])[:300]
    job.last_input_share = ev.get("input_share")
    job.last_record = hostdata.provenance_record(ev)
    refused = [str(r)[:300] for r in list(ev.get("refused") or [])[:4]]
    if refused:  # the launch raised; a candidate that caught it and went on is refused all the same
        job.fail("compile", "Triton's compiler would refuse these kernels on a GPU, or they run Python inside the "
                            "launch, so the CPU interpreter does not run them either (frontend.py, kernelsource.py): "
                            + "; ".join(refused))
    # the worker sends evidence only when the forward returned
    job.evidence.forwards_returned = (job.evidence.forwards_returned or 0) + int("evidence" in reply)
    job.evidence.launched.update(str(n) for n in ev.get("launched", []))
    job.evidence.launched_after.update(str(n) for n in ev.get("launched_after", []))
    job.kernel_ms += float(ev.get("kernel_ms", 0.0))
    job.forward_ms += float(ev.get("forward_ms", 0.0))
    if not reply.get("ok"):
        if reply.get("subclass"):
            job.evidence.subclass = str(reply["subclass"])
            job.fail("mismatch", str(reply["subclass"]))
        elif reply.get("bad_output"):
            job.fail("mismatch", str(reply["bad_output"]))
        else:
            job.fail("runtime", str(reply.get("error", "forward failed")))
        return None
    check, _ = ref(job, {"op": "check", "name": slot, "outputs": reply.get("outputs"),
                         "inputs_after": reply.get("inputs_after"), "keep_as": tag}, blobs)
    job.evidence.mutated.extend(f"#{i}" for i in check.get("mutated", []) if f"#{i}" not in job.evidence.mutated)
    if (account or replay_native is not None) and replay.wanted(job.cfg, job.lane.cuda):
        replayed, _ = ask(job, {"op": "replay", "tag": tag, "seed": derive_seed(job.timing_seed, tag, "replay")})
        if account:
            job.acct_replay = replay.parsed(replayed)
        else:
            replay.lowest(job.unwatched_replay, replay.unwatched(replayed, bool(replay_native)))
    return check


def _trial(job: Job, t: int) -> bool:
    """Trial t: fresh inputs of distribution t, the candidate's call checked by the reference worker. Trial 0
    runs twice on differently poisoned memory (determinism); its second call is also the accounting call
    (accounting.py), so a second run costs no extra trial."""
    cfg = job.cfg
    slot, dist = f"in{t}", cfg.distributions[t % len(cfg.distributions)]
    alloc, _ = ask(job, {"op": "alloc", "slot": slot, "spec": job.info["spec"]})
    if not alloc.get("ok"):
        job.fail("runtime", str(alloc.get("error", "could not allocate inputs")))
        return False
    trial, fill_blobs = ref(job, {"op": "trial", "name": slot, "seed": job.trial_seeds[t], "dist": dist,
                                  "targets": alloc.get("descs")})
    fill = trial.get("fill")
    runs = [(f"a{t}", POISON[0], False)] + ([(f"b{t}", POISON[1], accounts(job))] if t == 0 and cfg.determinism_check else [])
    ok, tags = True, []
    # the unwatched call of trial 0 (native inputs, as the accounting call's) is replayed (replay.py), and on a GPU
    # that of one more trial drawn per evaluation: a candidate that stalls the timing before any replayed round
    # still meets them (on the CPU the store record covers the others: interpreted replays cost more there)
    drawn = 1 + derive_seed(job.timing_seed, "replayed trial") % max(1, cfg.correctness_trials - 1)
    replayed = t == 0 or (job.lane.cuda and t == drawn)
    for tag, poison, account in runs:
        saved = (job.error_kind, job.error)
        native = (dist == "native") if replayed and not account else None
        check = _run_once(job, slot, tag, poison, fill, fill_blobs, account=account, replay_native=native)
        tags.append(tag)
        if account:
            job.error_kind, job.error = saved  # the poisoned call is evidence, never the verdict itself
            _account_evidence(job, check)
            break
        if check is None:
            ok = False
            break
        c = check["comparison"]
        if not c["ok"]:
            job.failure, job.failed_dist, ok = c, trial.get("dist", dist), False
            job.fail("mismatch", c["reason"])
            break
        if job.worst is None or c["max_abs_error"] >= job.worst["max_abs_error"]:
            job.worst = c
    if ok and len(tags) == 2 and not job.evidence.torch_compute:  # (a changed answer is evidence already)
        pair, _ = ref(job, {"op": "pair", "a": tags[0], "b": tags[1]})
        if not pair["comparison"]["ok"]:
            job.evidence.nondeterministic = pair["comparison"]["reason"]
    if ok and t == 0 and job.lane.cuda and wants_profile(job) and not job.defer_profile:
        profile_pass(job, slot)
    ref(job, {"op": "drop", "trials": [slot], "kept": tags})
    ask(job, {"op": "release", "tags": tags, "slots": [slot]})
    return ok


def accounts(job: Job) -> bool:
    """Whether this evaluation runs the accounting call (its checks are enabled)."""
    return "torch_compute" in job.checks or "host_compute" in job.checks


def _account_evidence(job: Job, check: dict[str, Any] | None) -> None:
    """The accounting call's result as evidence: a failed or changed answer is `torch_compute`, an output the
    kernels did not store is `host_compute` (CPU)."""
    if check is None:
        job.evidence.torch_compute = "the forward failed once PyTorch's own results were poisoned"
    else:
        changed = None if check["comparison"]["ok"] else \
            f"the answer changed once PyTorch's own results were poisoned ({check['comparison']['reason']})"
        job.evidence.torch_compute = torch_verdict(changed, job.last_torch_work, (job.info.get("work") or {}).get(
            "torch_work"), job.last_torch_hidden, job.hidden_tampered)
    share, read = job.last_kernel_share, job.last_input_share
    found = None if job.evidence.torch_compute else hostdata.accounting_verdict(job)
    if found:
        job.evidence.host_compute = found
    elif share is not None and share < KERNEL_SHARE_MIN and not job.evidence.torch_compute:
        job.evidence.host_compute = (f"only {100 * share:.0f}% of the output's elements hold values the candidate's "
                                     "kernels stored there; the rest was computed elsewhere (NumPy, Python)")
    elif read is not None and read < INPUT_SHARE_MIN and not job.evidence.torch_compute:
        job.evidence.host_compute = (f"the candidate's kernels read only {100 * read:.0f}% of the input elements: "
                                     "the answer they stored was computed elsewhere (NumPy, PyTorch out of sight, "
                                     "another thread) and copied")


# At least this share of the output's elements must be what the candidate's kernels stored, and of the input
# elements what they loaded (directly or from a copy PyTorch's glue made; CPU accounting).
KERNEL_SHARE_MIN = INPUT_SHARE_MIN = 0.5


def account_pass(job: Job) -> None:
    """One accounting call on fresh inputs (accounting.py), for an evaluation whose trial 0 ran once (no
    determinism check): checked by the reference worker like a trial, its result is evidence only."""
    slot, tag = "acct", "acct"
    alloc, _ = ask(job, {"op": "alloc", "slot": slot, "spec": job.info["spec"]})
    if not alloc.get("ok"):
        return
    seed = derive_seed(job.trial_seeds[0], "account")
    trial, fill_blobs = ref(job, {"op": "trial", "name": slot, "seed": seed, "dist": "native",
                                  "targets": alloc.get("descs")})
    saved = (job.error_kind, job.error)
    check = _run_once(job, slot, tag, POISON[0], trial.get("fill"), fill_blobs, account=True)
    job.error_kind, job.error = saved
    _account_evidence(job, check)
    ref(job, {"op": "drop", "trials": [slot], "kept": [tag]})
    ask(job, {"op": "release", "tags": [tag], "slots": [slot]})


def wants_profile(job: Job) -> bool:
    return job.cfg.profile_coverage or "decoy_kernel" in job.checks


def profile_pass(job: Job, slot: str) -> None:
    """One forward of the candidate under torch.profiler on `slot`'s inputs: kernel names and device time.

    When the candidate will be timed this runs after timing (`defer_profile`): the profiler leaves CUPTI
    attached to the process, and a profiled candidate came out 0.4% slower than the twin on the H100
    (|ln self-speedup| median 0.0044 vs 0.0019 without; benchmarks/results/h100/kernelgym/self_speedup)."""
    prof, _ = ask(job, {"op": "profile", "slot": slot})
    job.evidence.profiler_kernels = [tuple(k) for k in prof.get("kernels", [])] if prof.get("ok") else None


def correctness(job: Job) -> None:
    for t in range(job.cfg.correctness_trials):
        job.trials_run = t + 1
        if not _trial(job, t):
            return
        job.trials_passed = t + 1
    job.numerics_ok = job.error_kind is None


def gather_evidence(job: Job) -> None:
    reply, _ = ask(job, {"op": "integrity"})
    if not reply.get("ok"):
        return
    ev = job.evidence
    ev.patched = list(dict.fromkeys([*ev.patched, *(str(p) for p in reply.get("patched", []))]))  # before + after timing
    ev.state_changed.update(reply.get("state_changed", {}))
    ev.refused = list(dict.fromkeys([*ev.refused, *(str(r) for r in reply.get("refused", []))]))
    threads = reply.get("threads") or []
    if len(threads) == 4:
        ev.python_threads = (int(threads[0]), int(threads[2]))


# --- ending -----------------------------------------------------------------------------------------------

def describe_exit(status: dict[str, Any]) -> str:
    if not status.get("exited"):
        return "still running when killed"
    sig = status.get("signal")
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    return f"exited with code {status.get('code')}"


def log_tail(job: Job, limit: int = 2500) -> str:
    """The end of the candidate's log, read through the descriptor on the file we created (`create_log`):
    never through its name in the candidate-writable job folder, where a link or a FIFO may stand now."""
    if job.log_fd is None:
        return ""
    try:
        size = os.fstat(job.log_fd).st_size
        start = max(0, size - limit)
        return os.pread(job.log_fd, min(limit, size), start).decode(errors="replace")
    except OSError:
        return ""


def cleanup(job: Job) -> None:
    """After the candidate's process is gone: drop its job folder, take its build folder back, unlock it."""
    kept = 0
    try:
        if job.log_fd is not None:
            os.close(job.log_fd)
            job.log_fd = None
        if job.twin_dir is not None:
            shutil.rmtree(job.twin_dir, ignore_errors=True)
        if job.job_dir is not None:
            shutil.rmtree(job.job_dir, ignore_errors=True)
            kept = bound_build(job.lane, job.candidate.code_hash, job.cfg)
            release_build_dir(job.lane, job.candidate)
    finally:
        release_build_lock(job)
    evict_when_due(job.lane, job.candidate.code_hash, kept, job.cfg.build_cache_max_mb << 20)


def derive_seed(*parts: Any) -> int:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 2
