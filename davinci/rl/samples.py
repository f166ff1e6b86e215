"""Training samples: one per trainable `Generation`, built from Episodes with rewards and advantages.

A `TrainSample` is plain data: `input_ids = prompt_ids + response_ids`, `prompt_len`, the agent, the
advantage and (once scored) the behaviour and reference log-probs of the response tokens. The loss mask
is implied: positions >= prompt_len are the generation's own response tokens, the only ones trained on.
Everything before (the problem, retrieved skill text, earlier attempts, evaluator feedback, the chat
template's headers) is the prompt, i.e. context only.

Ids come from the backend (`GenOutput.prompt_ids/response_ids`). A backend that returned no ids (an HTTP
server that ignores the ids extension) is re-encoded: the prompt through `Backbone.encode_chat(messages,
add_generation_prompt=True)`, the response through the tokenizer plus the end-of-turn token when the
generation stopped on it (so the model is still taught to stop).

Which generations are trained, with which return and in which group (see `rewards` and `advantages`):
  policy     every played turn t: return R_t (absorbing early stop, horizon `agents.turns`), group
             (problem, epoch, t)
  selection  the episode's selection call when its rerank answer parsed: best-turn score, group
             (problem, epoch). An unparsable answer fell back to BM25's order, so its tokens chose nothing
             and are not trained.
  summary    summaries of the previous epoch (delayed credit): admission reward, group (that epoch,)

`advantage_plan` is the pure part (episodes + profile -> every trained generation's return, group and
advantage); `build_samples` adds the token ids. With `rl.zero_advantage_groups: drop`, generations of a
group whose returns are all equal (advantage 0 for every member, hence no policy gradient) are left out,
so they do not dilute the per-agent token normaliser; their share is reported either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Hashable, Iterable, Mapping, Sequence

from davinci.rl.advantages import AdvantageItem, compute_advantages
from davinci.rl.config import RLConfig
from davinci.rl.rewards import EpisodeRewards, Parent, episode_rewards


@dataclass(frozen=True)
class TrainSample:
    """One generation to train on. Log-prob tuples have one entry per response token, or are empty."""

    agent: str
    input_ids: tuple[int, ...]  # prompt_ids + response_ids
    prompt_len: int  # tokens before the response (context only, never trained on)
    advantage: float
    ret: float  # the return the advantage was computed from
    key: str  # "<episode_id>/<agent>/<turn>": where the generation came from
    old_logprobs: tuple[float, ...] = ()  # behaviour policy's log-probs of the response tokens
    ref_logprobs: tuple[float, ...] = ()  # frozen reference model's log-probs (kl_coef > 0 or ref_kl_metric)
    rollout_logprobs: tuple[float, ...] = ()  # the backend's own log-probs as generated (empty if none)

    @property
    def response_len(self) -> int:
        return len(self.input_ids) - self.prompt_len

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in _SEQ_FIELDS:
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainSample":
        return cls(**{**d, **{k: tuple(d.get(k, ())) for k in _SEQ_FIELDS}})


_SEQ_FIELDS = ("input_ids", "old_logprobs", "ref_logprobs", "rollout_logprobs")


@dataclass(frozen=True)
class PendingSummary:
    """A summary generation of epoch e, waiting for the skills stage's admission decision (trained in e+1)."""

    episode_id: str
    problem_id: str
    epoch: int
    skill_id: str  # id of the candidate skill it proposed ("" when its JSON was rejected)
    input_ids: tuple[int, ...]
    prompt_len: int
    old_logprobs: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["input_ids"], d["old_logprobs"] = list(self.input_ids), list(self.old_logprobs)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PendingSummary":
        return cls(**{**d, "input_ids": tuple(d["input_ids"]), "old_logprobs": tuple(d["old_logprobs"])})


# ---------------------------------------------------------------------------------------------------
# Token ids of a generation


def generation_ids(gen: Any, backbone: Any) -> tuple[list[int], list[int], tuple[float, ...]]:
    """(prompt_ids, response_ids, backend logprobs) of a `Generation`, re-encoding when ids are missing."""
    from davinci.llm.backends import ensure_ids

    out = ensure_ids(backbone, list(gen.messages), gen.output)  # re-encodes only when ids are missing
    lp = tuple(out.logprobs) if len(out.logprobs) == len(out.response_ids) else ()
    return list(out.prompt_ids), list(out.response_ids), lp


# ---------------------------------------------------------------------------------------------------
# Episodes -> samples


@dataclass(frozen=True)
class Planned:
    """A generation chosen for training, with its return, group and advantage (no token ids yet)."""

    item: AdvantageItem
    key: str
    advantage: float = 0.0
    zero_group: bool = False  # every member of its group has the same return (advantage 0 throughout)
    gen: Any = None  # a Generation (fresh rollouts)
    summary: PendingSummary | None = None  # or a stored summary of the previous epoch


def _episode_items(ep: Any, rewards: EpisodeRewards) -> list[Planned]:
    items = []
    for turn, ret in zip(ep.turns, rewards.turn_returns):
        group = ("policy", ep.problem_id, ep.epoch, turn.index)  # turn t competes with turn t of the group
        items.append(Planned(AdvantageItem("policy", group, ret), f"{ep.episode_id}/policy/{turn.index}", gen=turn.generation))
    if ep.selection is not None and ep.selection.parse_ok:  # an unparsable rerank chose nothing: not trained
        group = ("selection", ep.problem_id, ep.epoch)  # the selection calls for the same problem
        items.append(Planned(AdvantageItem("selection", group, rewards.selection), f"{ep.episode_id}/selection/0", gen=ep.selection))
    return items


def _summary_items(pending: Sequence[PendingSummary], rewards: Sequence[float]) -> list[Planned]:
    return [
        Planned(AdvantageItem("summary", ("summary", p.epoch), r), f"{p.episode_id}/summary/0", summary=p)
        for p, r in zip(pending, rewards)
    ]


def _zero_groups(items: Sequence[AdvantageItem]) -> set[tuple[str, Hashable]]:
    """(agent, group) pairs whose members all have the same return (one-member groups count as zero too)."""
    returns: dict[tuple[str, Hashable], set[float]] = {}
    for it in items:
        returns.setdefault((it.agent, it.group), set()).add(round(it.ret, 12))
    return {k for k, v in returns.items() if len(v) == 1}


def advantage_plan(
    episodes: Sequence[Any],
    profile: Any,
    pending_summaries: Sequence[PendingSummary] = (),
    summary_rewards: Sequence[float] = (),
) -> tuple[list[Planned], list[EpisodeRewards]]:
    """Rewards (absorbing early stop at horizon `profile.agents.turns`) -> returns -> per-agent advantages.

    Pure: no model, no token ids. Returns every trainable generation in order, and each episode's rewards.
    """
    cfg: RLConfig = profile.rl
    rewards = [episode_rewards([t.result for t in ep.turns], cfg, horizon=profile.agents.turns, parent=Parent.of(ep.start_state, ep.start_speedup))
               for ep in episodes]
    planned = [p for ep, r in zip(episodes, rewards) for p in _episode_items(ep, r)]
    planned += _summary_items(pending_summaries, summary_rewards)
    items = [p.item for p in planned]
    zero = _zero_groups(items)
    advantages = compute_advantages(items, cfg.advantage)
    out = [replace(p, advantage=float(a), zero_group=(p.item.agent, p.item.group) in zero) for p, a in zip(planned, advantages)]
    return out, rewards


def zero_group_shares(planned: Sequence[Planned]) -> dict[str, float]:
    """Per agent, the share of its groups whose returns are all equal (no learning signal)."""
    groups: dict[str, dict[Hashable, bool]] = {}
    for p in planned:
        groups.setdefault(p.item.agent, {})[p.item.group] = p.zero_group
    return {f"zero_adv_group_share_{a}": sum(g.values()) / len(g) for a, g in sorted(groups.items())}


def build_samples(
    episodes: Sequence[Any],
    profile: Any,
    backbone: Any,
    pending_summaries: Sequence[PendingSummary] = (),
    summary_rewards: Sequence[float] = (),
) -> tuple[list[TrainSample], list[EpisodeRewards], dict[str, float]]:
    """Samples (`advantage_plan` + token ids), the rewards of each episode, and counts.

    Empty responses are dropped (nothing to train). Backend log-probs are kept as behaviour log-probs only
    when `rl.behaviour_logprobs == "backend"`; otherwise the trainer recomputes them before updating.
    """
    cfg: RLConfig = profile.rl
    planned, rewards = advantage_plan(episodes, profile, pending_summaries, summary_rewards)
    counts = {**zero_group_shares(planned), "samples_empty_dropped": 0.0, "samples_too_long_dropped": 0.0, "samples_zero_group_dropped": 0.0}
    limit = token_limit(cfg, backbone)
    samples = []
    for p in planned:
        if p.zero_group and cfg.zero_advantage_groups == "drop":
            counts["samples_zero_group_dropped"] += 1
            continue
        lp: tuple[float, ...] = ()  # the backend's log-probs (fresh generations only)
        if p.summary is not None:
            ids, plen, old = list(p.summary.input_ids), p.summary.prompt_len, p.summary.old_logprobs
        else:
            prompt, response, lp = generation_ids(p.gen, backbone)
            ids, plen, old = prompt + response, len(prompt), (lp if cfg.behaviour_logprobs == "backend" else ())
        if len(ids) <= plen or plen == 0:
            counts["samples_empty_dropped"] += 1
            continue
        if limit and len(ids) > limit:
            counts["samples_too_long_dropped"] += 1
            continue
        samples.append(TrainSample(p.item.agent, tuple(ids), plen, p.advantage, float(p.item.ret), p.key, tuple(old), rollout_logprobs=tuple(lp)))
    return samples, rewards, counts


def token_limit(cfg: RLConfig, backbone: Any) -> int:
    """Longest trainable sequence: `rl.max_train_tokens`, else the model's `max_seq_len` (0 = no limit)."""
    return cfg.max_train_tokens or int(getattr(getattr(backbone, "cfg", None), "max_seq_len", 0) or 0)


def with_logprobs(samples: Sequence[TrainSample], old: Sequence[Sequence[float]] | None, ref: Sequence[Sequence[float]] | None) -> list[TrainSample]:
    """Attach scored log-probs; a sample that already has behaviour log-probs keeps them."""
    out = []
    for i, s in enumerate(samples):
        new_old = s.old_logprobs or (tuple(old[i]) if old is not None else ())
        new_ref = tuple(ref[i]) if ref is not None else s.ref_logprobs
        out.append(replace(s, old_logprobs=new_old, ref_logprobs=new_ref))
    return out


def summary_samples(episodes: Iterable[Any], backbone: Any, cfg: RLConfig) -> list[TrainSample]:
    """This epoch's summary generations as unscored samples (advantage 0), keyed "<episode_id>/summary/0".

    They are not trained now: the epoch driver scores their behaviour log-probs with this epoch's weights
    and stores them (`to_pending`) for delayed credit in the next epoch.
    """
    out = []
    for ep in episodes:
        if ep.summary is None:
            continue
        prompt, response, lp = generation_ids(ep.summary, backbone)
        limit = token_limit(cfg, backbone)
        if not response or not prompt or (limit and len(prompt) + len(response) > limit):
            continue
        old = lp if cfg.behaviour_logprobs == "backend" else ()
        out.append(TrainSample("summary", tuple(prompt + response), len(prompt), 0.0, 0.0, f"{ep.episode_id}/summary/0", old))
    return out


def to_pending(episodes: Iterable[Any], scored: Sequence[TrainSample]) -> list[PendingSummary]:
    """Pair scored summary samples with their episodes (problem, epoch, the candidate skill's id)."""
    by_key = {s.key: s for s in scored}
    out = []
    for ep in episodes:
        s = by_key.get(f"{ep.episode_id}/summary/0")
        if s is None:
            continue
        skill_id = str((ep.skill_candidate or {}).get("id", ""))
        out.append(PendingSummary(ep.episode_id, ep.problem_id, ep.epoch, skill_id, s.input_ids, s.prompt_len, s.old_logprobs))
    return out
