"""Launch replay: a timed call's Triton launches re-run after it returned, to see what the kernels write.

On the CPU the Triton interpreter records every store a kernel makes (accounting.StoreRecorder). A GPU has no
record of that kind which the candidate cannot see: its record is the profiler, and a candidate that asks torch
whether a profiler or a dispatch mode is on can run its kernels only then, and compute with PyTorch plus a
token launch otherwise (cheats_v2/c2_fb_watch_token_switch). So every timed call keeps what it launched through
Triton's `JITFunction.run` (the kernel, its arguments and grid: `guards.LaunchRecorder.capture`), in every
request alike, and after a request the supervisor may ask for those launches to be run again, in order, once
the candidate's call has returned (`Harness.op_replay`, audit.py):

    1. every output element set to random contents first: an element whose bits changed was written by the
       kernels (`rewrote_share`; PyTorch's answer plus a token kernel rewrites almost none of it);
    2. the same with every floating-point input's elements permuted: an output element whose replayed bits
       changed depends on the inputs through the kernels (`depends_share`; a copy kernel of an answer that
       PyTorch made earlier rewrites the whole output and depends on none of the input).

A permutation keeps each input's set of values, so kernels that index with values stay in range. Outputs and
inputs are restored afterwards. The candidate cannot tell during its calls whether a replay will follow: the
request comes after the reply. The shares are compared between audit A (the candidate can see it is watched)
and an unwatched timed request (it cannot), never against a fixed bar: an honest kernel that accumulates
into its output, reads it in place or keeps counters across calls replays alike in both. A call that launched
nothing through `JITFunction.run` (PyTorch only, a compiled kernel launched directly, a CUDA graph, a C++
extension) counts 0 for both shares, so an unwatched path that avoids the capture scores 0 against the
watched one; a candidate whose watched path avoids it has no figure to compare, and its verdict rests on the
other evidence (cheats_open/README.md).

Shapes: an output leaf o [*] of any dtype is compared bit for bit as o.view(int of o's item size) [*].

    Replay().shares(captures, outputs, inputs, seed) -> {"rewrote_share", "depends_share", "replayed_launches"}
    wanted(cfg, cuda)                      the supervisor: whether this lane replays (`gym.launch_replay`)
    parsed(reply, failed)                  the supervisor: a replay reply as {"rewrote": share, "depends": share}
    unwatched(reply, native)               ... as an unwatched call's, held against the accounting call's

The supervisor asks for replays after the accounting calls (watched), after trial 0's unwatched call and, on a
GPU, one more trial's drawn per evaluation and every scored timing round (`perf.replays_rounds`; unwatched:
compared with the accounting call's in `evaluator._evidence`, before timing and again at the end, so no audit
round has to have run), and after audit U and audit A (audit.py).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

# bound when the harness imports this module, before the candidate can rebind a tensor method
_clone, _copy, _view, _ne = torch.Tensor.clone, torch.Tensor.copy_, torch.Tensor.view, torch.Tensor.ne
_sum, _item, _take, _reshape = torch.Tensor.sum, torch.Tensor.item, torch.Tensor.take, torch.Tensor.reshape
_randint, _randn, _randperm, _sync = torch.randint, torch.randn, torch.randperm, torch.cuda.synchronize
_to = torch.Tensor.to
_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_BOUNDS = {torch.uint8: (2, 256), torch.int16: (-(1 << 15), 1 << 15), torch.int32: (-(1 << 31), (1 << 31) - 1),
           torch.int64: (-(1 << 62), 1 << 62)}  # uint8 from 2: a bool output never holds the canary by chance


def _canary(out: torch.Tensor, ints: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random contents for one output leaf, as its int view: for floats, finite values of order 1 (random bits
    would be NaN or so large that a kernel adding into the output leaves them unchanged); otherwise random
    bits."""
    if out.is_floating_point():  # drawn in float32: no float8 or other narrow type has a generator of its own
        values = _randn(out.shape, dtype=torch.float32, device=out.device, generator=gen)
        return _view(_to(values, out.dtype), ints.dtype)
    return _randint(*_BOUNDS[ints.dtype], ints.shape, dtype=ints.dtype, device=out.device, generator=gen)


def wanted(cfg: Any, cuda: bool) -> bool:
    """Whether a lane replays launches (`GymConfig.launch_replay`: "always", "gpu" or "off")."""
    return cfg.launch_replay == "always" or (cfg.launch_replay == "gpu" and cuda)


def parsed(reply: dict[str, Any] | None, failed: float | None = None) -> dict[str, float | None]:
    """A replay reply as {"rewrote": share, "depends": share}; a replay that failed counts `failed` for both
    (0 for an unwatched request: its kernels could not be run again, so none of its output is theirs to credit;
    None, no figure, for a watched one)."""
    if not isinstance(reply, dict):
        return {}
    if not reply.get("ok"):
        return {"rewrote": failed, "depends": failed}
    return {name: float(v) if isinstance(v := reply.get(f"{key}_share"), (int, float)) else None
            for name, key in (("rewrote", "rewrote"), ("depends", "depends"))}


def unwatched(reply: dict[str, Any] | None, native: bool) -> dict[str, float | None]:
    """An unwatched call's replay as shares to hold against the accounting call's (which ran on native inputs):
    a replay that failed counts 0, and the input-dependent share counts only on native inputs too (how much of
    an output changes with its inputs depends on their distribution: an honest softmax over inputs with spikes
    is exactly 0 almost everywhere, however they are permuted; measured on an H100)."""
    shares = parsed(reply, failed=0.0)
    if not native:
        shares.pop("depends", None)
    return shares


def lowest(into: dict[str, float | None], shares: dict[str, float | None]) -> None:
    """Keep in `into` the lowest figure of each share seen so far."""
    for name, value in shares.items():
        if value is not None:
            into[name] = value if into.get(name) is None else min(into[name], value)


class Replay:
    """The replay of one timed request's calls (see the module docstring); a class so that the harness's
    integrity check covers its functions (worker.entry_points)."""

    def shares(self, captures: Sequence[list], outputs: Sequence[Sequence[Any]], inputs: Sequence[Sequence[Any]],
               seed: int) -> dict[str, Any]:
        """Lowest share over the request's calls of the output the replayed kernels rewrote, and of the output
        that changed with the inputs; None when no call returned a tensor to compare."""
        rewrote: list[float] = []
        depends: list[float] = []
        launches = 0
        for j, (captured, outs, ins) in enumerate(zip(captures, outputs, inputs)):
            leaves = [o for o in outs if isinstance(o, torch.Tensor) and o.numel() > 0 and o.element_size() in _INT]
            if not leaves:
                continue
            launches += len(captured)
            if not captured:  # nothing the replay can run: none of the output is the kernels' to credit
                rewrote.append(0.0)
                depends.append(0.0)
                continue
            floats = [t for t in ins if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 1
                      and t.element_size() in _INT]
            wrote, changed = self.call(captured, leaves, floats, seed + j)
            rewrote.append(wrote)
            depends.append(changed)
        return {"rewrote_share": min(rewrote) if rewrote else None,
                "depends_share": min(depends) if depends else None, "replayed_launches": launches}

    def call(self, captured: list, leaves: list[torch.Tensor], floats: list[torch.Tensor],
             seed: int) -> tuple[float, float]:
        """(rewritten share, input-dependent share) of one call's output leaves; outputs and inputs restored."""
        device = leaves[0].device
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        saved_out = [_clone(o) for o in leaves]
        saved_in = [_clone(t) for t in floats]
        ints = [_view(o, _INT[o.element_size()]) for o in leaves]
        canary = [_canary(o, i, gen) for o, i in zip(leaves, ints)]
        try:
            self.run(captured, ints, canary)
            first = [_clone(i) for i in ints]
            for t, s in zip(floats, saved_in):  # the same values in another order (moved as bits: any float type)
                perm = _randperm(t.numel(), device=device, generator=gen)
                bits = _INT[t.element_size()]
                _copy(_view(t, bits), _reshape(_take(_view(s, bits), perm), t.shape))
            self.run(captured, ints, canary)
            wrote = sum(_item(_sum(_ne(f, c))) for f, c in zip(first, canary))
            changed = sum(_item(_sum(_ne(i, f))) for i, f in zip(ints, first))
        finally:
            for o, s in zip(leaves, saved_out):
                _copy(o, s)
            for t, s in zip(floats, saved_in):
                _copy(t, s)
        total = sum(o.numel() for o in leaves)
        return wrote / total, changed / total

    def run(self, captured: list, ints: list[torch.Tensor], canary: list[torch.Tensor]) -> None:
        """Outputs set to the canary, then every captured launch again in its order, through the launch entry
        that the harness bound before the candidate was imported (guards.LaunchRecorder)."""
        for i, c in zip(ints, canary):
            _copy(i, c)
        for original, kernel, args, kwargs in captured:
            original(kernel, *args, **kwargs)
        if ints[0].is_cuda:
            _sync(ints[0].device)
