"""Peak GPU memory and step time of one FSDP2 RL update step on 1 vs N GPUs (davinci.rl.distributed).

Rows (random-init models in bfloat16 built on the meta device and sharded before any weight is allocated,
so nothing is downloaded and no GPU ever holds a full copy):
  h100       full fine-tuning, Qwen2.5-Coder-1.5B's shape (configs/h100.yaml's model), the h100 profile's
             step: 32 samples of 8,192 tokens (6,144 prompt + 2,048 response), micro-batches of at most
             16,384 padded tokens, gradient checkpointing, chunked log-probs (as benchmarks/gpu/rl_update_memory.py)
  paper-14b  LoRA (r 16 on every projection), Qwen3-14B's shape (configs/paper-14b.yaml's model): samples
             of 32,768 tokens (24,576 + 8,192), micro-batches of 32,768 tokens, 2 micro-batches per GPU
             of the largest run (the profile's 32 samples would take minutes per step on one GPU)
Each (row, GPU count) is its own `torchrun --standalone --nproc-per-node K` of this file in --worker mode:
one warm-up step, then one timed step (`distributed_train_step`: the same micro-batches on every count,
gradients summed over ranks). Peak memory is `torch.cuda.max_memory_allocated` over both steps, the
largest of the ranks. An out-of-memory rank reports OOM (torchrun then stops the others).

    python benchmarks/gpu/fsdp_step.py --gpus 1,8                 # both rows on 1 and 8 GPUs; prints the table
    python benchmarks/gpu/fsdp_step.py --gpus 1,2 --rows h100     # one row
    python benchmarks/gpu/fsdp_step.py --smoke-cpu                # gloo, tiny shapes, 1 and 2 processes (no numbers)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# config.json fields of the two models that shape memory
QWEN25_15B = dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu")
QWEN3_14B = dict(model_type="qwen3", hidden_size=5120, intermediate_size=17408, num_hidden_layers=40, num_attention_heads=40,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
                 rms_norm_eps=1e-6, tie_word_embeddings=False, hidden_act="silu")
ROWS = {
    "h100": dict(model=QWEN25_15B, lora=False, seq=8192, response=2048, samples=32, micro_batch_tokens=16384, lr=1e-6),
    "paper-14b": dict(model=QWEN3_14B, lora=True, seq=32768, response=8192, samples=0, micro_batch_tokens=32768, lr=1e-6),
}
SMOKE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, vocab_size=1000)


# ---------------------------------------------------------------------- worker (one torchrun process)
def build_model(spec: dict, device: torch.device, smoke: bool) -> torch.nn.Module:
    """Random-init causal LM on the meta device (bf16; float32 for the CPU smoke run), LoRA-wrapped if asked."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from davinci.llm.backbone import wrap_lora
    from davinci.llm.config import ModelConfig

    fields = {**spec["model"], **(SMOKE if smoke else {})}
    config = AutoConfig.for_model(**fields)
    config._attn_implementation = "sdpa"
    dtype = torch.float32 if smoke else torch.bfloat16
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        model.config.use_cache = False
        if spec["lora"]:
            model = wrap_lora(model, ModelConfig(lora=True, lora_r=16, lora_alpha=32))
    base = model.get_base_model() if spec["lora"] else model
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if spec["lora"]:
        base.enable_input_require_grads()
    return model


@torch.no_grad()
def materialize(root: torch.nn.Module, device: torch.device) -> None:
    """Allocate the meta shards on `device`, fill weights with N(0, 0.02) and rebuild the rotary buffers."""
    root.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    for p in root.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        local.normal_(0.0, 0.02, generator=gen)
    for module in root.modules():
        if hasattr(module, "inv_freq") and hasattr(module, "config"):  # rotary embedding: computed, not learned
            with torch.device(device):
                fresh = type(module)(module.config)
            for name, buf in fresh.named_buffers():
                getattr(module, name).copy_(buf)


def make_samples(spec: dict, n: int, vocab: int, seq: int, response: int) -> list:
    from davinci.rl.samples import TrainSample

    rng = random.Random(0)
    out = []
    for i in range(n):
        ids = tuple(rng.randrange(vocab) for _ in range(seq))
        adv = 1.0 if i % 2 == 0 else -1.0
        out.append(TrainSample("policy", ids, seq - response, adv, adv, f"bench{i}/policy/0"))
    return out


def worker(args: argparse.Namespace) -> None:
    """One rank: build, shard, warm-up step, timed step; writes its own JSON result."""
    import torch.distributed as dist

    from davinci.rl.config import RLConfig
    from davinci.rl.distributed import close_distributed, distributed_train_step, init_distributed, shard_model
    from davinci.rl.optim import make_optimizer

    spec = ROWS[args.row]
    env = init_distributed("cpu" if args.smoke_cpu else "cuda", timeout_s=600)
    seq, response = (64, 16) if args.smoke_cpu else (spec["seq"], spec["response"])
    budget = 128 if args.smoke_cpu else spec["micro_batch_tokens"]
    n = args.samples or spec["samples"] or 2 * args.max_gpus * max(1, budget // seq)
    result: dict = {"rank": env.rank, "row": args.row, "gpus": env.world_size, "samples": n, "tokens": n * seq}
    cuda = env.device.type == "cuda"
    try:
        model = build_model(spec, env.device, args.smoke_cpu)
        root = shard_model(model, env, chunk_rows=1024)
        materialize(root, env.device)
        cfg = RLConfig(batch_size=n, micro_batch_tokens=budget, lr=spec["lr"], clip_ratio=0.2, clip_ratio_high=0.28, logprob_chunk_rows=1024)
        opt = make_optimizer(root, cfg)
        samples = make_samples(spec, n, SMOKE["vocab_size"] if args.smoke_cpu else spec["model"]["vocab_size"], seq, response)
        distributed_train_step(root, opt, samples, cfg, env, pad_id=0)  # warm-up: allocator, kernels, optimizer state
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        metrics = distributed_train_step(root, opt, samples, cfg, env, pad_id=0)
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        result.update(status="ok", step_s=time.perf_counter() - t0, loss=metrics["loss"])
    except torch.OutOfMemoryError:
        result.update(status="OOM")
    finally:
        result["peak_gib"] = torch.cuda.max_memory_allocated(env.device) / 2**30 if cuda else 0.0
        Path(f"{args.json}.{env.rank}").write_text(json.dumps(result))
    close_distributed()


# ---------------------------------------------------------------------- launcher
def launch(row: str, gpus: int, max_gpus: int, smoke: bool, samples: int, folder: Path) -> dict:
    """Run one (row, GPU count) under torchrun; merge the ranks' JSON results."""
    out = folder / f"{row}-{gpus}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}", str(Path(__file__).resolve()),
           "--worker", "--row", row, "--json", str(out), "--max-gpus", str(max_gpus), "--samples", str(samples)]
    cmd += ["--smoke-cpu"] if smoke else []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if smoke:  # torchrun sets one thread per process only for 2+ processes; the same for every count
        env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    ranks = [json.loads(p.read_text()) for p in sorted(folder.glob(f"{out.name}.*"))]
    merged = {"row": row, "gpus": gpus, "samples": ranks[0]["samples"] if ranks else samples, "status": "failed"}
    if ranks:
        statuses = {r["status"] for r in ranks}
        merged.update(tokens=ranks[0]["tokens"], peak_gib=max(r["peak_gib"] for r in ranks),
                      status="OOM" if "OOM" in statuses else ("ok" if statuses == {"ok"} and len(ranks) == gpus else "failed"))
        if merged["status"] == "ok":
            merged["step_s"] = max(r["step_s"] for r in ranks)
    if merged["status"] == "failed":
        merged["error"] = proc.stderr.strip().splitlines()[-3:] if proc.stderr.strip() else [f"exit {proc.returncode}"]
    return merged


def print_header(device: str, smoke: bool) -> None:
    models = ("tiny shapes in float32 (smoke: checks the script; 2 processes share 2 cores, timings mean nothing)" if smoke
              else "random init, bf16 compute, float32 sharded trainable weights (FSDP2 mixed precision)")
    print(f"device: {device}; models: {models}")
    print(f"{'row':<10} {'mode':<5} {'GPUs':>4} {'samples':>7} {'tokens':>8} {'status':>6} {'peak GiB/GPU':>12} {'step s':>7} {'tok/s':>8}",
          flush=True)


def print_row(r: dict) -> None:
    """One (row, GPU count) line, printed as soon as its run ends: a suite's time limit keeps the rows done."""
    mode = "LoRA" if ROWS[r["row"]]["lora"] else "full"
    step = f"{r['step_s']:7.1f}" if "step_s" in r else f"{'-':>7}"
    tps = f"{r['tokens'] / r['step_s']:8.0f}" if "step_s" in r else f"{'-':>8}"
    peak = f"{r['peak_gib']:12.1f}" if "peak_gib" in r else f"{'-':>12}"
    print(f"{r['row']:<10} {mode:<5} {r['gpus']:>4} {r['samples']:>7} {r.get('tokens', 0):>8} {r['status']:>6} {peak} {step} {tps}",
          flush=True)
    if r.get("error"):
        print(f"    {r['error']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="", help="comma-separated GPU counts (default: 1 and all visible)")
    ap.add_argument("--rows", default="h100,paper-14b", help=f"comma-separated rows of {sorted(ROWS)}")
    ap.add_argument("--samples", type=int, default=0, help="samples per step (default: the row's)")
    ap.add_argument("--smoke-cpu", action="store_true", help="gloo on the CPU with tiny shapes: checks the script, no numbers")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--row", default="h100", help=argparse.SUPPRESS)
    ap.add_argument("--json", default="", help=argparse.SUPPRESS)
    ap.add_argument("--max-gpus", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    visible = 2 if args.smoke_cpu else torch.cuda.device_count()
    counts = [int(c) for c in args.gpus.split(",") if c] or sorted({1, visible})
    device = "cpu (smoke, gloo)" if args.smoke_cpu else f"{visible} x {torch.cuda.get_device_name(0)}"
    out = Path(os.environ["OUT"]) / "fsdp_step.json" if os.environ.get("OUT") else None
    print_header(device, args.smoke_cpu)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in args.rows.split(","):
            for k in counts:
                results.append(launch(row, k, max(counts), args.smoke_cpu, args.samples, Path(tmp)))
                print_row(results[-1])
                if out is not None:  # rewritten after every run: what a time limit cuts off is only the rest
                    out.write_text(json.dumps({"device": device, "results": results}, indent=1))


if __name__ == "__main__":
    main()
