"""The evaluation cluster as the pipeline sees it: checked before any work, recorded on every MLflow run.

`gym.cluster` (davinci.kernelgym.cluster) says where kernels are evaluated: `local` (lanes in this
process), `local-dask:N` (N Dask worker processes started here) or `tcp://host:8786` (a running scheduler
and its workers on any number of nodes). The engine dispatches on it by itself; this module adds what the
pipeline needs around it:
- `check_cluster(profile)`: connect and preflight (scheduler answers, workers exist and import the same
  kernelgym source, GPU workers when `gym.device=cuda`) before Prefect starts, so a bad cluster is one
  `ClusterError` naming the fix and no stage has run; each stage run checks again when it opens.
- `ClusterRecord.params()` on the pipeline run (`cluster.setting`, `cluster.nodes`, `cluster.workers`,
  `cluster.gpus`) and `ClusterRecord.tags()` on every stage run (the same values as tags).

    record = check_cluster(load_profile("tiny", ["gym.cluster=local-dask:2"]))
    record.params()   # {"cluster.setting": "local-dask:2", "cluster.nodes": 1, "cluster.workers": 2, "cluster.gpus": 0}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from davinci.config import Profile


@dataclass(frozen=True)
class ClusterRecord:
    """What evaluated this run's kernels: the setting, its hosts, Dask workers and GPUs.

    For `local`, `workers` is `gym.workers` (in-process lanes; 0 = the evaluator's own choice)."""

    setting: str
    nodes: int
    workers: int
    gpus: int

    def params(self) -> dict[str, Any]:
        return {"cluster.setting": self.setting, "cluster.nodes": self.nodes, "cluster.workers": self.workers,
                "cluster.gpus": self.gpus}

    def tags(self) -> dict[str, str]:
        return {"cluster": self.setting, "cluster.nodes": str(self.nodes), "cluster.workers": str(self.workers),
                "cluster.gpus": str(self.gpus)}

    def describe(self) -> str:
        where = "in process" if self.setting == "local" else f"on {self.workers} Dask worker(s)"
        return f"evaluation: gym.cluster={self.setting}, {where}, {self.nodes} node(s), {self.gpus} GPU(s)"


def check_cluster(profile: Profile) -> ClusterRecord:
    """Preflight `profile.gym.cluster` (starting a local Dask cluster if asked); `ClusterError` names the fix."""
    from davinci.kernelgym.config import parse_cluster

    gym = profile.gym
    kind, _ = parse_cluster(gym.cluster)
    if kind == "local":
        from davinci.kernelgym.evaluator import gpu_count

        return ClusterRecord("local", nodes=1, workers=gym.workers, gpus=0 if gym.device == "cpu" else gpu_count())
    from davinci.kernelgym.cluster import get_client, preflight

    info = preflight(get_client(gym.cluster), gym)
    return ClusterRecord(gym.cluster, nodes=len(info.hosts), workers=info.workers, gpus=info.gpu_workers)
