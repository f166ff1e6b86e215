"""kernelgym on a Dask cluster (`gym.cluster`): settings, preflight errors, device-keyed caches, and real
local clusters that give the local path's verdicts, every one exactly once, even when a worker dies.

The slow tests share one `local-dask:2` cluster (two worker processes, one thread and one lane each) and
the local path's verdicts on the same fixtures; the whole file takes about 2-3 minutes on an idle 2-core box.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from davinci.errors import ConfigError
from davinci.kernelgym import GymConfig, evaluate, evaluate_batch
from davinci.kernelgym import batch as batch_module
from davinci.kernelgym import cluster
from davinci.kernelgym.baselines import DiskCache, device_model
from davinci.kernelgym.checks import PRESETS
from davinci.kernelgym.config import parse_cluster
from davinci.kernelgym.perf import baseline_key

ROOT = Path(__file__).resolve().parents[2]

# fixture candidate -> problem: honest ones and cheats whose verdict does not hang on timing noise
PAIRS = [("honest_relu", "relu"), ("honest_row_sum", "row_sum"), ("honest_scale_bias", "scale_bias"),
         ("honest_softmax", "softmax_wide"), ("cheat_zeros_near_zero", "softmax_wide"),
         ("cheat_input_mutation", "relu"), ("cheat_torch_fallback", "relu"), ("cheat_timer_patch", "relu"),
         ("cheat_wrong_dtype", "relu"), ("cheat_partial_sum", "row_sum"), ("fail_syntax", "relu"),
         ("fail_raise_forward", "relu")]


# Every check but the wall-clock ones (`wall_clock_mismatch` applies on the GPU only) and `watched_behaviour`: a ratio (an audit request over 3x the scored rounds' median)
# that honest kernels trip at random when two workers share this loaded 2-core box; timing noise on the CPU,
# not a difference between the cluster and the local path.
CHECKS = ",".join(name for name in PRESETS["strict"] if name not in ("watched_behaviour", "wall_clock_mismatch"))


def verdicts(results):
    return [(r.problem_id, r.correct, r.flags, r.error_kind) for r in results]


# --------------------------------------------------------------------------------------------------
# settings, chunks, preflight: no cluster needed


@pytest.mark.parametrize("value, expected", [("local", ("local", 0)), ("local-dask:2", ("local-dask", 2)),
                                             ("tcp://10.0.0.5:8786", ("address", "tcp://10.0.0.5:8786")),
                                             ("tcp://head-node:8786", ("address", "tcp://head-node:8786"))])
def test_cluster_setting_forms(value, expected):
    assert parse_cluster(value) == expected
    assert GymConfig(cluster=value).cluster == value


@pytest.mark.parametrize("bad", ["dask", "local-dask", "local-dask:0", "local-dask:two", "10.0.0.5:8786", ""])
def test_bad_cluster_setting_names_the_valid_forms(bad):
    with pytest.raises(ConfigError) as err:
        GymConfig(cluster=bad)
    assert "local-dask:N" in err.value.hint and "tcp://" in err.value.hint


def test_cluster_setting_through_the_profile_loader():
    from davinci.config.loader import build

    assert build(GymConfig, {"cluster": "local-dask:2"}, "gym").cluster == "local-dask:2"
    with pytest.raises(ConfigError, match="gym.cluster"):
        build(GymConfig, {"cluster": "ray://head"}, "gym")


def test_chunk_size():
    assert cluster.chunk_size(69, 2, 0) == 9            # about four chunks per worker
    assert cluster.chunk_size(768, 8, 0) == 16          # never more than MAX_AUTO_CHUNK
    assert cluster.chunk_size(3, 8, 0) == 1
    assert cluster.chunk_size(100, 2, 5) == 5           # gym.cluster_chunk wins


def test_local_setting_never_touches_dask(monkeypatch):
    called = []
    monkeypatch.setattr(cluster, "evaluate_on_cluster", lambda *a, **k: called.append(a) or [])
    assert evaluate_batch([], GymConfig(cluster="local-dask:2")) == [] and len(called) == 1
    assert evaluate_batch([], GymConfig()) == [] and len(called) == 1


def _report(**kw):
    return {"kernelgym": cluster.source_hash(), "versions": cluster.stack_versions(), "host": "node1", "pid": 1,
            "gpus": 0, **kw}


def test_preflight_accepts_matching_workers_and_uses_gpus_when_declared():
    cpu = cluster.check_reports({"a": _report(), "b": _report()}, {}, "auto", "x")
    assert (cpu.workers, cpu.gpu_workers, cpu.use_gpu) == (2, 0, False)
    gpu = cluster.check_reports({"a": _report(gpus=1)}, {"a": {"GPU": 1}}, "auto", "x")
    assert gpu.use_gpu and gpu.gpu_workers == 1
    assert not cluster.check_reports({"a": _report(gpus=1)}, {"a": {"GPU": 1}}, "cpu", "x").use_gpu


@pytest.mark.parametrize("reports, device, words", [
    ({}, "auto", "has no workers"),
    ({"a": _report(), "b": ModuleNotFoundError("No module named 'davinci'")}, "auto", "cannot run kernelgym"),
    ({"a": _report(kernelgym="0123456789abcdef")}, "auto", "different kernelgym source"),
    ({"a": _report(versions={"torch": "1.0", "triton": "1.0"})}, "auto", "other torch/triton versions"),
    ({"a": _report()}, "cuda", "declares a GPU"),
])
def test_preflight_errors_name_the_fix(reports, device, words):
    with pytest.raises(cluster.ClusterError) as err:
        cluster.check_reports(reports, {}, device, "tcp://head:8786")
    assert words in err.value.message and err.value.hint


def test_unreachable_scheduler_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2.0)
    t0 = time.monotonic()
    with pytest.raises(cluster.ClusterError) as err:
        evaluate_batch([(None, None)], GymConfig(cluster="tcp://127.0.0.1:9"))
    assert "no Dask scheduler answers at tcp://127.0.0.1:9" in err.value.message
    assert "dask scheduler" in err.value.hint and time.monotonic() - t0 < 30


class _Pending:
    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.cancelled = error, False

    def done(self) -> bool:
        return self.error is not None

    def result(self):
        raise self.error

    def cancel(self) -> None:
        self.cancelled = True


class _NoWorkers:
    def scheduler_info(self, n_workers: int = -1) -> dict:
        return {"workers": {}}


def test_chunks_that_never_finish_or_kill_workers_become_internal_verdicts(monkeypatch, problem, candidate):
    from distributed.scheduler import KilledWorker

    monkeypatch.setattr(cluster, "NO_WORKER_S", 0.2)
    monkeypatch.setattr(cluster, "WORKER_CHECK_S", 0.05)
    p = problem("relu")
    items = [(p, candidate("honest_relu", p))] * 3
    stuck, deadly = _Pending(), _Pending(KilledWorker("kernelgym-x-0", None, 3))
    results = cluster.collect(_NoWorkers(), {deadly: [0], stuck: [1, 2]}, items, progress=False)
    assert sorted(results) == [0, 1, 2] and all(r.error_kind == "internal" for r in results.values())
    assert "killed 4 Dask workers" in results[0].error and "no Dask worker left" in results[1].error
    assert stuck.cancelled


def test_local_worker_specs_give_each_worker_one_gpu():
    specs = cluster.local_worker_specs(3, gpus=2)
    assert [s["options"]["env"]["CUDA_VISIBLE_DEVICES"] for s in specs.values()] == ["0", "1", "0"]
    assert all(s["options"]["resources"] == {"GPU": 1} and s["options"]["nthreads"] == 1 for s in specs.values())
    assert "resources" not in cluster.local_worker_specs(1, gpus=0)[0]["options"]


def test_worker_command_starts_one_worker_per_gpu():
    cmds = cluster.worker_commands("tcp://head:8786", ["0", "3"], "n1")
    assert [env for _, env in cmds] == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "3"}]
    for cmd, _ in cmds:
        assert cmd[cmd.index("--resources") + 1] == "GPU=1" and cmd[cmd.index("--nthreads") + 1] == "1"
        assert cmd[cmd.index("--preload") + 1] == "davinci.kernelgym.cluster"
    (cpu_cmd, cpu_env), = cluster.worker_commands("tcp://head:8786", [], "n1")
    assert "--resources" not in cpu_cmd and cpu_env == {}


def test_baseline_cache_is_keyed_by_device_model(tmp_path):
    """A heterogeneous cluster sharing one cache folder never reads another GPU model's baseline."""
    h100 = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.13.0"}
    h100_pcie = {"device": "NVIDIA H100 PCIe", "torch": "2.13.0"}
    a100 = {"device": "NVIDIA A100-SXM4-80GB", "torch": "2.13.0"}
    cpu = {"device": "cpu", "torch": "2.13.0"}
    keys = {baseline_key(info, "code", "compile", 256) for info in (h100, h100_pcie, a100, cpu)}
    assert len(keys) == 4
    assert baseline_key(dict(h100), "code", "compile", 256) == baseline_key(h100, "code", "compile", 256)
    assert device_model(cpu).startswith("cpu:") and len(device_model(cpu)) > 4  # the CPU's model name
    cache = DiskCache(tmp_path)
    cache.put("baselines", baseline_key(h100, "code", "compile", 256), {"samples": [1.0]})
    assert cache.get("baselines", baseline_key(a100, "code", "compile", 256)) is None


# --------------------------------------------------------------------------------------------------
# real local clusters (module-scoped: one local-dask:2 cluster for all)


@pytest.fixture(scope="module")
def items(problem, candidate):
    out = []
    for cand, prob in PAIRS:
        p = problem(prob)
        out.append((p, candidate(cand, p)))
    return out


@pytest.fixture(scope="module")
def configs(make_config, tmp_path_factory):
    local = make_config(tmp_path_factory.mktemp("cluster-cache"), checks=CHECKS)
    yield local, dataclasses.replace(local, cluster="local-dask:2")
    cluster.close_clients()
    batch_module.close_shared()


@pytest.fixture(scope="module")
def expected(items, configs):
    """The local path's verdicts (the in-process lanes of today's evaluate_batch)."""
    results = evaluate_batch(items, configs[0], seed=1)
    batch_module.close_shared()  # free the local lanes before the cluster starts
    return verdicts(results)


@pytest.mark.slow
def test_cluster_verdicts_match_the_local_path(items, configs, expected):
    assert [v[1] for v in expected[:4]] == [True] * 4 and not any(v[1] for v in expected[4:])
    results = evaluate_batch(items, dataclasses.replace(configs[1], cluster_chunk=3), seed=1)
    assert verdicts(results) == expected


@pytest.mark.slow
def test_single_evaluate_with_shape_overrides_goes_through_the_cluster(problem, candidate, configs):
    p = problem("relu")
    c = candidate("cheat_shape_hardcode", p)
    r = evaluate(p, c, configs[1], seed=3, shape_overrides={"batch_size": 24, "dim": 640})
    assert not r.correct and r.shape_overrides == {"batch_size": 24, "dim": 640}


@pytest.mark.slow
def test_no_gpu_worker_for_device_cuda_fails_before_any_work(items, configs):
    with pytest.raises(cluster.ClusterError, match="declares a GPU"):
        evaluate_batch(items, dataclasses.replace(configs[1], device="cuda"))


def _busy_worker(client, timeout: float) -> str:
    """A worker address that has been processing a kernelgym chunk for a moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = [w for w, keys in client.processing().items() if any("kernelgym-" in str(k) for k in keys)]
        if busy:
            time.sleep(1.0)  # well inside the chunk
            return busy[0]
        time.sleep(0.1)
    raise AssertionError("no worker picked up a chunk")


@pytest.mark.slow
def test_killed_worker_mid_batch_every_verdict_exactly_once(items, configs, expected):
    config = dataclasses.replace(configs[1], cluster_chunk=3)  # 4 chunks of ~3-9 s on warm lanes
    client = cluster.get_client(config.cluster)
    before = len(client.get_events(cluster.CHUNK_EVENTS))
    pids = client.run(os.getpid)
    out: dict[str, list] = {}
    runner = threading.Thread(target=lambda: out.setdefault("results", evaluate_batch(items, config, seed=1)))
    runner.start()
    victim = _busy_worker(client, timeout=120)
    assert runner.is_alive()  # mid-batch
    lanes = psutil.Process(pids[victim]).children(recursive=True)  # its reference worker, zygote, candidates
    os.kill(pids[victim], signal.SIGKILL)
    runner.join(timeout=240)
    assert not runner.is_alive() and "results" in out
    assert verdicts(out["results"]) == expected  # every item once, in order, the local path's verdicts
    starts = [msg["indices"] for _, msg in client.get_events(cluster.CHUNK_EVENTS)[before:]]
    started = sorted(i for indices in starts for i in indices)
    assert len(started) > len(items) and set(started) == set(range(len(items)))  # the dead chunk re-ran
    assert len(client.scheduler_info()["workers"]) >= 1
    _, alive = psutil.wait_procs(lanes, timeout=15)
    assert not alive, f"the dead worker's lane processes outlived it: {alive}"


@pytest.mark.slow
def test_broken_worker_is_refused_and_the_cli_worker_joins(tmp_path, items, configs):
    """A worker that cannot import the project stops the batch before any work with the fix; then
    `python -m davinci.kernelgym.cluster worker ADDRESS` joins and `... check ADDRESS` passes."""
    from distributed import LocalCluster

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    fake = tmp_path / "shadow" / "davinci"  # a `davinci` package that shadows the project: every import fails
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('not the project')\n")
    with LocalCluster(n_workers=0, processes=True, dashboard_address=None, host="127.0.0.1") as lc:
        address = lc.scheduler_address
        good = subprocess.Popen([sys.executable, "-m", "davinci.kernelgym.cluster", "worker", address, "--cpu"],
                                env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bad = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                "--no-dashboard"], env={**os.environ, "PYTHONPATH": str(fake.parent)},
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = cluster.get_client(address)
            client.wait_for_workers(2, timeout=90)
            with pytest.raises(cluster.ClusterError, match="1 of 2 Dask workers cannot run kernelgym") as err:
                evaluate_batch(items[:1], dataclasses.replace(configs[0], cluster=address))
            assert "pip install -e ." in err.value.hint
            bad.send_signal(signal.SIGINT)  # a dask worker closes cleanly on SIGINT
            bad.wait(60)
            check = subprocess.run([sys.executable, "-m", "davinci.kernelgym.cluster", "check", address],
                                   env=env, cwd=ROOT, capture_output=True, text=True, timeout=90)
            assert check.returncode == 0 and "1 worker(s)" in check.stdout, check.stderr
        finally:
            cluster.close_clients(address)
            for proc in (bad, good):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    proc.wait(60)
