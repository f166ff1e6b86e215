"""Where does a self-speedup bias come from? Controls for the evaluator's A/B timing, outside the evaluator.

The evaluator times the candidate in its sandboxed process and the eager baseline in the reference
worker, on the same input buffers (allocated by the candidate, mapped by the reference worker through
CUDA IPC and refreshed there every round). With candidate = reference a speedup away from 1 is a bias of
the setup. This script times the same KernelBench model with the same `DeviceTimer` under four setups,
each as interleaved rounds (which side goes first drawn per round), and prints median ratios
(the raw samples per round go to self_speedup_probe.json):

  inproc     one process times the model twice per round (A and B): the timer's own A/A spread
  native2    two processes, each with its own inputs: a second CUDA context, nothing shared
  nativeref  the same, P refreshes its own inputs every round (Q's stay)
  ipc2       Q allocates the inputs, P maps them by CUDA IPC and refreshes them each round (the evaluator's
             layout: P = reference worker, Q = candidate)
  ipc2own    Q allocates and refreshes, P maps
  ipc2sw     P allocates and refreshes, Q maps
  native2sp  native2, and before each round both give cached memory back, hold a random spacer and make
             one untimed pass (the allocator's blocks land anew)
  native2rp  native2sp, and both also move their model's weights to fresh storage
  ipc2rp     ipc2, with native2rp's new placement every round
  native2qf  native2 with Q allocating its inputs and outputs first (native2: P first)
  native2pw  native2, then P copies its weights to new storage once (P's weights are now the younger)
  native2pqw native2, then P and then Q copy their weights (Q's the younger again)

ratio = median(P) / median(Q) (the evaluator's speedup if P were eager and Q the candidate), for the event
clock and for the host clock minus its calibrated overhead; `1st/2nd` is a side's event median when it
went first in a round over when it went second.

    PYTHONPATH=. python benchmarks/gpu/self_speedup_probe.py --problems 19 40 47 1 --rounds 15
"""

from __future__ import annotations

import argparse
import pickle
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from benchmarks.gpu.kernelgym_common import load_level_problem, log, small_overrides, table, write_json  # noqa: E402

class _Side:
    """One timing process's state: the model, its input sets (own or mapped), a DeviceTimer."""

    def __init__(self, code: str, device: str) -> None:
        from davinci.kernelgym.timing import DeviceTimer

        self.ns: dict[str, Any] = {}
        exec(compile(code, "<problem>", "exec"), self.ns)
        torch.manual_seed(0)
        init = list(self.ns["get_init_inputs"]())
        torch.manual_seed(0)
        self.device = device
        self.model = self.ns["Model"](*init).to(device)
        self.timer = DeviceTimer(device)
        self.sets: list[list[Any]] = []
        self.warm = False
        self.spacer: Any = None

    def make(self, count: int, seed: int) -> list[list[Any]]:
        from davinci.kernelgym import inputs as inp

        self.sets = [inp.native_inputs(self.ns["get_inputs"], seed * 131 + j, self.device) for j in range(count)]
        _, _, outs = self.timer.time_calls(self.model, self.sets, list(range(count)), keep=True)  # output blocks now
        del outs
        return self.sets

    def refresh(self, seed: int) -> None:
        from davinci.kernelgym import inputs as inp

        for j, dst in enumerate(self.sets):
            fresh = inp.native_inputs(self.ns["get_inputs"], seed * 131 + j, self.device)
            for d, s in zip(dst, fresh):
                if isinstance(d, torch.Tensor):
                    d.copy_(s)
            del fresh
        self.timer.warmup(lambda: None, (), 0)

    def replace(self, seed: int, params: bool, order: list[int]) -> None:
        """New physical placement: give cached memory back, hold a random spacer, optionally move the
        model's parameters and buffers to fresh storage, then one untimed pass of the round's calls (so
        the timed pass finds every output block in the allocator's cache: no cudaMalloc while timed)."""
        rng = random.Random(seed)
        self.spacer = None
        if self.device != "cpu":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        self.spacer = torch.empty(rng.randrange(1, 256) << 20, dtype=torch.uint8, device=self.device)
        if params:
            with torch.no_grad():
                for t in list(self.model.parameters()) + list(self.model.buffers()):
                    t.data = t.data.clone()
        _, _, outs = self.timer.time_calls(self.model, self.sets, order, keep=True)
        del outs

    def time(self, order: list[int]) -> dict[str, Any]:
        if not self.warm:
            self.timer.warmup(self.model, self.sets[0], 2)
            self.timer.calibrate()
            self.warm = True
        events, hosts, outs = self.timer.time_calls(self.model, self.sets, order, keep=True)
        del outs
        return {"event": events, "host": hosts, "overhead": self.timer.overhead_ms}


def _serve(conn: Any, code: str, device: str) -> None:
    side = _Side(code, device)
    conn.send("ready")
    while True:
        op, arg = conn.recv()
        if op == "stop":
            return
        if op == "make":
            count, seed, share = arg
            sets = side.make(count, seed)
            conn.send(sets if share else None)  # torch.multiprocessing sends CUDA tensors as IPC handles
        elif op == "adopt":  # the owner's pickled sets, passed through untouched by the driver
            side.sets, side.warm = pickle.loads(conn.recv_bytes()), False
            conn.send(None)
        elif op == "drop":
            side.sets, side.warm = [], False
            if device != "cpu":
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            conn.send(None)
        elif op == "refresh":
            side.refresh(arg)
            conn.send(None)
        elif op == "reweights":  # the model's weights copied to newly allocated storage, once
            with torch.no_grad():
                for t in [*side.model.parameters(), *side.model.buffers()]:
                    t.data = t.data.clone()
            side.warm = False
            conn.send(None)
        elif op == "replace":
            side.replace(*arg)
            conn.send(None)
        elif op == "time":
            conn.send(side.time(arg))


def _call(conn: Any, op: str, arg: Any = None, raw: bool = False) -> Any:
    conn.send((op, arg))
    if not conn.poll(180):
        raise RuntimeError(f"no answer to {op!r} in 180 s (the timing process died?)")
    return conn.recv_bytes() if raw else conn.recv()


def _defended(r: dict[str, Any]) -> list[float]:
    return [max(e, h - r["overhead"]) for e, h in zip(r["event"], r["host"])]


def _rounds(sides: list[Any], rounds: int, count: int, refresher: Any, rng: random.Random,
            replace: str | None = None) -> list[dict[str, Any]]:
    """Interleaved rounds; sides[i] is a (label, conn) pair. Both labels may share one conn (inproc).
    Returns one record per round after the first (the warm-up): who went first and each side's samples."""
    records = []
    for rnd in range(rounds):
        if refresher is not None:
            _call(refresher, "refresh", 1000 + rnd)
        order = rng.sample(range(count), count)
        if replace:
            for label, conn in sides:
                _call(conn, "replace", (rng.randrange(1 << 30), replace == "params", order))
        seq = sides if rng.random() < 0.5 else sides[::-1]
        rec: dict[str, Any] = {"first": seq[0][0]}
        for label, conn in seq:
            r = _call(conn, "time", order)
            rec[label] = {"event": r["event"], "host": [h - r["overhead"] for h in r["host"]], "def": _defended(r)}
        if rnd:
            records.append(rec)
    return records


def _ratios(records: list[dict[str, Any]]) -> dict[str, float]:
    """P/Q median ratios per clock, and Q's event median when it went first vs second (a context switch
    right before a side's timing is the difference between the two)."""
    pool = {f"{side}_{k}": [x for r in records for x in r[side][k]] for side in "PQ" for k in ("event", "host", "def")}
    out = {f"{k}_ms": statistics.median(v) for k, v in pool.items()}
    for k in ("event", "host", "def"):
        out[f"ratio_{k}"] = out[f"P_{k}_ms"] / out[f"Q_{k}_ms"]
    for side in "PQ":
        for pos, want in (("first", True), ("second", False)):
            xs = [x for r in records if (r["first"] == side) == want for x in r[side]["event"]]
            out[f"{side}_{pos}_ms"] = statistics.median(xs) if xs else float("nan")
    return out


# mode -> (who makes buffers, who maps them by IPC, who refreshes them each round, new placement each round:
# None, "spacer" (cached memory released, a random spacer held) or "params" (also the model's weights moved));
# "P+Q": both make their own
MODES = {"inproc": ("P", None, "P", None), "native2": ("P+Q", None, None, None), "nativeref": ("P+Q", None, "P", None),
         "ipc2": ("Q", "P", "P", None), "ipc2own": ("Q", "P", "Q", None), "ipc2sw": ("P", "Q", "P", None),
         "native2sp": ("P+Q", None, None, "spacer"), "native2rp": ("P+Q", None, None, "params"),
         "ipc2rp": ("Q", "P", "P", "params"), "native2qf": ("Q+P", None, None, None),
         "native2pw": ("P+Q", None, None, None), "native2pqw": ("P+Q", None, None, None)}
# After setup, these copy the weights to new storage once, in this order (the last copy is the youngest).
REWEIGHT = {"native2pw": "P", "native2pqw": "PQ"}


def _setup(mode: str, conns: dict[str, Any], count: int) -> tuple[list[Any], Any]:
    maker, mapper, refresher, _ = MODES[mode]
    for c in conns.values():
        _call(c, "drop")
    for name in maker.split("+"):
        if mapper is None:
            _call(conns[name], "make", (count, 1, False))
        else:
            blob = _call(conns[name], "make", (count, 1, True), raw=True)  # the driver never opens CUDA
            conns[mapper].send(("adopt", None))
            conns[mapper].send_bytes(blob)
            assert conns[mapper].recv() is None
    for name in REWEIGHT.get(mode, ""):
        _call(conns[name], "reweights")
    sides = [("P", conns["P"]), ("Q", conns["P"] if mode == "inproc" else conns["Q"])]
    return sides, conns[refresher] if refresher else None


def probe(code: str, rounds: int, count: int, seed: int, device: str = "cuda",
          modes: Any = tuple(MODES), start: str = "PQ") -> dict[str, Any]:
    """`start`: "PQ" starts both at once; "P>Q" / "Q>P" starts the second once the first is ready."""
    ctx = mp.get_context("spawn")
    pipes = {name: ctx.Pipe() for name in "PQ"}
    procs = {name: ctx.Process(target=_serve, args=(pipes[name][1], code, device), daemon=True) for name in "PQ"}
    conns = {name: pipes[name][0] for name in "PQ"}
    batches = [["P", "Q"]] if start == "PQ" else [[start[0]], [start[2]]]
    for batch in batches:
        for name in batch:
            procs[name].start()
        for name in batch:
            if not conns[name].poll(180) or conns[name].recv() != "ready":
                raise RuntimeError("a timing process did not start")
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    try:
        for mode in modes:
            sides, refresher = _setup(mode, conns, count)
            records = _rounds(sides, rounds, count, refresher, rng, MODES[mode][3])
            out[mode] = {**_ratios(records), "records": records}
            log(f"  {mode}: " + ", ".join(f"{k}={v:.4f}" for k, v in out[mode].items() if k != "records"))
    finally:
        for c in conns.values():
            try:
                c.send(("stop", None))
            except Exception:
                pass
        for p in procs.values():
            p.join(timeout=20)
            if p.is_alive():
                p.kill()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", nargs="*", default=["19", "40", "47", "1"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--sets", type=int, default=2, help="input sets per round (the evaluator's rotation)")
    ap.add_argument("--modes", nargs="*", default=list(MODES), choices=list(MODES))
    ap.add_argument("--start", default="PQ", choices=["PQ", "P>Q", "Q>P"], help="process start order")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the plumbing (host clock only)")
    ap.add_argument("--small", action="store_true", help="shrink every problem (with --device cpu)")
    args = ap.parse_args()
    results, rows = {}, []
    for num in args.problems:
        p = load_level_problem(1, num)
        log(f"{p.name}")
        code = p.code
        if args.small:
            from davinci.kernelgym.problem import apply_shape_overrides

            code = apply_shape_overrides(code, small_overrides(p) or {})
        results[p.name] = probe(code, args.rounds, args.sets, seed=int(num), device=args.device,
                                modes=args.modes, start=args.start)
        for mode, r in results[p.name].items():
            rows.append([p.name[:28], mode, f"{r['P_event_ms']:.4f}", f"{r['Q_event_ms']:.4f}", f"{r['ratio_event']:.4f}",
                         f"{r['ratio_host']:.4f}", f"{r['ratio_def']:.4f}", f"{r['P_first_ms'] / r['P_second_ms']:.4f}",
                         f"{r['Q_first_ms'] / r['Q_second_ms']:.4f}"])
    print(table(rows, ["problem", "mode", "P event ms", "Q event ms", "P/Q event", "P/Q host", "P/Q defended",
                       "P 1st/2nd", "Q 1st/2nd"]))
    write_json(f"self_speedup_probe_{args.start.replace('>', '')}.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
