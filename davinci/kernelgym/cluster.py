"""Evaluation on a Dask cluster: one Dask worker per GPU, each hosting its own kernelgym lanes.

    GymConfig(cluster="local-dask:2")       # tests, one machine: two worker processes started here
    GymConfig(cluster="tcp://head:8786")    # a running scheduler and its workers, on any number of nodes
    evaluate_batch(items, config)           # the one batch API: kernelgym.batch dispatches here

Choices:
- Dask (`distributed`) is the engine; there is no queue of our own. A batch is cut into chunks of
  `gym.cluster_chunk` evaluations (never one task per kernel) and the scheduler spreads them. When the
  workers declare GPUs, each chunk asks for `resources={"GPU": 1}`: a worker with one GPU and one thread
  runs one chunk at a time, so its candidates time alone on their GPU.
- Every worker process hosts its own `Evaluator` (`batch.shared_evaluator`, made on the first chunk, warm
  between chunks, closed at worker teardown by `LanePlugin` or the `--preload` hook). An Evaluator is never
  pickled: problems, candidates, the config and `EvalResult`s are all that cross the wire.
- A worker or node that dies mid-batch: the scheduler re-runs its chunks on the others (Dask's
  `distributed.scheduler.allowed-failures`, 3 by default); a chunk whose task raised is retried
  (`retries=2`). Results are keyed by item index and taken from finished chunks only, so the half-done
  chunk of a dead worker counts nothing and no evaluation counts twice. A chunk that keeps killing workers,
  or a batch left with no worker for `NO_WORKER_S`, ends as `internal` verdicts (not the candidate's fault).
- Before any work: the scheduler must answer, have workers, every worker must import the same kernelgym
  source as this process (the verdicts equal the local path's), and `device="cuda"` needs GPU workers.
  Each failure is one `ClusterError` naming the fix. Once a scheduler has seen a batch it holds `LanePlugin`,
  and a worker that joins later without the project fails its own start (ImportError in its log), so it
  never receives work.
- Timings: baselines are cached per device model (`baselines.device_model`), so a heterogeneous cluster
  sharing one cache folder never mixes an A100's and an H100's numbers.

Run (the scheduler once, on the head node; then on every GPU node, one worker per visible GPU):
    dask scheduler --port 8786
    python -m davinci.kernelgym.cluster worker tcp://head:8786        # --gpus 0,1 to pick GPUs
    python -m davinci.kernelgym.cluster check tcp://head:8786         # the workers, their GPUs and code
Any other way of starting workers works too if each gets one GPU and one thread, e.g.
    CUDA_VISIBLE_DEVICES=0 dask worker tcp://head:8786 --nthreads 1 --resources GPU=1 \\
        --preload davinci.kernelgym.cluster
"""

from __future__ import annotations

import contextlib

import argparse
import atexit
import dataclasses
import functools
import hashlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Mapping, Sequence

from distributed import Client, Future, WorkerPlugin
from distributed.scheduler import KilledWorker

from davinci.errors import DavinciError
from davinci.kernelgym.config import GymConfig, parse_cluster
from davinci.kernelgym.result import EvalResult
from davinci.types import Candidate, Problem

CONNECT_TIMEOUT_S = 20.0     # to reach a scheduler
WORKER_WAIT_S = 60.0         # for the first worker of a scheduler (a local cluster's start included)
NO_WORKER_S = 300.0          # a batch with no worker left this long gives up on what is not done
RETRIES = 2                  # re-runs of a chunk whose task raised (a dead worker is Dask's allowed-failures)
POLL_S = 0.1                 # how often finished chunks are collected
WORKER_CHECK_S = 5.0         # how often a batch with nothing finishing asks whether any worker is left
MAX_AUTO_CHUNK = 16
CHUNK_EVENTS = "kernelgym-chunks"

_CLIENTS: dict[str, Client] = {}
_LOCAL_CLUSTERS: dict[str, Any] = {}
_PLUGGED: set[int] = set()
_LOCK = threading.Lock()


class ClusterError(DavinciError):
    """`gym.cluster` names a cluster that cannot evaluate: unreachable, empty, wrong code, no GPU."""


# --------------------------------------------------------------------------------------------------
# the worker side


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """Hash of the kernelgym source this process imports: workers must match it for identical verdicts."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def stack_versions() -> dict[str, str]:
    """The packages a verdict depends on besides kernelgym itself (read from metadata: nothing imported)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "triton"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


def worker_report() -> dict[str, Any]:
    """Runs on a worker (`Client.run`): what it can evaluate with."""
    from davinci.kernelgym.evaluator import gpu_count

    return {"kernelgym": source_hash(), "versions": stack_versions(), "host": socket.gethostname(),
            "pid": os.getpid(), "gpus": gpu_count(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def evaluate_chunk(config: GymConfig, indices: list[int], items: list[tuple[Problem, Candidate]],
                   seed: int | None, shape_overrides: Mapping[str, int] | None) -> list[tuple[int, EvalResult]]:
    """A Dask task: evaluate one chunk on this worker's warm lanes; results keyed by batch index."""
    from davinci.kernelgym.batch import shared_evaluator

    _log_event({"indices": indices, "pid": os.getpid()})
    ev = shared_evaluator(config)
    if shape_overrides:
        results = [ev.evaluate(p, c, seed=seed, shape_overrides=shape_overrides) for p, c in items]
    else:
        results = ev.evaluate_batch(items, seed=seed)
    return list(zip(indices, results))


def _log_event(msg: dict[str, Any]) -> None:
    """Record a chunk start in the scheduler's event log (`client.get_events(CHUNK_EVENTS)`): re-runs show."""
    try:
        from distributed import get_worker

        get_worker().log_event(CHUNK_EVENTS, msg)
    except ValueError:  # "No worker found": a direct call, not on a Dask worker
        return


class LanePlugin(WorkerPlugin):
    """Closes the worker's evaluators (their lanes and sandboxed processes) when the worker shuts down."""

    idempotent = True
    name = "kernelgym-lanes"

    def teardown(self, worker: Any) -> None:
        from davinci.kernelgym.batch import close_shared

        close_shared()


def dask_setup(worker: Any) -> None:
    """`dask worker --preload davinci.kernelgym.cluster`: nothing to do until the first chunk arrives."""


def dask_teardown(worker: Any) -> None:
    """`--preload` hook: stop this worker's lanes."""
    LanePlugin().teardown(worker)


# --------------------------------------------------------------------------------------------------
# the client side: connect, check, submit, collect


def local_worker_specs(n: int, gpus: int) -> dict[int, dict[str, Any]]:
    """Nanny specs of a local cluster: one thread each; with GPUs, worker i sees GPU i % gpus only."""
    from distributed import Nanny

    specs: dict[int, dict[str, Any]] = {}
    for i in range(n):
        options: dict[str, Any] = {"nthreads": 1, "host": "127.0.0.1", "memory_limit": 0, "dashboard": False,
                                   "name": f"kernelgym-{i}", "silence_logs": logging.ERROR}
        if gpus:
            options.update(env={"CUDA_VISIBLE_DEVICES": str(i % gpus)}, resources={"GPU": 1})
        specs[i] = {"cls": Nanny, "options": options}
    return specs


def start_local_cluster(n: int) -> Any:
    """A Dask cluster of `n` worker processes on this machine (one per GPU when there are GPUs)."""
    from distributed import Scheduler, SpecCluster

    from davinci.kernelgym.evaluator import gpu_count

    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "port": 0, "dashboard": False,
                                               "dashboard_address": None}}
    return SpecCluster(workers=local_worker_specs(n, gpu_count()), scheduler=scheduler,
                       name=f"kernelgym-local-dask-{n}", silence_logs=logging.ERROR)


def get_client(setting: str) -> Client:
    """The client of `gym.cluster` (started or connected once per process, closed at exit)."""
    kind, value = parse_cluster(setting)
    if kind == "local":
        raise ValueError("gym.cluster=local evaluates in process; there is no cluster to connect to")
    with _LOCK:
        client = _CLIENTS.get(setting)
        if client is not None and client.status == "running":
            return client
        if not _CLIENTS and not _LOCAL_CLUSTERS:
            atexit.register(close_clients)
        if kind == "local-dask":
            cluster = _LOCAL_CLUSTERS.get(setting) or start_local_cluster(int(value))
            _LOCAL_CLUSTERS[setting] = cluster
            client = Client(cluster, set_as_default=False)
        else:
            client = _connect(str(value))
        _CLIENTS[setting] = client
        return client


def _connect(address: str) -> Client:
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"gym.cluster: no Dask scheduler answers at {address} within {CONNECT_TIMEOUT_S:.0f} s ({exc})",
            f"start one there (`dask scheduler --port {address.rsplit(':', 1)[-1]}`) and its workers "
            "(`python -m davinci.kernelgym.cluster worker ADDRESS` on each GPU node), check the address and "
            "firewall, or evaluate in process with --set gym.cluster=local") from None


def close_clients(setting: str | None = None) -> None:
    """Close the client of `setting` (every client when None) and the local cluster it started; repeatable."""
    with _LOCK:
        names = [setting] if setting is not None else list(_CLIENTS) + list(_LOCAL_CLUSTERS)
        pairs = [(_CLIENTS.pop(name, None), _LOCAL_CLUSTERS.pop(name, None)) for name in dict.fromkeys(names)]
    closing = [c for pair in pairs for c in pair if c is not None]
    for c in closing:  # the client first, then its local cluster
        _PLUGGED.discard(id(c))
        try:
            c.close()
        except Exception:
            pass


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    workers: int
    gpu_workers: int
    use_gpu: bool          # submit with resources={"GPU": 1}
    hosts: tuple[str, ...]


def check_reports(reports: Mapping[str, Any], resources: Mapping[str, Mapping[str, float]], device: str,
                  setting: str) -> ClusterInfo:
    """The preflight verdict on the workers' `worker_report`s (or the exception each one raised)."""
    if not reports:
        raise ClusterError(f"gym.cluster={setting}: the scheduler has no workers",
                           "start workers with `python -m davinci.kernelgym.cluster worker ADDRESS` on each node")
    broken = {addr: r for addr, r in reports.items() if not isinstance(r, dict)}
    if broken:
        addr, exc = next(iter(broken.items()))
        raise ClusterError(
            f"{len(broken)} of {len(reports)} Dask workers cannot run kernelgym, e.g. {addr}: "
            f"{type(exc).__name__}: {exc}",
            "install daVinci-kernel at the same commit into the workers' Python environment (pip install -e .) "
            "and start them with `python -m davinci.kernelgym.cluster worker ADDRESS`")
    mine = source_hash()
    stale = sorted(addr for addr, r in reports.items() if r.get("kernelgym") != mine)
    if stale:
        raise ClusterError(
            f"{len(stale)} of {len(reports)} Dask workers run a different kernelgym source than this process "
            f"(e.g. {stale[0]}: {reports[stale[0]].get('kernelgym')} vs {mine}); verdicts would differ",
            "check out the same commit on every node and restart its workers")
    versions = stack_versions()
    other = sorted(addr for addr, r in reports.items() if r.get("versions", versions) != versions)
    if other:
        raise ClusterError(
            f"{len(other)} of {len(reports)} Dask workers run other torch/triton versions than this process "
            f"(e.g. {other[0]}: {reports[other[0]].get('versions')} vs {versions}); verdicts would differ",
            "install the project's pinned versions (pip install -e .) in every worker's environment")
    gpu_workers = sum(1 for addr in reports if float((resources.get(addr) or {}).get("GPU", 0)) >= 1)
    if device == "cuda" and not gpu_workers:
        raise ClusterError(
            f"gym.device=cuda but none of the {len(reports)} Dask workers declares a GPU",
            "start one worker per GPU with `python -m davinci.kernelgym.cluster worker ADDRESS` (declares "
            "resources GPU=1) on GPU nodes, or set gym.device=cpu")
    return ClusterInfo(workers=len(reports), gpu_workers=gpu_workers, use_gpu=device != "cpu" and gpu_workers > 0,
                       hosts=tuple(sorted({str(r.get("host")) for r in reports.values()})))


def preflight(client: Client, config: GymConfig) -> ClusterInfo:
    """Check the cluster before submitting anything (`check_reports`)."""
    with contextlib.suppress(TimeoutError, OSError):  # an empty cluster is named by check_reports below
        client.wait_for_workers(1, timeout=WORKER_WAIT_S)
    reports = client.run(worker_report, on_error="return")
    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    resources = {addr: w.get("resources", {}) for addr, w in workers.items()}
    info = check_reports(reports, resources, config.device, config.cluster)
    if id(client) not in _PLUGGED:  # workers that join later get it from the scheduler
        client.register_plugin(LanePlugin())
        _PLUGGED.add(id(client))
    return info


def chunk_size(n_items: int, workers: int, setting: int) -> int:
    """`gym.cluster_chunk`, or about four chunks per worker of at most MAX_AUTO_CHUNK evaluations."""
    if setting > 0:
        return setting
    return max(1, min(MAX_AUTO_CHUNK, -(-n_items // max(1, 4 * workers))))


def evaluate_on_cluster(items: Sequence[tuple[Problem, Candidate]], config: GymConfig, *, progress: bool = False,
                        seed: int | None = None,
                        shape_overrides: Mapping[str, int] | None = None) -> list[EvalResult]:
    """`evaluate_batch` on `config.cluster`: results in the order of `items`, each exactly once."""
    if not items:
        return []
    client = get_client(config.cluster)
    info = preflight(client, config)
    worker_config = dataclasses.replace(config, cluster="local")
    size = chunk_size(len(items), info.workers, config.cluster_chunk)
    batch = uuid.uuid4().hex[:12]
    resources = {"GPU": 1} if info.use_gpu else None
    futures: dict[Future, list[int]] = {}
    for k, start in enumerate(range(0, len(items), size)):
        indices = list(range(start, min(start + size, len(items))))
        fut = client.submit(evaluate_chunk, worker_config, indices, [items[i] for i in indices], seed,
                            dict(shape_overrides) if shape_overrides else None, key=f"kernelgym-{batch}-{k}",
                            resources=resources, retries=RETRIES, pure=False)
        futures[fut] = indices
    results = collect(client, futures, items, progress)
    return [results[i] for i in range(len(items))]


def collect(client: Client, futures: dict[Future, list[int]], items: Sequence[tuple[Problem, Candidate]],
            progress: bool) -> dict[int, EvalResult]:
    """Wait for every chunk; a chunk that failed for good, or never ran, becomes `internal` verdicts."""
    results: dict[int, EvalResult] = {}
    pending = dict(futures)
    bar = _progress(len(items)) if progress else None
    t0 = last_check = time.monotonic()
    no_worker_since: float | None = None
    while pending:
        done = [f for f in pending if f.done()]
        for fut in done:
            indices = pending.pop(fut)
            for i, r in _chunk_results(fut, indices, items, t0):
                if i in results or i not in indices:
                    raise RuntimeError(f"kernelgym cluster: item {i} came back twice or from the wrong chunk")
                results[i] = r
            if bar is not None:
                bar.update(len(indices))
        now = time.monotonic()
        if pending and not done and now - last_check > WORKER_CHECK_S:
            last_check = now
            if client.scheduler_info(n_workers=-1).get("workers"):
                no_worker_since = None
            elif no_worker_since is None:
                no_worker_since = now
            elif now - no_worker_since > NO_WORKER_S:
                for fut, indices in pending.items():
                    fut.cancel()
                    results.update(_failed(indices, items, f"no Dask worker left for {NO_WORKER_S:.0f} s", t0))
                pending.clear()
        time.sleep(POLL_S if pending else 0)
    if bar is not None:
        bar.close()
    return results


def _chunk_results(fut: Future, indices: list[int], items: Sequence[tuple[Problem, Candidate]],
                   t0: float) -> list[tuple[int, EvalResult]]:
    try:
        return list(fut.result())
    except KilledWorker as exc:
        return _failed(indices, items, f"the chunk killed {exc.allowed_failures + 1} Dask workers in a row", t0)
    except Exception as exc:
        return _failed(indices, items, f"the chunk failed on the cluster after {RETRIES} retries: "
                       f"{type(exc).__name__}: {exc}", t0)


def _failed(indices: list[int], items: Sequence[tuple[Problem, Candidate]], why: str,
            t0: float) -> list[tuple[int, EvalResult]]:
    from davinci.kernelgym.evaluator import _simple_result

    return [(i, _simple_result(items[i][0], items[i][1], "internal", why, t0)) for i in indices]


def _progress(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc="kernelgym (dask)", unit="eval")


# --------------------------------------------------------------------------------------------------
# the command line: start this node's workers, check a cluster


def visible_gpus() -> list[str]:
    """The GPUs this node's workers may use: CUDA_VISIBLE_DEVICES's entries, else 0..count-1."""
    from davinci.kernelgym.evaluator import gpu_count

    listed = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return listed or [str(i) for i in range(gpu_count())]


def worker_commands(address: str, gpus: list[str], name: str) -> list[tuple[list[str], dict[str, str]]]:
    """One `dask worker` per GPU (GPU=1 resource, that GPU only), or one CPU worker when `gpus` is empty."""
    base = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--nworkers", "1",
            "--memory-limit", "0", "--preload", "davinci.kernelgym.cluster", "--no-dashboard"]
    if not gpus:
        return [(base + ["--name", f"{name}-cpu"], {})]
    return [(base + ["--name", f"{name}-gpu{g}", "--resources", "GPU=1"], {"CUDA_VISIBLE_DEVICES": g})
            for g in gpus]


def run_workers(address: str, gpus: list[str], name: str) -> int:
    """Start this node's workers and wait; Ctrl-C or SIGTERM stops them all."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the workers as Ctrl-C does
    procs = [subprocess.Popen(cmd, env={**os.environ, **env}) for cmd, env in worker_commands(address, gpus, name)]
    print(f"kernelgym: {len(procs)} Dask worker(s) for {address} "
          f"({'GPUs ' + ','.join(gpus) if gpus else 'CPU'}); Ctrl-C stops them", flush=True)
    try:
        return max(p.wait() for p in procs)
    except KeyboardInterrupt:
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)  # a dask worker closes cleanly on SIGINT
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def check_command(address: str, device: str) -> int:
    client = get_client(address)
    info = preflight(client, GymConfig(cluster=address, device=device))  # type: ignore[arg-type]
    print(f"{info.workers} worker(s) on {len(info.hosts)} host(s) ({', '.join(info.hosts)}), "
          f"{info.gpu_workers} with a GPU; kernelgym source {source_hash()} everywhere")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m davinci.kernelgym.cluster", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker", help="start one Dask worker per visible GPU of this node (one CPU worker without)")
    w.add_argument("address", help="the scheduler, e.g. tcp://head:8786")
    w.add_argument("--gpus", default="", help="comma list of GPU ids (default: every visible GPU)")
    w.add_argument("--cpu", action="store_true", help="one CPU worker even where GPUs are visible")
    w.add_argument("--name", default=socket.gethostname(), help="worker name prefix (default: host name)")
    c = sub.add_parser("check", help="connect, then print the workers, their GPUs and code version")
    c.add_argument("address")
    c.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    args = parser.parse_args(argv)
    try:
        parse_cluster(args.address)
        if args.command == "worker":
            gpus = [] if args.cpu else ([g for g in args.gpus.split(",") if g] or visible_gpus())
            return run_workers(args.address, gpus, args.name)
        return check_command(args.address, args.device)
    except DavinciError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    # run the imported module's main: functions sent to workers must be pickled as davinci.kernelgym.cluster.*,
    # not as this __main__'s copies
    from davinci.kernelgym.cluster import main as _main

    sys.exit(_main())
