"""Advantage estimators: pure tensor functions registered by name in `ADVANTAGES` (`RLConfig.advantage`).

Each estimator maps the returns of one agent's samples and their group labels to advantages:

    fn(returns: Tensor[N] float, groups: Tensor[N] int64) -> Tensor[N] float

Shape notation: N = samples of one agent (one generation each); K = number of distinct groups. Group
labels are arbitrary integers (only equality matters). A group is "the same question asked again":
  policy     (problem, epoch, turn index): turn t of every rollout of a problem (multi-turn TRLOO);
  selection  (problem, epoch): the selection call of every rollout of a problem;
  summary    (epoch of the summarized episodes): summaries of different problems compete, since only
             successful episodes are summarized and a per-problem group would nearly always be N=1.
`compute_advantages` builds these groups and calls the estimator once per agent, so an agent's
baseline is never made of another agent's rewards.

Estimators:
  trloo               (default) A_i = G_i - mean_{j != i, same group} G_j (Dr. Kernel's TRLOO; no std
                      scaling; the self-inclusion bias of GRPO's mean is removed). N_g = 1 -> A = G.
  grpo                A_i = (G_i - mean_g) / (std_g + eps), std unbiased (as verl); N_g = 1 -> A = G
                      (verl sets mean 0, std 1 for a singleton group).
  reinforce_baseline  A_i = G_i - mean over all N samples of the agent (groups ignored); N = 1 -> A = G.

Every estimator has a vectorized implementation (registered; index_add / bincount, no Python loop) and a
plain loop reference (`REFERENCES`), tested equal across seeds and shapes.

    >>> import torch
    >>> ADVANTAGES.get("trloo")(torch.tensor([1.0, 2.0, 6.0, 5.0]), torch.tensor([0, 0, 0, 1])).tolist()
    [-3.0, -1.5, 4.5, 5.0]
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import torch
from torch import Tensor

from davinci.registry import Registry

AdvantageFn = Callable[[Tensor, Tensor], Tensor]
ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")
REFERENCES: dict[str, AdvantageFn] = {}

GRPO_EPS = 1e-6


def _dense_groups(groups: Tensor) -> tuple[Tensor, int]:
    """Arbitrary int labels [N] -> contiguous ids in [0, K) [N], and K."""
    _, inverse = torch.unique(groups, return_inverse=True)
    return inverse, int(inverse.max().item()) + 1 if inverse.numel() else 0


def _group_sum(values: Tensor, ids: Tensor, k: int) -> Tensor:
    """Per-group sum [K] of values [N]."""
    return torch.zeros(k, dtype=values.dtype).index_add_(0, ids, values)


# ---------------------------------------------------------------------------------------------------
# Vectorized estimators (registered)


@ADVANTAGES.register("trloo")
def trloo(returns: Tensor, groups: Tensor) -> Tensor:
    """Leave-one-out: A_i = G_i - (S_g - G_i) / (n_g - 1), where S_g, n_g are the group's sum and size."""
    returns = returns.to(torch.float64)
    ids, k = _dense_groups(groups)
    sums = _group_sum(returns, ids, k)[ids]  # [N] S_g of each sample's group
    counts = torch.bincount(ids, minlength=k).to(returns.dtype)[ids]  # [N] n_g
    others = (sums - returns) / (counts - 1).clamp(min=1.0)  # [N] mean of the other members
    return torch.where(counts > 1, returns - others, returns).to(torch.float32)


@ADVANTAGES.register("grpo")
def grpo(returns: Tensor, groups: Tensor) -> Tensor:
    """Group-normalized: A_i = (G_i - mean_g) / (std_g + eps) with the unbiased std; singleton -> G."""
    returns = returns.to(torch.float64)
    ids, k = _dense_groups(groups)
    counts = torch.bincount(ids, minlength=k).to(returns.dtype)  # [K]
    mean = (_group_sum(returns, ids, k) / counts)[ids]  # [N]
    sq = _group_sum((returns - mean) ** 2, ids, k)  # [K] sum of squared deviations
    std = torch.sqrt(sq / (counts - 1).clamp(min=1.0))[ids]  # [N]
    n = counts[ids]
    return torch.where(n > 1, (returns - mean) / (std + GRPO_EPS), returns).to(torch.float32)


@ADVANTAGES.register("reinforce_baseline")
def reinforce_baseline(returns: Tensor, groups: Tensor) -> Tensor:
    """Batch baseline: A_i = G_i - mean(G) over the agent's whole batch (groups ignored); N = 1 -> G."""
    del groups  # the baseline is the batch mean, not a group mean
    returns = returns.to(torch.float64)
    if returns.numel() <= 1:
        return returns.to(torch.float32)
    return (returns - returns.mean()).to(torch.float32)


# ---------------------------------------------------------------------------------------------------
# Loop references (the definitions, written the obvious way)


def _members(groups: Sequence[int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        out[g].append(i)
    return out


def trloo_reference(returns: Tensor, groups: Tensor) -> Tensor:
    g, labels = returns.tolist(), groups.tolist()
    out = [0.0] * len(g)
    for members in _members(labels).values():
        for i in members:
            others = [g[j] for j in members if j != i]
            out[i] = g[i] - sum(others) / len(others) if others else g[i]
    return torch.tensor(out, dtype=torch.float32)


def grpo_reference(returns: Tensor, groups: Tensor) -> Tensor:
    g, labels = returns.tolist(), groups.tolist()
    out = [0.0] * len(g)
    for members in _members(labels).values():
        vals = [g[i] for i in members]
        if len(vals) == 1:
            out[members[0]] = vals[0]
            continue
        mean = sum(vals) / len(vals)
        std = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5
        for i in members:
            out[i] = (g[i] - mean) / (std + GRPO_EPS)
    return torch.tensor(out, dtype=torch.float32)


def reinforce_baseline_reference(returns: Tensor, groups: Tensor) -> Tensor:
    g = returns.tolist()
    if len(g) <= 1:
        return torch.tensor(g, dtype=torch.float32)
    mean = sum(g) / len(g)
    return torch.tensor([v - mean for v in g], dtype=torch.float32)


REFERENCES.update(trloo=trloo_reference, grpo=grpo_reference, reinforce_baseline=reinforce_baseline_reference)


# ---------------------------------------------------------------------------------------------------
# Per-agent dispatch


@dataclass(frozen=True)
class AdvantageItem:
    """One trainable generation's return: which agent made it and which group it competes in."""

    agent: str
    group: tuple[Hashable, ...]
    ret: float


def compute_advantages(items: Sequence[AdvantageItem], estimator: str) -> list[float]:
    """Advantages in the order of `items`; the estimator runs once per agent over that agent's groups.

    >>> items = [AdvantageItem("policy", ("p", 0), 1.0), AdvantageItem("selection", ("p",), 3.0),
    ...          AdvantageItem("policy", ("p", 0), 0.0)]
    >>> compute_advantages(items, "trloo")
    [1.0, 3.0, -1.0]
    """
    fn = ADVANTAGES.get(estimator)
    out = [0.0] * len(items)
    by_agent: dict[str, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        by_agent[item.agent].append(i)
    for idxs in by_agent.values():
        labels: dict[tuple[Hashable, ...], int] = {}
        groups = torch.tensor([labels.setdefault(items[i].group, len(labels)) for i in idxs], dtype=torch.int64)
        returns = torch.tensor([items[i].ret for i in idxs], dtype=torch.float64)
        for i, a in zip(idxs, fn(returns, groups).tolist()):
            out[i] = float(a)
    return out
