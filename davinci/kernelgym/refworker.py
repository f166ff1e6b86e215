"""The trusted reference worker: problems, inputs, reference outputs, comparisons and baseline timings.

    python -m davinci.kernelgym.refworker <channel fd> <json options>    (started by the supervisor)

It never imports or runs candidate code. It reaches the candidate's data only through descriptors: CUDA
IPC mappings of buffers the candidate allocated (inputs it fills, outputs it reads) or raw bytes, so the
reference outputs, the pristine inputs and the input seeds never exist in the candidate's process. It
marks itself non-dumpable (no same-user ptrace or /proc/<pid>/mem). Requests (one reply each):

    hello            device name, capability, memory, versions
    problem          load + construct Model under the init seed; input spec, FLOP/byte counts, init args
    trial            fresh inputs (distribution d, secret seed) -> reference output; fill the candidate's slot
    rewrite          write a trial's inputs into the candidate's slot again (before a repeated call)
    check            compare the candidate's outputs; compare its input slot with the pristine inputs
    pair             compare two kept candidate outputs (determinism under different poison)
    timing_setup / refresh / check_spot / time_baseline   the interleaved timing protocol (see perf.py);
                     refresh writes the same fresh values into the candidate's and the reference twin's slots
    measure_baseline a standalone baseline measurement (cached on disk by the supervisor)
    ceilings         measured copy bandwidth and matmul FLOP rates (sol.py)
    warm_triton      build Triton's driver utilities into a template cache (GPU)
    drop / health
A failure while decoding or using data the candidate's process supplied (its slot or output descriptors)
answers `candidate_error`: the supervisor turns it into a verdict against the candidate, never `reference`,
which only the problem's own code failing earns.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from davinci.kernelgym import inputs as inp
from davinci.kernelgym import transport
from davinci.kernelgym.baselines import measure_program
from davinci.kernelgym.accounting import torch_work
from davinci.kernelgym.compare import compare_outputs, flatten_outputs, sample_pair
from davinci.kernelgym.protocol import Channel, ChannelError, socket_from_fd
from davinci.kernelgym.sandbox import die_with_parent, mark_trusted_process
from davinci.kernelgym.sol import count_work, measure_ceilings
from davinci.kernelgym.timing import DeviceTimer


_WARM_KERNEL = """import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
"""


_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits_equal(a: Any, b: Any) -> bool:
    """Bitwise equality of two values (NaN payloads included), in chunks; non-tensors compare with ==."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a == b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    size = a.element_size()
    view = _INT_VIEW.get(size, torch.int64)
    flat = [t.to(b.device).contiguous().reshape(-1).view(torch.uint8).view(view) for t in (a, b)]
    step = 1 << 26
    return all(bool(torch.equal(flat[0][i:i + step], flat[1][i:i + step])) for i in range(0, flat[0].numel(), step))


def release_cached_memory() -> None:
    """Give cached device memory back to the driver when much is idle and the device is short of free memory:
    the candidate's process needs it then. With room to spare the cache stays: emptying it after every trial
    and drop cost 0.11 s each on a 13 GB trial (H200, KernelBench L1 ReLU), and the next trial allocated the
    same blocks again."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        if torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > (1 << 30):
            free, total = torch.cuda.mem_get_info()
            if free < max(8 << 30, total // 2):
                torch.cuda.empty_cache()


class NotLoaded(KeyError):
    """The problem was evicted (LRU) or never loaded; the supervisor reloads it and retries."""


class CandidateData(ValueError):
    """Data the candidate's process supplied could not be used (a malformed descriptor, a slot that does not
    match the inputs): the reply carries `candidate_error` and the verdict goes against the candidate."""


class ProblemState:
    def __init__(self, key: str, code: str, init_seed: int, device: str, folder: Path) -> None:
        path = folder / f"problem_{key}.py"
        path.write_text(code)
        spec = importlib.util.spec_from_file_location(f"kg_problem_{key}", path)
        self.module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.module)
        self.device = device
        torch.manual_seed(init_seed)
        self.init_args = list(self.module.get_init_inputs())
        torch.manual_seed(init_seed)
        self.model = self.module.Model(*self.init_args).to(device)
        self.compiled: Any = None
        self.trials: dict[str, dict[str, Any]] = {}
        self.kept: dict[str, list[Any]] = {}
        self.sets: list[list[Any]] = []
        self.twin_sets: list[list[Any]] = []
        self.spot_ref: list[Any] | None = None
        self.warm: set[str] = set()
        # distribution -> whether the reference stays finite on it (learnt by the trials, else by the first
        # refresh that uses it): timing's refresh then needs no extra reference forward per input set
        self.dist_ok: dict[str, bool] = {}

    def forward(self, fn: Any, values: list[Any]) -> list[Any]:
        out = fn(*values)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        return flatten_outputs(out)

    def program(self, name: str) -> Any:
        if name == "eager":
            return self.model
        if self.compiled is None:
            self.compiled = torch.compile(self.model)
        return self.compiled


def _finite(values: list[Any]) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in values
               if isinstance(v, torch.Tensor) and (v.dtype.is_floating_point or v.dtype.is_complex))


class RefWorker:
    def __init__(self, chan: Channel, opts: dict[str, Any]) -> None:
        self.chan = chan
        self.device = opts["device"]
        self.cuda = self.device.startswith("cuda")
        self.folder = Path(opts["folder"])
        self.folder.mkdir(parents=True, exist_ok=True)
        self.tol = (float(opts["tol_fp32"]), float(opts["tol_half"]), float(opts["near_zero_rel_norm"]))
        self.problems: OrderedDict[str, ProblemState] = OrderedDict()
        self.timer = DeviceTimer(self.device, int(opts.get("l2_flush_mb", 256)))
        self.calibrated = False

    def _state(self, key: str) -> ProblemState:
        if key not in self.problems:
            raise NotLoaded(key)
        self.problems.move_to_end(key)
        return self.problems[key]

    def _decode(self, descs: Any, blobs: list[Any]) -> list[Any]:
        """Decode descriptors the candidate's process supplied (its slots, outputs, inputs after the call):
        a malformed descriptor, a blob that does not match it or a CUDA IPC handle that does not open is the
        candidate's (`CandidateData`), never the problem's; only running out of our own memory is not."""
        try:
            return transport.decode(descs, blobs, self.device)
        except Exception as exc:
            if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc):
                raise  # our own device memory ran out mapping a valid buffer: not the candidate's data
            raise CandidateData(f"malformed tensor descriptors from the candidate's process: {exc!r}"[:500]) from None

    def op_hello(self, h: dict, blobs: list) -> tuple[dict, list]:
        info: dict[str, Any] = {"device": "cpu", "torch": torch.__version__, "pid": os.getpid()}
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            info.update(device=props.name, capability=f"{props.major}.{props.minor}", memory=props.total_memory,
                        cuda=torch.version.cuda or "")
        try:
            import triton

            info["triton"] = triton.__version__
        except Exception:
            info["triton"] = "unavailable"
        info["l2_reset"] = self.timer.l2_reset
        # the idle probe's time on this GPU with no candidate alive yet: the reference for "GPU not idle"
        info["canary_ms"] = self.timer.canary_ms(reps=7) if self.cuda else 0.0
        return {"ok": True, **info}, []

    def op_problem(self, h: dict, blobs: list) -> tuple[dict, list]:
        key = h["key"]
        if key not in self.problems:
            self.problems[key] = ProblemState(key, h["code"], int(h["init_seed"]), self.device, self.folder)
            while len(self.problems) > 4:
                self.problems.popitem(last=False)
        st = self._state(key)
        native = inp.native_inputs(st.module.get_inputs, int(h["spec_seed"]), self.device)
        ref = st.forward(st.model, native)
        work = {**count_work(st.model, native, ref), "torch_work": torch_work(st.model, native)}
        in_bytes = sum(v.numel() * v.element_size() for v in native if isinstance(v, torch.Tensor))
        out_bytes = sum(v.numel() * v.element_size() for v in ref if isinstance(v, torch.Tensor))
        out_blobs: list[Any] = []
        init = transport.encode(st.init_args, "host", out_blobs)
        reply = {"ok": True, "spec": transport.spec_of(native), "work": work, "init": init,
                 "in_bytes": in_bytes, "out_bytes": out_bytes, "finite": _finite(ref)}
        del native, ref
        release_cached_memory()
        return reply, out_blobs

    def op_trial(self, h: dict, blobs: list) -> tuple[dict, list]:
        st = self._state(h["key"])
        seed, dist = int(h["seed"]), h["dist"]
        values = inp.apply_distribution(inp.native_inputs(st.module.get_inputs, seed, self.device), dist, seed)
        ref = st.forward(st.model, values)
        finite = _finite(ref)
        if dist != "native":
            st.dist_ok[dist] = finite
        if not finite and dist != "native":  # the distribution broke the problem's input contract
            del values, ref
            values = inp.native_inputs(st.module.get_inputs, seed, self.device)
            dist, ref = "native", st.forward(st.model, values)
            finite = _finite(ref)
        release_cached_memory()
        trial = st.trials[h["name"]] = {"values": values, "ref": ref, "targets": None}
        out_blobs: list[Any] = []
        reply = {"ok": True, "dist": dist, "ref_finite": finite}
        if h.get("targets") is not None:
            trial["targets"] = self._decode(h["targets"], blobs)
            self._write(trial["targets"], values)
        else:
            reply["fill"] = transport.encode(values, "host", out_blobs)
        return reply, out_blobs

    def _write(self, targets: list[Any], values: list[Any], sync: bool = True) -> None:
        if len(targets) != len(values):
            raise CandidateData("candidate slot does not match the inputs")
        for dst, src in zip(targets, values):
            if isinstance(src, torch.Tensor):
                if not isinstance(dst, torch.Tensor) or dst.shape != src.shape or dst.dtype != src.dtype:
                    raise CandidateData("candidate slot buffer has the wrong shape or dtype")
                dst.copy_(src)
        if self.cuda and sync:
            torch.cuda.synchronize()

    def op_rewrite(self, h: dict, blobs: list) -> tuple[dict, list]:
        """Write a trial's pristine inputs into the candidate's slot again (before a repeated call)."""
        trial = self._state(h["key"]).trials[h["name"]]
        if trial["targets"] is not None:
            self._write(trial["targets"], trial["values"])
        return {"ok": True}, []

    def op_check(self, h: dict, blobs: list) -> tuple[dict, list]:
        st = self._state(h["key"])
        trial = st.trials[h["name"]]
        outs = self._decode(h["outputs"], blobs)
        c = compare_outputs(outs, trial["ref"], *self.tol)
        if h.get("keep_as"):
            st.kept[h["keep_as"]] = outs
        after = self._decode(h["inputs_after"], blobs) if h.get("inputs_after") is not None else trial["targets"]
        mutated = [] if after is None else [i for i, (a, b) in enumerate(zip(after, trial["values"])) if not bits_equal(a, b)]
        return {"ok": True, "comparison": c.to_dict(), "mutated": mutated}, []

    def op_pair(self, h: dict, blobs: list) -> tuple[dict, list]:
        st = self._state(h["key"])
        c = compare_outputs(st.kept[h["a"]], st.kept[h["b"]], *self.tol)
        return {"ok": True, "comparison": c.to_dict()}, []

    def op_drop(self, h: dict, blobs: list) -> tuple[dict, list]:
        st = self.problems.get(h["key"])
        if st is not None:
            for name in h.get("trials", []):
                st.trials.pop(name, None)
            for name in h.get("kept", []):
                st.kept.pop(name, None)
            if h.get("timing"):
                st.sets, st.twin_sets, st.spot_ref = [], [], None
        if self.cuda:
            torch.cuda.synchronize()
            release_cached_memory()
        return {"ok": True}, []

    def op_timing_setup(self, h: dict, blobs: list) -> tuple[dict, list]:
        st = self._state(h["key"])
        if h.get("sets") is not None:
            st.sets = [self._decode(d, []) for d in h["sets"]]
        else:
            st.sets = [[] for _ in range(int(h["count"]))]
        # ipc + twin: the twin's own slots, written with the same values as the candidate's every round
        st.twin_sets = [transport.decode(d, [], self.device) for d in h["twin_sets"]] if h.get("twin_sets") is not None else []
        if not self.calibrated:
            self.timer.calibrate()
            self.calibrated = True
        return {"ok": True, "overhead_ms": self.timer.overhead_ms,
                "launch_overhead_ms": self.timer.launch_overhead_ms}, []

    def op_refresh(self, h: dict, blobs: list) -> tuple[dict, list]:
        """Fresh values into every input set, drawn from the round's distribution; a set whose reference is not
        finite on them takes native values instead, decided set by set on its own reference, so what a set holds
        never depends on which set is the spot (only the spot's output is checked: a candidate that could tell
        the others apart could skip their work). References are computed after the set is written, on the
        worker's own copy, so a Model that changes its inputs in place cannot change what the candidate gets."""
        st = self._state(h["key"])
        host = h.get("host", False)
        dist = str(h.get("dist") or "native")  # timed outputs are checked on every distribution the trials use
        if not st.dist_ok.get(dist, True):  # a trial found the distribution breaks the problem's contract
            dist = "native"
        spot = int(h["spot"])
        fills: list[Any] = []
        out_blobs: list[Any] = []
        for j in range(len(st.sets)):
            seed = int(h["seed"]) * 131 + j
            values = inp.apply_distribution(inp.native_inputs(st.module.get_inputs, seed, self.device), dist, seed)
            fill = self._place(st, j, values, host, out_blobs)
            ref = st.forward(st.model, values) if dist != "native" or j == spot else None
            if dist != "native" and not _finite(ref):
                values = inp.native_inputs(st.module.get_inputs, seed, self.device)
                fill = self._place(st, j, values, host, out_blobs)
                ref = st.forward(st.model, values) if j == spot else None
            if j == spot:
                st.spot_ref = ref
            fills.append(fill)
            del values, ref
        if self.cuda:
            torch.cuda.synchronize()
        return {"ok": True, "fill": fills if host else None}, out_blobs

    def _place(self, st: ProblemState, j: int, values: list[Any], host: bool, out_blobs: list[Any]) -> Any:
        """Input set j := values: the candidate's and the twin's slots written in place (synchronised by the
        caller), or, over host copies, the values encoded for the timed request (returns their descriptor)."""
        if host:
            st.sets[j] = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
            return transport.encode(st.sets[j], "host", out_blobs)
        self._write(st.sets[j], values, sync=False)
        if st.twin_sets:
            self._write(st.twin_sets[j], values, sync=False)
        return None

    def op_check_spot(self, h: dict, blobs: list) -> tuple[dict, list]:
        """Compare a timed call's output with the reference on 2**20 secretly chosen elements per tensor
        (a replayed or stale result differs almost everywhere; full numerics were checked in the trials)."""
        st = self._state(h["key"])
        outs, refs = self._decode(h["outputs"], blobs), list(st.spot_ref or [])
        seed = int(h.get("seed", 0))
        for i, (o, r) in enumerate(zip(outs, refs)):
            if isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor):
                outs[i], refs[i] = sample_pair(o, r, 1 << 20, seed + i)
        c = compare_outputs(outs, refs, *self.tol)
        return {"ok": True, "comparison": c.to_dict()}, []

    def op_time_baseline(self, h: dict, blobs: list) -> tuple[dict, list]:
        st = self._state(h["key"])
        fn = st.program(h["name"])
        if h["name"] not in st.warm:
            self.timer.warmup(fn, st.sets[0], int(h.get("warmup", 2)))
            st.warm.add(h["name"])
        if not self.calibrated:
            self.timer.calibrate()
            self.calibrated = True
        idle = self.timer.wait_idle(h.get("canary_limit_ms"))
        # keep=True as in the candidate's process: the same allocator pattern on both sides of the A/B.
        after: list[float] = []
        events, hosts, outs = self.timer.time_calls(fn, st.sets, h["order"], keep=True, after=after)
        del outs
        return {"ok": True, "event_ms": events, "host_ms": hosts, "after_ms": after,
                "overhead_ms": self.timer.overhead_ms, "canary_ms": idle[0], "canary_probes": idle[1]}, []

    def op_measure_baseline(self, h: dict, blobs: list) -> tuple[dict, list]:
        st = self._state(h["key"])
        fn = st.program(h["name"])

        def make(seed: int) -> list[Any]:
            return inp.native_inputs(st.module.get_inputs, seed, self.device)

        samples = measure_program(fn, make, self.timer, rotation=int(h["rotation"]), seed=int(h["seed"]),
                                  warmup=int(h.get("warmup", 2)), rule=h["rule"])
        return {"ok": True, **samples}, []

    def op_ceilings(self, h: dict, blobs: list) -> tuple[dict, list]:
        return {"ok": True, "ceilings": measure_ceilings(self.device)}, []

    def op_warm_triton(self, h: dict, blobs: list) -> tuple[dict, list]:
        """Compile and launch one fixed trivial Triton kernel with TRITON_CACHE_DIR=h["dir"]: the driver
        utilities and a launcher land there, a template copied into each candidate's own Triton cache."""
        folder = Path(h["dir"])
        folder.mkdir(parents=True, exist_ok=True)
        before = os.environ.get("TRITON_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"] = str(folder)
        try:
            src = self.folder / "kg_triton_warm.py"
            src.write_text(_WARM_KERNEL)
            spec = importlib.util.spec_from_file_location("kg_triton_warm", src)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            x = torch.zeros(1024, device=self.device)
            mod.add_one[(1,)](x, 1024, BLOCK=1024)
            if self.cuda:
                torch.cuda.synchronize()
            return {"ok": bool(float(x.sum()) == 1024.0)}, []
        finally:
            if before is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = before

    def op_health(self, h: dict, blobs: list) -> tuple[dict, list]:
        x = torch.ones(1024, device=self.device)
        ok = float((x * 2).sum()) == 2048.0
        return {"ok": ok}, []

    def serve(self) -> int:
        ops = {name[3:]: getattr(self, name) for name in dir(self) if name.startswith("op_")}
        while True:
            try:
                header, blobs = self.chan.recv()
            except ChannelError:
                return 0
            op = header.get("op")
            if op == "exit":
                return 0
            try:
                reply, out_blobs = ops[op](header, blobs)
            except NotLoaded:
                reply, out_blobs = {"ok": False, "not_loaded": True, "error": "problem not loaded"}, []
            except CandidateData as exc:  # the candidate's data, not the problem: a verdict against it
                reply, out_blobs = {"ok": False, "candidate_error": str(exc), "error": str(exc)}, []
            except Exception as exc:
                text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
                reply, out_blobs = {"ok": False, "error": text, "cuda_error": "CUDA" in text or "cuda" in text}, []
            try:
                self.chan.send(reply, out_blobs)
            except ChannelError:
                return 0


def main(argv: list[str]) -> int:
    mark_trusted_process()
    fd, opts = int(argv[0]), json.loads(argv[1])
    die_with_parent(opts.get("parent_pid"))  # also when stopped: see sandbox.die_with_parent
    torch.set_num_threads(max(1, int(opts.get("cpu_threads", 1))))
    torch.set_grad_enabled(False)  # inference only, as in the candidate's process
    device = opts["device"]
    if device.startswith("cuda"):
        torch.cuda.init()
    worker = RefWorker(Channel(socket_from_fd(fd), max_blob_bytes=None), opts)  # from the supervisor
    return worker.serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
