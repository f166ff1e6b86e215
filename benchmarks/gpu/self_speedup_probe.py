"""Where does a self-speedup bias come from? Controls for the evaluator's A/B timing, outside the evaluator.

The evaluator times the candidate in its sandboxed process and the eager baseline in the reference
worker, on the same input buffers (allocated by the candidate, mapped by the reference worker through
CUDA IPC and refreshed there every round). With candidate = reference a speedup away from 1 is a bias of
the setup. This script times the same KernelBench model with the same `DeviceTimer` under four setups,
each as interleaved rounds (which side goes first drawn per round), and prints median ratios:

  inproc   one process times the model twice per round (A and B): the timer's own A/A spread
  native2  two processes, each with its own inputs: a second CUDA context, nothing shared
  ipc2     Q allocates the inputs, P maps them by CUDA IPC and refreshes them each round (the evaluator's
           layout: P = reference worker, Q = candidate)
  ipc2sw   the same with the roles swapped (P allocates, Q maps)

ratio = median(P) / median(Q) (the evaluator's speedup if P were eager and Q the candidate), for the event
clock and for the host clock minus its calibrated overhead.

    PYTHONPATH=. python benchmarks/gpu/self_speedup_probe.py --problems 19 40 47 1 --rounds 15
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from benchmarks.gpu.kernelgym_common import load_level_problem, log, table, write_json  # noqa: E402

MODES = ("inproc", "native2", "ipc2", "ipc2sw")


class _Side:
    """One timing process's state: the model, its input sets (own or mapped), a DeviceTimer."""

    def __init__(self, code: str) -> None:
        from davinci.kernelgym.timing import DeviceTimer

        self.ns: dict[str, Any] = {}
        exec(compile(code, "<problem>", "exec"), self.ns)
        torch.manual_seed(0)
        init = list(self.ns["get_init_inputs"]())
        torch.manual_seed(0)
        self.model = self.ns["Model"](*init).cuda()
        self.timer = DeviceTimer("cuda")
        self.sets: list[list[Any]] = []
        self.warm = False

    def make(self, count: int, seed: int) -> list[list[Any]]:
        from davinci.kernelgym import inputs as inp

        self.sets = [inp.native_inputs(self.ns["get_inputs"], seed * 131 + j, "cuda") for j in range(count)]
        torch.cuda.synchronize()
        return self.sets

    def refresh(self, seed: int) -> None:
        from davinci.kernelgym import inputs as inp

        for j, dst in enumerate(self.sets):
            fresh = inp.native_inputs(self.ns["get_inputs"], seed * 131 + j, "cuda")
            for d, s in zip(dst, fresh):
                if isinstance(d, torch.Tensor):
                    d.copy_(s)
            del fresh
        torch.cuda.synchronize()

    def time(self, order: list[int]) -> dict[str, Any]:
        if not self.warm:
            self.timer.warmup(self.model, self.sets[0], 2)
            self.timer.calibrate()
            self.warm = True
        events, hosts, outs = self.timer.time_calls(self.model, self.sets, order, keep=True)
        del outs
        return {"event": events, "host": hosts, "overhead": self.timer.overhead_ms}


def _serve(conn: Any, code: str) -> None:
    torch.cuda.init()
    side = _Side(code)
    conn.send("ready")
    while True:
        op, arg = conn.recv()
        if op == "stop":
            return
        if op == "make":
            sets = side.make(*arg)
            conn.send(sets if arg[2] else None)  # torch.multiprocessing sends CUDA tensors as IPC handles
        elif op == "adopt":
            side.sets, side.warm = arg, False
            conn.send(None)
        elif op == "drop":
            side.sets, side.warm = [], False
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            conn.send(None)
        elif op == "refresh":
            side.refresh(arg)
            conn.send(None)
        elif op == "time":
            conn.send(side.time(arg))


def _call(conn: Any, op: str, arg: Any = None) -> Any:
    conn.send((op, arg))
    return conn.recv()


def _defended(r: dict[str, Any]) -> list[float]:
    return [max(e, h - r["overhead"]) for e, h in zip(r["event"], r["host"])]


def _rounds(sides: list[Any], rounds: int, count: int, refresher: Any, rng: random.Random) -> dict[str, list[float]]:
    """Interleaved rounds; sides[i] is a (label, conn) pair. Both labels may share one conn (inproc)."""
    acc: dict[str, dict[str, list[float]]] = {label: {"event": [], "host": [], "def": []} for label, _ in sides}
    for rnd in range(rounds):
        if refresher is not None:
            _call(refresher, "refresh", 1000 + rnd)
        order = rng.sample(range(count), count)
        for label, conn in (sides if rng.random() < 0.5 else sides[::-1]):
            r = _call(conn, "time", order)
            if rnd == 0:
                continue  # the warm-up round
            acc[label]["event"] += r["event"]
            acc[label]["host"] += [h - r["overhead"] for h in r["host"]]
            acc[label]["def"] += _defended(r)
    return {f"{label}_{k}": v for label, d in acc.items() for k, v in d.items()}


def probe(code: str, rounds: int, count: int, seed: int) -> dict[str, dict[str, float]]:
    ctx = mp.get_context("spawn")
    pipes = [ctx.Pipe() for _ in range(2)]
    procs = [ctx.Process(target=_serve, args=(child, code), daemon=True) for _, child in pipes]
    for p in procs:
        p.start()
    P, Q = (parent for parent, _ in pipes)
    for c in (P, Q):
        assert c.recv() == "ready"
    rng = random.Random(seed)
    out: dict[str, dict[str, float]] = {}
    try:
        for mode in MODES:
            for c in (P, Q):
                _call(c, "drop")
            if mode == "inproc":
                _call(P, "make", (count, 1, False))
                res, sides, refresher = None, [("P", P), ("Q", P)], P
            elif mode == "native2":
                _call(P, "make", (count, 1, False))
                _call(Q, "make", (count, 1, False))
                sides, refresher = [("P", P), ("Q", Q)], None
            else:
                owner, mapper = (Q, P) if mode == "ipc2" else (P, Q)
                _call(mapper, "adopt", _call(owner, "make", (count, 1, True)))
                sides, refresher = [("P", P), ("Q", Q)], P
            res = _rounds(sides, rounds, count, refresher, rng)
            out[mode] = {f"{k}_ms": statistics.median(v) for k, v in res.items()}
            for k in ("event", "host", "def"):
                out[mode][f"ratio_{k}"] = statistics.median(res[f"P_{k}"]) / statistics.median(res[f"Q_{k}"])
            log(f"  {mode}: {out[mode]}")
    finally:
        for c in (P, Q):
            try:
                c.send(("stop", None))
            except Exception:
                pass
        for p in procs:
            p.join(timeout=20)
            if p.is_alive():
                p.kill()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", nargs="*", default=["19", "40", "47", "1"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--sets", type=int, default=2, help="input sets per round (the evaluator's rotation)")
    args = ap.parse_args()
    results, rows = {}, []
    for num in args.problems:
        p = load_level_problem(1, num)
        log(f"{p.name}")
        results[p.name] = probe(p.code, args.rounds, args.sets, seed=int(num))
        for mode, r in results[p.name].items():
            rows.append([p.name[:28], mode, f"{r['P_event_ms']:.4f}", f"{r['Q_event_ms']:.4f}", f"{r['ratio_event']:.4f}",
                         f"{r['ratio_host']:.4f}", f"{r['ratio_def']:.4f}"])
    print(table(rows, ["problem", "mode", "P event ms", "Q event ms", "P/Q event", "P/Q host", "P/Q defended"]))
    write_json("self_speedup_probe.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
