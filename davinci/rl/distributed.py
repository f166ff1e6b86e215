"""Multi-GPU RL update: the trainer's step on N torchrun processes with FSDP2 (`fully_shard`).

What: `trainer.train_step` (chunked log-probs, gradient checkpointing, token-budget micro-batches, the
registered loss, clipping, AdamW) with the model's parameters, gradients and optimizer state sharded over
N processes, one per GPU (or CPU processes over gloo). Full fine-tuning and LoRA (peft) alike.

Shape notation: B = samples in a micro-batch; S = padded sequence length; R = padded response length.

Choices:
- Sharding: `fully_shard` on every decoder layer, then on a root module (`LogprobModule`) that holds the
  causal LM and whose forward is `logprobs.response_logprobs`. The root's own parameters (embeddings,
  final norm, LM head, tied or not) are gathered by the root's forward and FSDP2 keeps the root gathered
  until its backward ends, so the chunked, checkpointed LM head reads full weights in forward and recompute.
- Mixed precision on a GPU: trainable parameters are sharded in float32, gathered in the model's bf16 for
  compute, gradients reduced in float32 (`MixedPrecisionPolicy`). The sharded float32 parameters are the
  master weights, so plain AdamW steps them; LoRA's frozen base stays in bf16. On the CPU all is float32.
- The N-process update equals the 1-process one: every rank cuts the step's samples into the same
  micro-batches with the same per-sample scales (normalised over the whole step,
  `losses.normalization_scale`) and takes its share (`assign_micro_batches`: longest processing time
  first, by padded tokens). The step's loss is a *sum* over micro-batches, so gradients are summed over
  ranks (divide factor 1, sum-only reductions), never averaged. FSDP's collectives need the same number
  of backward passes on every rank: a rank with fewer micro-batches runs a padding one at scale 0 (zero
  gradient, statistics dropped). Statistics are summed over ranks, so every rank returns the same metrics.
- Process group from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT): nccl when
  CUDA is available (rank i on cuda:LOCAL_RANK), gloo on the CPU.
- Checkpoints: `save_sharded` / `load_sharded` write and read model + optimizer with
  torch.distributed.checkpoint (each rank its shard; loads into another world size too). `save_backbone`
  gathers the full state dict to rank 0 (CPU), which loads it into a CPU copy of the backbone and writes a
  normal `Backbone.save` folder (merged weights, plus `adapter/` for LoRA) that every other stage reads.
- The entry point loads the whole model on each rank before sharding: that fits 1.5B full fine-tuning and
  a 14B LoRA (28 GB bf16 base) per 80 GB GPU. 14B full fine-tuning would need meta-device init + a DCP
  load instead (not built; `benchmarks/gpu/fsdp_step.py` shows the meta-device path on random weights).

Run (one node, 8 GPUs; several nodes: add --nnodes/--node-rank/--rdzv-endpoint; CPU: gloo, same command):

    torchrun --nproc-per-node 8 -m davinci.rl.distributed update --profile h100 \\
        --checkpoint runs/sft/checkpoint --samples runs/rl/epoch_000/samples.jsonl --out runs/fsdp/epoch_000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import torch
from torch import Tensor

from davinci.errors import ConfigError, DavinciError, InputNotFound, MalformedInput
from davinci.rl.config import RLConfig
from davinci.rl.logprobs import DEFAULT_CHUNK_ROWS, response_logprobs
from davinci.rl.samples import TrainSample
from davinci.rl.trainer import MicroBatch, collate, micro_step, step_metrics, step_micro_batches

LAUNCH_HINT = "start it with torchrun: torchrun --nproc-per-node N -m davinci.rl.distributed update ..."


# ---------------------------------------------------------------------- process group
@dataclass(frozen=True)
class DistEnv:
    """This process's place in the torchrun job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str  # "nccl" or "gloo"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str = "auto", timeout_s: float = 1800.0) -> DistEnv:
    """Join torchrun's process group (env://): nccl on cuda:LOCAL_RANK when CUDA is there, else gloo."""
    import torch.distributed as dist

    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        raise ConfigError("not started by torchrun (RANK and WORLD_SIZE are not set)", LAUNCH_HINT)
    rank, world, local = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        if local >= torch.cuda.device_count():
            raise ConfigError(
                f"local rank {local} has no GPU ({torch.cuda.device_count()} visible)",
                "start at most one process per visible GPU (--nproc-per-node <= the GPU count)",
            )
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    backend = "nccl" if use_cuda else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return DistEnv(rank, world, local, dev, backend)


def close_distributed() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------------- sharding
class LogprobModule(torch.nn.Module):
    """FSDP root: forward = the trainer's chunked response log-probs of one micro-batch."""

    def __init__(self, model: torch.nn.Module, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> None:
        super().__init__()
        self.model = model
        self.chunk_rows = chunk_rows

    def forward(self, input_ids: Tensor, attention_mask: Tensor, resp_pos: Tensor, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
        """[B, S] ids and mask, [B, R] response positions -> ([B, R] log-probs, [B, R] entropies)."""
        rows = SimpleNamespace(input_ids=input_ids, attention_mask=attention_mask, resp_pos=resp_pos)
        return response_logprobs(self.model, rows, temperature=temperature, chunk_rows=self.chunk_rows, with_entropy=True)


def decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The decoder's transformer blocks (`get_decoder().layers`: Llama, Qwen2, Qwen3; peft-wrapped too)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or not len(layers):
        raise ConfigError(
            f"{type(model).__name__} has no decoder layers to shard (get_decoder().layers)",
            "use a transformers decoder-only causal LM (Llama, Qwen2, Qwen3, Mistral)",
        )
    return list(layers)


def mixed_precision(model: torch.nn.Module) -> Any:
    """FSDP2 policy: compute in the model's low precision, trainable shards and reductions in float32.

    Casts trainable low-precision parameters to float32 in place (they become the master weights).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy

    low = {p.dtype for p in model.parameters()} & {torch.bfloat16, torch.float16}
    if not low:
        return MixedPrecisionPolicy()
    for p in model.parameters():
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.float()
    return MixedPrecisionPolicy(param_dtype=low.pop(), reduce_dtype=torch.float32)


def shard_model(model: torch.nn.Module, env: DistEnv, *, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> LogprobModule:
    """Shard `model` in place over all ranks: each decoder layer, then the `LogprobModule` root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    root = LogprobModule(model, chunk_rows)
    policy = mixed_precision(model)
    mesh = init_device_mesh(env.device.type, (env.world_size,))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(root, mesh=mesh, mp_policy=policy)
    for module in root.modules():
        if isinstance(module, FSDPModule):  # the step's loss is a sum over micro-batches: sum, never average
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return root


# ---------------------------------------------------------------------- the step
def assign_micro_batches(costs: Sequence[int], world_size: int) -> list[list[int]]:
    """Micro-batch indices per rank: longest first to the least-loaded rank (ties: fewer batches, lower rank).

    Each rank's indices are returned in ascending order. `costs` are padded tokens (count * longest).

    >>> assign_micro_batches([8, 6, 5, 3], 2)
    [[0, 3], [1, 2]]
    >>> assign_micro_batches([4], 3)
    [[0], [], []]
    """
    load = [0] * world_size
    shares: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        r = min(range(world_size), key=lambda r: (load[r], len(shares[r]), r))
        shares[r].append(i)
        load[r] += costs[i]
    return [sorted(s) for s in shares]


def _padded_tokens(chunk: Sequence[tuple[TrainSample, float]]) -> int:
    return len(chunk) * max(len(s.input_ids) for s, _ in chunk)


def _sum_over_ranks(loss: float, stats: Counter[str]) -> tuple[float, Counter[str]]:
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (loss, dict(stats)))
    total: Counter[str] = Counter()
    for _, part in gathered:
        total.update(part)
    return sum(g[0] for g in gathered), total


def _clip_grad_norm(root: torch.nn.Module, max_grad_norm: float) -> float:
    """Clip the (sharded) trainable gradients by their global norm; returns the norm before clipping."""
    params = [p for p in root.parameters() if p.requires_grad and p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else float("inf"))
    full = getattr(norm, "full_tensor", None)  # a DTensor over the mesh: the same value on every rank
    return float(full() if full is not None else norm)


def distributed_train_step(root: LogprobModule, optimizer: Any, samples: Sequence[TrainSample], cfg: RLConfig, env: DistEnv,
                           *, pad_id: int, temperature: float = 1.0) -> dict[str, float]:
    """One optimizer step over `samples` (the whole step's, same on every rank); returns the step's metrics."""
    root.train()
    optimizer.zero_grad(set_to_none=True)
    chunks = step_micro_batches(samples, cfg)
    shares = assign_micro_batches([_padded_tokens(c) for c in chunks], env.world_size)
    mine = [chunks[i] for i in shares[env.rank]]
    filler = [(min(chunks, key=_padded_tokens)[0][0], 0.0)]  # scale 0: zero gradient, same collectives

    def logprob_fn(batch: MicroBatch) -> tuple[Tensor, Tensor]:
        return root(batch.input_ids, batch.attention_mask, batch.resp_pos, temperature=temperature)

    total, stats = 0.0, Counter[str]()
    for k in range(max(len(s) for s in shares)):
        chunk = mine[k] if k < len(mine) else filler
        batch = collate([s for s, _ in chunk], [c for _, c in chunk], pad_id, env.device)
        loss, micro_stats = micro_step(logprob_fn, batch, cfg, env.device)
        if k < len(mine):
            total += loss
            stats.update(micro_stats)
    total, stats = _sum_over_ranks(total, stats)
    grad_norm = _clip_grad_norm(root, cfg.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return step_metrics(samples, total, stats, grad_norm)


# ---------------------------------------------------------------------- checkpoints
def save_sharded(path: str | Path, root: torch.nn.Module, optimizer: Any) -> Path:
    """Model + optimizer state with torch.distributed.checkpoint, each rank writing its own shard."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(root, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path))
    return Path(path)


def load_sharded(path: str | Path, root: torch.nn.Module, optimizer: Any) -> None:
    """Read a `save_sharded` folder into a model sharded the same way (any world size)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(root, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(root, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def full_state_dict(root: LogprobModule) -> dict[str, Tensor]:
    """The wrapped model's full state dict on rank 0 (CPU tensors, names as in `root.model`); {} elsewhere."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(root, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k.removeprefix("model."): v for k, v in sd.items()}


def save_backbone(root: LogprobModule, env: DistEnv, source: str | Path, model_cfg: Any, out: str | Path) -> Path:
    """Write the trained weights as a `Backbone.save` folder: rank 0 fills a CPU copy of `source`'s backbone."""
    import torch.distributed as dist

    from davinci.llm.backbone import Backbone

    full = full_state_dict(root)  # a collective: every rank takes part
    if env.is_main:
        bb = Backbone.load(source, model_cfg, device="cpu")
        bb.model.load_state_dict(full, strict=True)
        bb.save(out)
    dist.barrier()
    return Path(out)


# ---------------------------------------------------------------------- entry point
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="torchrun --nproc-per-node N -m davinci.rl.distributed", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    up = sub.add_parser("update", help="run an epoch's update steps on a samples file and save the checkpoint")
    up.add_argument("--profile", default="tiny")
    up.add_argument("--profile-file", default="", help="a resolved profile as JSON (davinci.config.loader.to_dict), instead "
                    "of --profile/--set: the epoch driver passes the profile it runs with")
    up.add_argument("--global-step", type=int, default=0, help="optimizer steps of RL before this epoch (rl.warmup_steps counts them)")
    up.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    up.add_argument("--checkpoint", required=True, help="Backbone folder to start from (the sft or previous rl checkpoint)")
    up.add_argument("--samples", required=True, help="samples.jsonl of an RL epoch (TrainSample rows)")
    up.add_argument("--out", required=True, help="folder for checkpoint/, metrics.jsonl and (with --save-sharded) sharded/")
    up.add_argument("--epoch", type=int, default=0, help="epoch number: seeds the sample order (trainer.plan_updates)")
    up.add_argument("--steps", type=int, default=-1, help="run only the first N steps of the plan (-1 = all; 0 = none: load and save)")
    up.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    up.add_argument("--save-sharded", action="store_true", help="also write model + optimizer shards (DCP) to OUT/sharded")
    up.add_argument("--resume-sharded", default="", help="load model + optimizer shards from this DCP folder first")
    return ap


# beside the shards: which epoch's plan they are part way through, and how many of its steps they hold
PROGRESS = "davinci_progress.json"


def _steps_done(folder: Path, epoch: int) -> int:
    path = folder / PROGRESS
    if not path.is_file():
        return 0
    progress = json.loads(path.read_text())
    return int(progress["steps_done"]) if int(progress["epoch"]) == epoch else 0


def _read_samples(path: Path) -> list[TrainSample]:
    from davinci.jsonl import read_jsonl

    out = []
    for n, row in enumerate(read_jsonl(path), 1):
        try:
            out.append(TrainSample.from_dict(row))
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedInput(f"{path}:{n} is not a training sample ({type(exc).__name__}: {exc})",
                                 "pass the samples.jsonl an RL epoch wrote (epoch_NNN/samples.jsonl)") from exc
    return out


def _profile(args: argparse.Namespace) -> Any:
    """The profile from --profile-file (JSON) when given, else --profile with the --set overrides."""
    from davinci.config import load_profile, profile_from_dict

    if not args.profile_file:
        return load_profile(args.profile, args.overrides)
    path = Path(args.profile_file)
    if not path.is_file():
        raise InputNotFound(f"no profile file at {path}", "pass the profile.json the epoch driver wrote, or use --profile")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise MalformedInput(f"{path} is not JSON ({exc})", "pass a profile written by davinci.config.loader.to_dict") from exc
    return profile_from_dict(raw, name=str(raw.get("name", "custom")))


def run_update(args: argparse.Namespace, env: DistEnv) -> list[dict[str, float]]:
    """Load, shard, step through the plan, save. Rank 0 writes OUT/metrics.jsonl and OUT/checkpoint."""
    from davinci.jsonl import write_jsonl
    from davinci.llm.backbone import Backbone
    from davinci.rl.optim import set_lr, warmup_lr
    from davinci.rl.trainer import make_optimizer, plan_updates

    profile = _profile(args)
    cfg = profile.rl
    samples_path = Path(args.samples)
    if not samples_path.is_file():
        raise InputNotFound(f"no samples file at {samples_path}", "pass an RL epoch's samples.jsonl (epoch_NNN/samples.jsonl)")
    samples = _read_samples(samples_path)
    torch.manual_seed(profile.seed)  # a fresh LoRA adapter is drawn alike on every rank (each shards its own copy)
    bb = Backbone.load(args.checkpoint, profile.model, device=env.device)
    root = shard_model(bb.model, env, chunk_rows=cfg.logprob_chunk_rows)
    optimizer = make_optimizer(root, cfg)
    done = 0
    if args.resume_sharded:
        if not Path(args.resume_sharded).is_dir():
            raise InputNotFound(f"no sharded checkpoint at {args.resume_sharded}",
                                "pass the OUT/sharded folder an earlier run wrote with --save-sharded")
        load_sharded(args.resume_sharded, root, optimizer)
        done = _steps_done(Path(args.resume_sharded), args.epoch)  # the same epoch's plan goes on where it stopped
    plan = plan_updates(len(samples), cfg, seed=profile.seed, epoch=args.epoch)
    todo = plan[done:] if args.steps < 0 else plan[done: done + args.steps]
    history = []
    for k, step in enumerate(todo):
        t0 = time.perf_counter()
        lr = warmup_lr(cfg.lr, cfg.warmup_steps, args.global_step + done + k)  # counted from RL's first step
        set_lr(optimizer, lr)
        metrics = distributed_train_step(root, optimizer, [samples[i] for i in step], cfg, env, pad_id=bb.pad_token_id,
                                         temperature=profile.agents.temperature)  # scored as sampled (the trainer's rule)
        metrics.update(update_s=time.perf_counter() - t0, world_size=float(env.world_size), lr=lr)
        metrics["train_tokens_per_s"] = metrics["tokens"] / max(metrics["update_s"], 1e-9)
        history.append(metrics)
    out = Path(args.out)
    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl(out / "metrics.jsonl", history)
    if args.save_sharded:
        if env.is_main and (out / "sharded").exists():
            shutil.rmtree(out / "sharded")
        if env.world_size > 1:
            torch.distributed.barrier()  # no rank writes its shard before the old folder is gone
        save_sharded(out / "sharded", root, optimizer)
        if env.is_main:
            (out / "sharded" / PROGRESS).write_text(json.dumps({"epoch": args.epoch, "steps_done": done + len(todo)}))
    save_backbone(root, env, args.checkpoint, profile.model, out / "checkpoint")
    return history


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        env = init_distributed(args.device)
        try:
            run_update(args, env)
        finally:
            close_distributed()
    except DavinciError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
