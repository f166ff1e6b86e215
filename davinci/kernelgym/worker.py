"""The candidate's process: trusted harness code that imports, runs and times one untrusted `ModelNew`.

Forked from the zygote, it enters the sandbox (`sandbox.enter_sandbox`), initialises the device, says
"ready" and waits (a warm spare waits here). The job message brings the per-job HMAC key, the build and
cache folders and the init arguments. Before the candidate is imported the harness captures the function
identities and global flags it will check later (`guards`), builds its timer (`timing.DeviceTimer`) and
installs the Triton launch recorder; the key stays inside an `hmac` object. Then, one reply per request:

    alloc   allocate an input slot (ipc: export its CUDA IPC descriptors for the reference worker to fill)
    run     poison free device memory, forward once, device sync, check output types, export outputs
            (host transport: with the inputs as they are after the call, for the mutation check)
    time    fill input sets (host), time the calls, return every call's output (the audit flags: the same
            request with PyTorch's results poisoned and the CPU profiler on, or under the GPU profiler; audit.py)
    warm    warm-up calls on inputs of their own (outside every timed request)
    release poison and drop kept outputs and slots
    replay  run a kept call's captured Triton launches again (the last timed request's, or a run's): what they
            write, and how it depends on the inputs (replay.py; compared in audit.py and evaluator._evidence)
    profile one forward under torch.profiler (GPU): device time per kernel name
    integrity  identities, global flags and threads now vs. before the import
    bye     exit (os._exit: no atexit hooks, no buffered output)

The reference twin runs this same harness on the problem's own `Model` (job fields `source`, `cls`, `twin`:
the code comes in the message, the process marks itself non-dumpable), so live eager is timed in the same
kind of process as the candidate (perf.py).

Nothing verdict-critical is decided here: outputs are compared and timings bounded in the supervisor and
the reference worker. The candidate's stdout/stderr go to the job's log file (read only for feedback).

The request loop's entry points (`entry_points()`: the handlers, `serve`, Channel.send/recv, with their code
objects) are taken before the candidate is imported, and requests are answered by those functions, never by
attributes looked up later: a handler the candidate binds on the instance or the class answers nothing, and
integrity names it (cheats c2_hp_shadow_handlers, c2_hp_class_handlers). What this cannot stop: code running
in this process can always write frames of its own (the signing key's hmac object lives here too), so the
evidence that comes from here (launches, coverage, PyTorch's share, integrity) raises the bar and no more;
correctness and every timing figure are measured outside the candidate's reach.
"""

from __future__ import annotations

import faulthandler
import gc
import importlib
import importlib.util
import os
import sys
import tempfile
import time
import traceback
import types
from contextlib import nullcontext
from typing import Any

import torch

from davinci.kernelgym import guards, pyaudit, transport
from davinci.kernelgym.compare import flatten_outputs
from davinci.kernelgym.protocol import Channel, ChannelError, socket_from_fd
from davinci.kernelgym.accounting import PoisonMode, StoreRecorder, _extent
from davinci.kernelgym.provenance import Provenance, candidate_call, harness_writes, module_globals, record_evidence
from davinci.kernelgym.replay import Replay
from davinci.kernelgym.hidden import HiddenWork, accounted
from davinci.kernelgym.isolation import confine
from davinci.kernelgym.sandbox import enter_sandbox, mark_trusted_process
from davinci.kernelgym.static_outputs import Reuse, copy_outputs, stale_calls
from davinci.kernelgym.timing import DeviceTimer


# Captured when the zygote imports this module, long before any candidate exists in the process.
_type, _isinstance = type, isinstance


def _tb(exc: BaseException, limit: int = 4000) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-limit:]


def _check_leaves(leaves: list[Any], device: str) -> dict[str, str] | None:
    """None when every output leaf is exactly a dense torch.Tensor on the device (or a plain number)."""
    for i, leaf in enumerate(leaves):
        kind = _type(leaf)
        if kind in (int, float, bool):
            continue
        if _isinstance(leaf, torch.Tensor) and kind is not torch.Tensor:
            return {"subclass": f"output {i} is a {kind.__module__}.{kind.__qualname__}, a torch.Tensor subclass"}
        if kind is not torch.Tensor:
            return {"bad_output": f"output {i} is a {kind.__name__}, not a torch.Tensor"}
        if leaf.layout is not torch.strided or leaf.is_meta or leaf.is_quantized:
            return {"bad_output": f"output {i} has layout {leaf.layout} (a dense strided tensor is required)"}
        if leaf.device.type != torch.device(device).type:
            return {"bad_output": f"output {i} is on {leaf.device}, expected {device}"}
    return None


def _writable(job: dict[str, Any]) -> list[str]:
    """The folders of the job that the candidate can write: its job folder and its build folder."""
    build = job.get("env", {}).get("TRITON_CACHE_DIR")
    return [os.path.dirname(job["path"]), *([os.path.dirname(build)] if build else [])]


def _start_triton_driver() -> None:
    """Triton's driver, started by the harness: its probe calls the CUDA driver through ctypes, which the audit hook
    refuses while the candidate's code is on the stack (pyaudit.py), and it would otherwise start at the candidate's
    first launch. With the job's folders set: it loads its compiled utilities from the build folder's cache."""
    try:
        from triton.runtime import driver

        driver.active.get_current_device()
    except Exception:  # no Triton or no GPU driver: the candidate's launch reports it
        pass


def _import_module(job: dict[str, Any]) -> Any:
    """The job's module: from `path` (a candidate), or from `source` sent in the job (the reference twin's
    trusted code, never read from a folder a candidate can write)."""
    if job.get("source") is not None:
        module = types.ModuleType(job["module"])
        module.__file__ = f"<{job['module']}>"
        sys.modules[job["module"]] = module
        exec(compile(job["source"], module.__file__, "exec"), module.__dict__)
        return module
    spec = importlib.util.spec_from_file_location(job["module"], job["path"])
    module = importlib.util.module_from_spec(spec)
    sys.modules[job["module"]] = module
    spec.loader.exec_module(module)
    return module


class Harness:
    def __init__(self, sock: Any, job: dict[str, Any], blobs: list[Any], sandbox: dict[str, bool]) -> None:
        if job.get("twin"):
            mark_trusted_process()  # the reference twin: no same-user ptrace or /proc/<pid>/mem from a candidate
        self.device = job["device"]
        self.cuda = self.device.startswith("cuda")
        # Inference only, set once (not per call) so the candidate's calls cost what the baseline's cost.
        torch.set_grad_enabled(False)
        self.mode = job.get("transport", "host")
        self.rec = guards.LaunchRecorder()
        self.rec.install(self.cuda)
        self.stores = StoreRecorder()  # CPU: which output elements the kernels stored (accounting.py)
        self.prov_key = os.urandom(16)
        if not self.cuda:
            self.stores.install()
        importlib.import_module("torch._dynamo")  # rebinds torch.manual_seed on first import: before capturing

        self.refs = guards.capture()
        self.state0 = guards.global_state()
        self.timer = DeviceTimer(self.device, int(job.get("l2_flush_mb", 256)))
        self.chan = Channel(sock, sign_key=bytes.fromhex(job["key"]), max_blob_bytes=None)  # from the supervisor
        job["key"] = ""
        self._exit, self._perf = os._exit, time.perf_counter
        self._sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        self.sandbox = sandbox
        self.init_args = transport.decode(job.get("init", []), blobs, "cpu")
        self.slots: dict[str, list[Any]] = {}
        self.kept: dict[str, list[Any]] = {}
        # by kept tag: the launches and inputs of its calls, until its outputs are released (op_replay)
        self.replay, self.replayable = Replay(), {}
        self.exports = transport.Exports()  # CUDA IPC exports, released with their slot or kept output
        self.model: Any = None
        self.threads0 = guards.thread_counts()
        self.warmed = False
        self.static_outputs = False  # the warm-up calls handed back one storage twice (static_outputs.py)
        self.timed_reuse = (False, False)  # the last timed request's (static outputs, audit A) for op_release
        self._collect_after = False
        # a candidate's code may not reach this process's frames, objects or memory (pyaudit.py); the hook is added
        # before its module is imported (load), and its refusals are reported with the integrity request
        self.refused = (pyaudit.install([job["path"]], writable=_writable(job)) if job.get("source") is None
                        and job.get("path") else list)
        self.objects0 = guards.capture_objects({"harness": self, "timer": self.timer, "recorder": self.rec,
                                                "stores": self.stores, "channel": self.chan})

    # --- compile phase ---
    def load(self, job: dict[str, Any]) -> dict[str, Any]:
        os.environ.update({k: str(v) for k, v in job.get("env", {}).items()})
        # the zygote resolved (and cached) the lane's temporary folder, which is read-only once confined:
        # resolve it again from the job's TMPDIR (Triton writes its .ptx/.cubin there on a GPU)
        tempfile.tempdir = None
        # Stage 2 of the sandbox, before any of the job's code exists in the process (isolation.py).
        self.sandbox = confine(job.get("confine") or {}, self.sandbox)
        if self.refused is not list:  # a candidate's job: the audit hook is in place before its import
            self.sandbox = {**self.sandbox, "audit_hook": True}
        if job.get("probe"):  # the evaluator asking which layers hold here (Evaluator.isolation)
            return {"ok": True, "sandbox": self.sandbox}
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        faulthandler.enable()
        if self.cuda:
            _start_triton_driver()
        t0 = self._perf()
        cls_name = str(job.get("cls", "ModelNew"))
        try:
            module = _import_module(job)
            if job.get("prebuild"):
                return {"ok": True, "import_s": self._perf() - t0}
            cls = getattr(module, cls_name, None)
            if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
                return {"ok": False, "error": f"the candidate defines no class {cls_name}(nn.Module)"}
            torch.manual_seed(int(job["init_seed"]))
            model = cls(*self.init_args)
            self.model = model.to(self.device)
        except BaseException as exc:  # SystemExit / KeyboardInterrupt from the candidate too
            return {"ok": False, "error": _tb(exc)}
        self.threads0 = guards.thread_counts()
        return {"ok": True, "import_s": self._perf() - t0, "sandbox": self.sandbox, "l2_reset": self.timer.l2_reset}

    # --- ops ---
    def _fill(self, slot: list[Any], descs: Any, blobs: list[Any]) -> None:
        values = transport.decode(descs, blobs, "cpu")
        if len(values) != len(slot):
            raise ValueError("fill does not match the slot")
        for i, v in enumerate(values):
            if isinstance(slot[i], torch.Tensor) and isinstance(v, torch.Tensor):
                slot[i].copy_(v)
            else:
                slot[i] = v

    def op_alloc(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        slot = transport.allocate(h["spec"], self.device)
        self.slots[h["slot"]] = slot
        if self.mode == "ipc":
            self.exports.release(f"slot:{h['slot']}")  # a slot allocated again under the same name
            descs = transport.encode(slot, "ipc", [])
            self.exports.add(f"slot:{h['slot']}", descs)
            return {"ok": True, "descs": descs}, []
        return {"ok": True}, []

    def op_run(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        slot = self.slots[h["slot"]]
        # accounting.py: PyTorch's share of the answer (custom ops judged by the launches inside them)
        mode = PoisonMode(launches=self.rec.count, track_copies=self.stores.installed) if h.get("account") else None
        if h.get("fill") is not None:
            if mode is not None:  # everything the process does with these inputs is accounted, the fill too
                with mode:
                    self._fill(slot, h["fill"], blobs)
            else:
                self._fill(slot, h["fill"], blobs)
        poisoned = guards.poison_cached_blocks(self.device, int(h["poison"])) if h.get("poison") is not None else 0
        before = guards.thread_counts()
        hidden = HiddenWork()  # PyTorch work out of the mode's sight (the CPU profiler beside it, hidden.py)
        self.rec.start()
        lowering0 = self.rec.frontend_s  # the CPU front-end check's own time (frontend.py): not the forward's
        t0 = self._perf()
        self.rec.capture = []  # what the call launched, for a replay (replay.py)
        try:
            if mode is not None:
                elements = mode.track_inputs(slot)
                # the call's ops and integer arguments digested too, so that the supervisor can compare them with
                # an accounting call on other inputs (hostdata.accounting_verdict)
                prov = self._provenance(mode, slot, int_args=True)
                self.stores.start()
                with candidate_call(prov, slot), accounted(mode) as hidden:
                    out = self.model(*slot)
                self.stores.stop()
            else:
                out = self.model(*slot)
            self._sync()
        except BaseException as exc:
            self.rec.capture = None
            self.rec.stop()
            self.stores.stop()
            self.rec.provenance = None
            return {"ok": False, "error": _tb(exc)}, []
        # the evaluator's own work inside the call (the front-end check, the provenance record) is not the forward's
        own_s = (self.rec.frontend_s - lowering0) + (prov.cost_s if mode is not None and prov is not None else 0.0)
        fwd_ms = (self._perf() - t0 - own_s) * 1e3
        captured, self.rec.capture = self.rec.capture or [], None
        launched, kernel_ms = self.rec.stop()
        self.rec.start()  # from here on the harness takes the outputs over: no kernel of the candidate's may run
        try:
            leaves = flatten_outputs(out)
        finally:
            after, _ = self.rec.stop()
        evidence = {"launched": launched, "kernel_ms": kernel_ms, "forward_ms": fwd_ms, "poisoned": poisoned,
                    "threads": [*before, *guards.thread_counts()], "launched_after": after,
                    "refused": list(self.rec.refused[:4])}  # kernels the GPU front end refused, even if caught
        if mode is not None:
            evidence.update(self._accounting(mode, hidden, leaves, elements))
            unhooked = prov is not None and (mode.provenance is not prov or self.rec.provenance is not prov)
            self.rec.provenance = mode.provenance = None
            evidence.update(record_evidence(prov, leaves, unhooked, 1, self.stores.overflow))
        bad = _check_leaves(leaves, self.device)
        if bad:
            return {"ok": False, **bad, "evidence": evidence}, []
        self._drop_kept(h["tag"])
        self.kept[h["tag"]] = leaves
        self.replayable[h["tag"]] = ([captured], [slot])
        out_blobs: list[Any] = []
        self.rec.start()
        try:
            outputs = transport.encode(leaves, self.mode, out_blobs)
        finally:
            evidence["launched_after"] = [*after, *self.rec.stop()[0]]
        self.exports.add(f"tag:{h['tag']}", outputs)
        reply = {"ok": True, "outputs": outputs, "evidence": evidence}
        if self.mode == "host":
            reply["inputs_after"] = transport.encode(slot, "host", out_blobs)
        return reply, out_blobs

    def _provenance(self, mode: PoisonMode, slot: list[Any], int_args: bool) -> Provenance | None:
        """CPU: vouch for the forward's starting state (inputs, the model, its module's globals) and watch what
        every op and launch reads from here on (provenance.py)."""
        if not self.stores.installed:
            return None
        # one key per process: records compare by digest; integer launch arguments and op digests where calls
        # compare (audit A's calls; the accounting calls, with each other)
        prov = Provenance(self.stores, key=self.prov_key, int_args=int_args)
        prov.snapshot([slot, self.model, module_globals(self.model)])
        mode.provenance = self.rec.provenance = prov
        return prov

    def _accounting(self, mode: PoisonMode, hidden: HiddenWork, leaves: list[Any], elements: int) -> dict[str, Any]:
        """The accounting forward's evidence (accounting.py): PyTorch's work, seen by the mode or out of its
        sight, and on the CPU the kernels' share of the output's stores and of the input's loads."""
        evidence = {"torch_ops": mode.poisoned[:32], "torch_work": mode.work + hidden.work, **hidden.evidence()}
        if self.stores.installed:
            evidence["kernel_share"] = self.stores.kernel_share(leaves, mode.copies)
            evidence["kernel_share_raw"] = self.stores.kernel_share(leaves)  # as every scored request reports it
            evidence["input_share"] = self.stores.input_share(mode.derived, elements)
            self.stores.clear()
        return evidence

    def op_time(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        # No cyclic garbage collection inside the clocked request (a pause there lands on whichever side it
        # hits, and the wall-clock floor compares both sides' requests); the young generations are
        # collected after the reply, outside the supervisor's clock.
        gc.disable()
        try:
            return self._time(h, blobs)
        finally:
            gc.enable()
            self._collect_after = True

    def _time(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        if h.get("audit"):
            return self._audit(h, blobs)
        if h.get("stores"):
            return self._recorded(h, blobs)
        if h.get("profile") and self.cuda:
            return self._profiled(h, blobs)
        t0 = self._perf()
        sets = [self.slots[name] for name in h["sets"]]
        with self.timer.harness(), harness_writes(self.rec.provenance, [x for slot in sets for x in slot]):
            for slot, descs in zip(sets, h.get("fill") or []):  # the harness's own device work (a profiled round
                self._fill(slot, descs, blobs)                  # leaves it out), its own writes (provenance)
        self._drop_kept("timed")  # normally released already; a round that failed midway may have left it
        t1 = self._perf()
        with self.timer.harness():
            idle = self.timer.wait_idle(h.get("canary_limit_ms"))
        if not self.warmed:
            self._warm(sets[0], int(h.get("warmup", 2)), len(sets))
        call, launches, captured = self._counting(self.model)  # the call the reference worker times for the baselines
        before = guards.thread_counts()
        after: list[float] = []
        # CPU: every scored request records the kernels' stores (audit.py), so the record being on tells the
        # candidate nothing about which requests are checked
        record = self.stores.installed and not self.stores.recording
        if record:
            self.stores.start()
        copies: list[list[Any]] | None = [] if self.static_outputs else None
        t2 = self._perf()
        try:
            events, hosts, outs = self.timer.time_calls(call, sets, h["order"], keep=True, after=after,
                                                        on_return=None if copies is None else
                                                        (lambda out: copies.append(self._copy(out))))
        finally:
            if record:
                self.stores.stop()
        t3 = self._perf()
        handed = self._hand_over(outs, copies)
        if "bad" in handed:
            return {"ok": False, **handed["bad"]}, []
        leaves = handed["leaves"]
        self.replayable["timed"] = (captured, [sets[j] for j in h["order"]])
        shares = {}
        if record:
            shares = {"kernel_share_raw": self.stores.kernel_share([x for call_leaves in leaves for x in call_leaves]),
                      "input_share_raw": self._input_share_raw(sets)}
            self.stores.clear()
        # which calls handed back an earlier call's storage is asked for with the release, after the reply: the
        # comparison is the harness's cost, not the candidate's, so it stays out of the supervisor's clock
        self.timed_reuse = (copies is not None, bool(h.get("accounted")))
        return {"ok": True, "event_ms": events, "host_ms": hosts, "after_ms": after, "overhead_ms": self.timer.overhead_ms,
                "launched_after": handed["late"], "outputs": handed["outputs"], "launches": launches,
                "threads": [*before, *guards.thread_counts()],
                "canary_ms": idle[0], "canary_probes": idle[1], **shares,
                # where the request's time went, by this process's own clock (a diagnostic, never a figure)
                "phases_ms": {"fill": (t1 - t0) * 1e3, "probe": (t2 - t1) * 1e3, "calls": (t3 - t2) * 1e3,
                              "outputs": (self._perf() - t3) * 1e3}}, handed["blobs"]

    def _counting(self, model: Any) -> tuple[Any, list[int], list[list]]:
        """`model` wrapped to count each timed call's Triton launches (the launch record's running total, read
        before and after) and to capture them for a replay (replay.py), and the lists they land in. Every timed
        call captures alike, so a call cannot tell whether a replay follows. The twin runs the same wrapper:
        both sides pay for it."""
        launches: list[int] = []
        captured: list[list] = []
        rec = self.rec

        def call(*args: Any) -> Any:
            n0 = rec.total
            rec.capture = []
            try:
                with candidate_call(rec.provenance, args):  # audit A: which call each read and op belongs to
                    return model(*args)
            finally:
                launches.append(rec.total - n0)
                captured.append(rec.capture or [])
                rec.capture = None
        return call, launches, captured

    def _reused(self, leaves: list[list[Any]], copies: list[list[Any]] | None, accounted: bool) -> int:
        """Timed calls that handed back an earlier call's storage: any, unless the warm-up found static outputs
        (`copies`); then those whose contents did not change (static_outputs.stale_calls)."""
        if copies is None:
            ptrs = [x[0].data_ptr() for x in leaves if x and isinstance(x[0], torch.Tensor)]
            return len(ptrs) - len(set(ptrs))
        if accounted:  # audit A: the comparison's own ops (eq, all on a GPU) would count as PyTorch's work out
            return 0   # of the mode's sight; the round's spot check remains
        with self.timer.harness():
            return stale_calls(leaves, copies)

    def _copy(self, out: Any) -> list[Any]:
        with self.timer.harness():  # the harness's own device work (a profiled round leaves it out)
            return copy_outputs(out)

    def _hand_over(self, outs: list[Any], copies: list[list[Any]] | None = None) -> dict[str, Any]:
        """Every timed call's output, checked and encoded in this same request (the supervisor's clock covers
        it: a result finished only when asked for would otherwise escape the timing round). Triton launches
        are recorded meanwhile: any is the candidate's code running inside the hand-off (`late`). With
        `copies` (static outputs), those are what is handed over; the outputs as returned stay kept for the
        launch replay and the store record."""
        self.rec.start()
        try:
            leaves = [flatten_outputs(o) for o in outs]
            self.kept["timed"] = leaves  # type: ignore[assignment]
            self.kept["timed:copies"] = copies or []
            blobs: list[Any] = []
            outputs = []
            with self.timer.harness():
                for j, call_leaves in enumerate(leaves):
                    bad = _check_leaves(call_leaves, self.device)
                    if bad:
                        return {"bad": bad}
                    outputs.append(transport.encode(copies[j] if copies else call_leaves, self.mode, blobs))
        finally:
            late, _ = self.rec.stop()
            self.exports.add("tag:timed", outputs)
        return {"leaves": leaves, "outputs": outputs, "blobs": blobs, "late": late}

    def _audit(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        """An audit round (audit.py): the same timed request, its fill and calls run with every large PyTorch
        result poisoned (accounting.py) and, on the CPU, the kernels' stores recorded. Its samples are never
        used; its outputs are checked like any round's."""
        mode = PoisonMode(launches=self.rec.count, track_copies=self.stores.installed)
        prov = self._provenance(mode, [x for name in h["sets"] for x in self.slots[name]],
                                int_args=len(h.get("order") or ()) > 1)
        self.stores.start()
        try:
            with accounted(mode) as hidden:  # and the CPU profiler: PyTorch work out of the mode's sight
                reply, out_blobs = self._time({**h, "audit": False, "accounted": True}, blobs)
        finally:
            self.stores.stop()
            unhooked = prov is not None and (mode.provenance is not prov or self.rec.provenance is not prov)
            self.rec.provenance = mode.provenance = None
        reply["torch_ops"] = mode.poisoned[:32]
        reply["torch_work"] = (mode.work + hidden.work) / max(1, len(h.get("order") or ()))  # per timed call
        reply.update(hidden.evidence())
        reply["accounting_ms"] = hidden.overhead_ms  # the profiler's own cost inside this request (audit.py)
        if self.stores.installed and reply.get("ok"):
            timed = self._timed_leaves()
            reply["kernel_share"] = self.stores.kernel_share(timed, mode.copies)
            reply["kernel_share_raw"] = self.stores.kernel_share(timed)  # compared with the unwatched audit's
            reply["input_share_raw"] = self._input_share_raw([self.slots[name] for name in h["sets"]])
            reply.update(record_evidence(prov, timed, unhooked, len(h.get("order") or ()) or 1,
                                                   self.stores.overflow))
            reply["accounting_ms"] = float(reply.get("accounting_ms") or 0.0) + (prov.cost_s * 1e3 if prov else 0.0)
        self.stores.clear()
        return reply, out_blobs

    def _recorded(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        """The unwatched audit round (CPU, audit.py): the same timed request with only the kernels' stores
        recorded, no dispatch mode and no profiler; the share of the timed outputs the kernels stored (no glue
        copies: those need the mode) is compared with the poisoned audit's."""
        self.stores.start()
        try:
            reply, out_blobs = self._time({**h, "stores": False}, blobs)
        finally:
            self.stores.stop()
        if self.stores.installed and reply.get("ok"):
            reply["kernel_share_raw"] = self.stores.kernel_share(self._timed_leaves())
            reply["input_share_raw"] = self._input_share_raw([self.slots[name] for name in h["sets"]])
        self.stores.clear()
        return reply, out_blobs

    def _input_share_raw(self, sets: list[list[Any]]) -> float | None:
        """The share of the timed inputs' elements the kernels loaded, from the inputs' own storages only (glue
        copies of them need the dispatch mode to be tracked): compared between audit A and the unwatched requests."""
        tensors = [t for slot in sets for t in slot if isinstance(t, torch.Tensor) and t.device.type == "cpu"]
        return self.stores.input_share([_extent(t) for t in tensors], sum(t.numel() for t in tensors))

    def _timed_leaves(self) -> list[Any]:
        """Every output tensor of the last timed request's calls (kept until the supervisor releases them)."""
        return [x for leaves in self.kept.get("timed", []) for x in leaves]

    def _profiled(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        """The profiled audit round (GPU): the same timed request under torch.profiler; every kernel and copy
        except the harness's own (input fills, the L2 flush, the idle probe, output hand-off), which run
        inside HARNESS_RANGE and are subtracted by name (`_profiled_kernels`)."""
        from torch.profiler import ProfilerActivity, profile, record_function

        self.timer.harness = lambda: record_function(HARNESS_RANGE)
        try:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                reply, out_blobs = self._time({**h, "profile": False}, blobs)
                self._sync()
        finally:
            self.timer.harness = nullcontext
        reply["kernels"] = _profiled_kernels(prof.events())
        return reply, out_blobs

    def _warm(self, args: list[Any], reps: int, calls: int = 0) -> None:
        """`reps` warm-up calls, at least as many as a timing request holds (`calls`): a storage handed back
        again while the candidate still holds it makes every later timed call's outputs copied on return."""
        watch = Reuse(args)
        self.timer.warmup(lambda *a: watch.see(self.model(*a)), args, max(reps, calls))
        self.static_outputs = watch.found
        self.timer.calibrate()
        self.warmed = True

    def op_warm(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        """Warm-up calls on inputs no timed round uses (their own refresh), so every timed request holds only
        timed calls and the supervisor's clock of it compares like for like with the twin's."""
        slot = self.slots[h["sets"][0]]
        if h.get("fill"):
            self._fill(slot, h["fill"][0], blobs)
        self._warm(slot, int(h.get("warmup", 2)), len(h["sets"]))
        return {"ok": True}, []

    def _drop_kept(self, tag: str) -> None:
        self.replayable.pop(tag, None)
        kept = [self.kept.pop(tag, None) or [], self.kept.pop(f"{tag}:copies", None) or []]
        for leaf in flatten_outputs(kept):
            # Destroy released results so nothing can hand the same memory back as a fresh answer.
            if isinstance(leaf, torch.Tensor) and leaf.dtype.is_floating_point:
                leaf.fill_(float("nan"))
        self.exports.release(f"tag:{tag}")

    def op_release(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        """Drop kept outputs and slots. `reused`: first count the last timed request's calls that handed back an
        earlier call's storage (`_reused`), outside that request's clock."""
        reply: dict[str, Any] = {"ok": True}
        if h.get("reused") and "timed" in self.kept:
            static, accounted = self.timed_reuse
            copies = self.kept.get("timed:copies") if static else None
            reply["reused_storage"] = self._reused(self.kept["timed"], copies, accounted)
        for tag in h.get("tags", []):
            self._drop_kept(tag)
        for name in h.get("slots", []):
            self.slots.pop(name, None)
            self.exports.release(f"slot:{name}")
        if self.cuda:
            self._sync()
            torch.cuda.ipc_collect()
            # When slots go (a trial or the timing phase ends), idle cached memory goes back to the driver:
            # the reference worker shares the device. Never between timing rounds: a timed call would then
            # pay for cudaMalloc.
            if h.get("slots") and torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > (1 << 30):
                torch.cuda.empty_cache()
        return reply, []

    def op_replay(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        """The captured launches of a kept tag's calls (the last timed request's, or a run's; `calls`: only those
        of the request) run again (replay.py): the share of each call's output they rewrite and the share that
        changes with the inputs, for the supervisor's comparisons (audit.py, evaluator._evidence)."""
        tag = str(h.get("tag", "timed"))
        captured, inputs = self.replayable.get(tag, ([], []))
        kept = self.kept.get(tag) or []
        outputs = kept if tag == "timed" else [kept]
        picked = [j for j in h.get("calls") or range(len(captured)) if isinstance(j, int) and 0 <= j < len(captured)]
        with self.timer.harness():
            shares = self.replay.shares([captured[j] for j in picked], [outputs[j] for j in picked],
                                        [inputs[j] for j in picked], int(h.get("seed", 0)))
        return {"ok": True, **shares}, []

    def op_profile(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        from torch.profiler import ProfilerActivity, profile

        slot = self.slots[h["slot"]]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            self.model(*slot)
            self._sync()
        return {"ok": True, "kernels": _profiled_kernels(prof.events())}, []

    def op_integrity(self, h: dict[str, Any], blobs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        written = [f"{label} (namespace written during the evaluation)" for label in self.refs["seals"]()]
        return {"ok": True, "patched": written + guards.changed(self.refs) + guards.objects_changed(self.objects0),
                "state_changed": guards.state_diff(self.state0, guards.global_state()),
                "threads": [*self.threads0, *guards.thread_counts()], "refused": self.refused()}, []

    def serve(self, first_reply: dict[str, Any], entries: tuple) -> int:
        """Answer requests until "bye", through `entries` (`entry_points()`, taken before the candidate was
        imported): requests go to those functions, never to attributes looked up now on the instance or the
        class; replies leave through that `Channel.send`; integrity also names every entry the candidate has
        since replaced. Only plain loops, `is` and type slots here: a builtin or helper looked up by name could
        itself have been replaced. (A candidate running arbitrary code in this process can still write frames
        of its own: correctness and timing are measured outside it; see the module docstring.)"""
        send = recv = None
        for label, _, fn, _ in entries:
            if label == "Channel.send":
                send = fn
            elif label == "Channel.recv":
                recv = fn
        try:
            send(self.chan, first_reply)
            if not first_reply.get("ok"):
                return 0
            while True:
                header, blobs = recv(self.chan)
                op = header.get("op")
                if op == "bye":
                    return 0
                replaced = [label for label, owner, fn, code in entries
                            if fn.__code__ is not code or owner.__dict__.get(label.split(".")[-1]) is not fn]
                handler = None
                for label, _, fn, _ in entries:
                    if label == f"Harness.op_{op}":
                        handler = fn
                try:
                    # any replaced harness function could run the candidate's code inside the request: only
                    # integrity (which names them) is answered then
                    if handler is None or (replaced and op != "integrity"):
                        raise RuntimeError(f"no request {op!r}" if handler is None else
                                           f"the harness was modified ({', '.join(replaced[:4])})")
                    reply, out_blobs = handler(self, header, blobs)
                    if op == "integrity" and reply.get("ok"):
                        reply["patched"] = [*reply.get("patched", []), *(f"{n} (harness function replaced)" for n in replaced)]
                except BaseException as exc:
                    reply, out_blobs = {"ok": False, "error": _tb(exc)}, []
                send(self.chan, reply, out_blobs)
                if self._collect_after:
                    self._collect_after = False
                    gc.collect(1)
        except ChannelError:
            return 3


def entry_points() -> tuple:
    """("Class.function", class, function, code) of every function of the harness's own classes (the request
    handlers and their helpers, the timer, the launch and store recorders, the channel): taken before the
    candidate is imported (`child_main`) and keyed by the class objects themselves, so rebinding a module's
    name to a look-alike class hides nothing."""
    classes = (Harness, DeviceTimer, guards.LaunchRecorder, StoreRecorder, Channel, Replay)
    return tuple((f"{cls.__name__}.{name}", cls, fn, fn.__code__) for cls in classes
                 for name, fn in list(vars(cls).items()) if isinstance(fn, types.FunctionType))


REQUESTS = ("alloc", "run", "time", "warm", "release", "replay", "profile", "integrity")

# the CPU range around the harness's own device work in a profiled round (worker._profiled)
HARNESS_RANGE = "kernelgym::harness"


def _profiled_kernels(events: Any, top: int = 64) -> list[tuple[str, float]]:
    """Device time (us) per kernel or copy name that the profiler recorded, largest first, less what was
    launched inside the harness's own ranges (HARNESS_RANGE: the profiler links each device event to the
    innermost CPU range open at its launch, and a range's subtree holds its ops' kernels)."""
    kernels: dict[str, float] = {}
    for e in events:
        # a range (record_function) also shows on the device's timeline, spanning its kernels: not work
        if str(getattr(e, "device_type", "")).endswith("CUDA") and not getattr(e, "is_user_annotation", False):
            kernels[e.name] = kernels.get(e.name, 0.0) + float(e.device_time_total)
    for e in events:
        if e.name == HARNESS_RANGE and str(e.device_type).endswith("CPU"):
            for name, us in _subtree_kernels(e):
                kernels[name] = kernels.get(name, 0.0) - us
    kept = [(k, round(v, 3)) for k, v in kernels.items() if v > 1e-6]
    return sorted(kept, key=lambda kv: -kv[1])[:top]


def _subtree_kernels(event: Any) -> list[tuple[str, float]]:
    """(name, us) of every device event linked to `event` or to a CPU event below it."""
    found, stack = [], [event]
    while stack:
        e = stack.pop()
        found += [(k.name, float(k.duration)) for k in e.kernels]
        stack += list(e.cpu_children)
    return found


def _init_device(device: str) -> None:
    torch.set_num_threads(max(1, int(os.environ.get("KERNELGYM_CPU_THREADS", "1"))))
    if device.startswith("cuda"):
        torch.cuda.init()
        torch.empty(1, device=device)


def child_main(fd: int, opts: dict[str, Any], parent_pid: int) -> int:
    """Entry point of a forked candidate process; returns the exit code (the caller os._exit()s)."""
    applied = enter_sandbox(fd, opts, parent_pid)
    chan = Channel(socket_from_fd(fd), max_blob_bytes=None)  # from the supervisor
    try:
        _init_device(opts["device"])
        chan.send({"op": "ready", "pid": applied.get("pid", os.getpid()), "sandbox": applied})
        job, blobs = chan.recv()
    except ChannelError:
        return 3
    except BaseException as exc:
        try:
            chan.send({"op": "ready", "error": _tb(exc)})
        except ChannelError:
            pass
        return 4
    if job.get("op") != "job":
        return 2
    entries = entry_points()  # before the candidate's code runs (harness.load imports it)
    serve = Harness.serve
    harness = Harness(chan.sock, job, blobs, applied)
    first = harness.load(job)
    first.setdefault("sandbox", harness.sandbox)
    return serve(harness, first, entries)
