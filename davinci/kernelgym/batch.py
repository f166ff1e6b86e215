"""The public entry points `evaluate` / `evaluate_batch`, batch scheduling and CUDA pre-builds.

`evaluate(problem, candidate, config)` and `evaluate_batch(items, config)` use one shared `Evaluator` per
`GymConfig` (created on first use, its lanes kept warm, closed at interpreter exit or by
`close_shared()`): the one piece of process-wide state in kernelgym, a pool of worker processes like a
connection pool. Code that wants explicit control builds its own `Evaluator` and closes it.

A batch runs one thread per lane; each takes the next item, so a slow candidate never holds the others
(no synchronous waves). On the GPU, load_inline candidates are first built in parallel CPU processes
(`compile_workers`, a zygote with no GPU) into their content-hashed build folders, ahead of the GPU
lanes, which then only load the finished extension.

Identical (problem, source, backend) items of a batch are evaluated once (`config.dedup_batch`, on by
default): a copy gets the evaluated item's result, marked `details["copy_of"]`.

With `config.cluster` other than "local" ("local-dask:N" or a scheduler address), both entry points hand
the work to `kernelgym.cluster` (chunks on Dask workers, each hosting its own lanes); callers do not change.
"""

from __future__ import annotations

import atexit
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Mapping, Sequence

from davinci.kernelgym.config import GymConfig
from davinci.kernelgym.evaluator import Evaluator, _simple_result, evaluate_on
from davinci.kernelgym.builddirs import bound_build, lock_build_folder, prepare_dirs
from davinci.kernelgym.lane import CHILD_FRAME_BYTES, Lane
from davinci.kernelgym.protocol import Channel
from davinci.kernelgym.result import EvalResult
from davinci.types import Candidate, Problem

_SHARED: dict[GymConfig, Evaluator] = {}
_SHARED_LOCK = threading.Lock()


def shared_evaluator(config: GymConfig) -> Evaluator:
    with _SHARED_LOCK:
        ev = _SHARED.get(config)
        if ev is None:
            ev = _SHARED[config] = Evaluator(config)
            if len(_SHARED) == 1:
                atexit.register(close_shared)
        return ev


def close_shared() -> None:
    """Stop every shared evaluator's worker processes (safe to call repeatedly)."""
    with _SHARED_LOCK:
        evaluators = list(_SHARED.values())
        _SHARED.clear()
    for ev in evaluators:
        ev.close()


def evaluate(problem: Problem, candidate: Candidate, config: GymConfig, *, seed: int | None = None,
             shape_overrides: Mapping[str, int] | None = None) -> EvalResult:
    """Evaluate one candidate (see `Evaluator.evaluate`); never raises for what the candidate does."""
    if config.cluster != "local":
        from davinci.kernelgym.cluster import evaluate_on_cluster

        return evaluate_on_cluster([(problem, candidate)], config, seed=seed, shape_overrides=shape_overrides)[0]
    return shared_evaluator(config).evaluate(problem, candidate, seed=seed, shape_overrides=shape_overrides)


def evaluate_batch(items: Sequence[tuple[Problem, Candidate]], config: GymConfig, *, progress: bool = False,
                   seed: int | None = None) -> list[EvalResult]:
    """Evaluate many candidates over all lanes (or `config.cluster`'s workers); results in the order of `items`.

    With `config.dedup_batch` each distinct (problem, source, backend) is evaluated once and its copies get
    the same result, marked `details["copy_of"]` = the position of the one evaluated."""
    firsts, slot = unique_items(items) if config.dedup_batch else (list(range(len(items))), list(range(len(items))))
    distinct = [items[i] for i in firsts]
    if config.cluster != "local":
        from davinci.kernelgym.cluster import evaluate_on_cluster

        results = evaluate_on_cluster(distinct, config, progress=progress, seed=seed)
    else:
        results = shared_evaluator(config).evaluate_batch(distinct, progress=progress, seed=seed)
    return [results[k] if firsts[k] == i else copy_result(results[k], firsts[k]) for i, k in enumerate(slot)]


def unique_items(items: Sequence[tuple[Problem, Candidate]]) -> tuple[list[int], list[int]]:
    """(firsts, slot): `firsts[k]` is the position of the k-th distinct item, `slot[i]` the k of item i. Items are
    the same evaluation when problem (id and text), source and backend are the same."""
    firsts: list[int] = []
    slot: list[int] = []
    seen: dict[tuple[str, ...], int] = {}
    for i, (problem, cand) in enumerate(items):
        if isinstance(problem, Problem) and isinstance(cand, Candidate):
            k = seen.setdefault((problem.id, problem.code_hash, cand.code_hash, cand.backend), len(firsts))
        else:  # not a (Problem, Candidate): evaluated on its own, where the evaluator reports what is wrong with it
            k = len(firsts)
        if k == len(firsts):
            firsts.append(i)
        slot.append(k)
    return firsts, slot


def copy_result(result: EvalResult, first: int) -> EvalResult:
    """The result of the evaluation at position `first`, for a copy of its candidate."""
    return replace(result, details={**result.details, "copy_of": first})


class Prebuilder:
    """Imports load_inline candidates in sandboxed CPU processes so their builds are cached before the GPU phase."""

    def __init__(self, ev: Evaluator, items: Sequence[tuple[Problem, Candidate]], indices: list[int]) -> None:
        workers = ev.cfg.compile_workers or max(1, min(8, (os.cpu_count() or 2) // 2))
        arch = str(ev.lanes[0].info.get("capability", "")) if ev.lanes else ""
        self.lane = Lane(900, "cpu", None, ev.cfg, ev.cache_root, prebuild=True, arch_list=arch)
        if ev.lanes:  # build where the GPU lanes look (their root differs when they switch user)
            self.lane.build_root = ev.lanes[0].build_root
        self.lane.env["CUDA_VISIBLE_DEVICES"] = ""
        self.lane.start()
        self.timeout = ev.cfg.compile_timeout_s
        self.done = {i: threading.Event() for i in indices}
        self.pool = ThreadPoolExecutor(max_workers=workers)
        first: dict[str, int] = {}
        for i in indices:
            cand = items[i][1]
            if cand.code_hash in first:
                self.done[i] = self.done[first[cand.code_hash]]  # the same source builds once; copies wait for it
                continue
            first[cand.code_hash] = i
            self.pool.submit(self._build, i, cand)

    def _build(self, i: int, cand: Candidate) -> None:
        child, job_dir, lock, log_fd = None, None, None, None
        try:
            # the same code may be evaluating in a GPU lane already: take turns on its build folder
            lock = lock_build_folder(self.lane.build_root, cand.code_hash, self.timeout)
            child = self.lane.fork_child()
            job_dir, paths, log_fd = prepare_dirs(self.lane, cand)
            deadline = time.monotonic() + self.timeout
            child.chan.recv(deadline)  # ready
            key = os.urandom(32)
            child.chan.send({"op": "job", "key": key.hex(), "device": "cpu", "transport": "host", "init": [],
                             "init_seed": 0, "prebuild": True, **paths}, (), deadline)
            Channel(child.sock, verify_key=key, max_blob_bytes=CHILD_FRAME_BYTES).recv(deadline)  # returns when the import (and build) is done
        except Exception:
            pass  # pre-building is a cache warm-up; the GPU lane reports any build error itself
        finally:
            if child is not None:
                self.lane.end_child(child)
            if log_fd is not None:
                os.close(log_fd)
            if job_dir is not None:
                shutil.rmtree(job_dir, ignore_errors=True)
                bound_build(self.lane, cand.code_hash, self.lane.cfg)
            if lock is not None:
                os.close(lock)
            self.done[i].set()

    def wait(self, i: int) -> None:
        event = self.done.get(i)
        if event is not None:
            event.wait(self.timeout)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.lane.close()


def _prebuilder(ev: Evaluator, items: Sequence[tuple[Problem, Candidate]]) -> Prebuilder | None:
    from davinci.kernelgym.backend import detect_backend

    if ev.device != "cuda":
        return None
    indices = [i for i, (_, c) in enumerate(items) if detect_backend(c.code, c.backend).backend == "cuda"]
    if not indices:
        return None
    try:
        return Prebuilder(ev, items, indices)
    except Exception:
        return None  # pre-building is an optimisation; the GPU lanes build on their own


def run_batch(ev: Evaluator, items: Sequence[tuple[Problem, Candidate]], *, progress: bool = False,
              seed: int | None = None) -> list[EvalResult]:
    results: list[EvalResult | None] = [None] * len(items)
    if not items:
        return []
    t0 = time.monotonic()
    if ev.device == "none":
        return [ev.evaluate(p, c, seed=seed) for p, c in items]
    try:
        ev.ensure_lanes(len(items))
    except Exception as exc:
        return [_simple_result(p, c, "internal", f"evaluator could not start: {exc}", t0) for p, c in items]
    prebuild = _prebuilder(ev, items)
    bar = _progress(len(items)) if progress else None
    next_index = iter(range(len(items)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            if prebuild is not None:
                prebuild.wait(i)
            lane = ev._free.get()
            try:
                results[i] = evaluate_on(ev, lane, items[i][0], items[i][1], seed, None)
            finally:
                ev._free.put(lane)
                if bar is not None:
                    bar.update(1)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(len(ev.lanes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if prebuild is not None:
        prebuild.close()
    if bar is not None:
        bar.close()
    return [r if r is not None else _simple_result(p, c, "internal", "not evaluated", t0)
            for r, (p, c) in zip(results, items)]


def _progress(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc="kernelgym", unit="eval")
