"""Peak GPU memory of one h100-profile RL update step on a random-init model shaped like the profile's.

The model is Qwen2.5-Coder-1.5B-Instruct's architecture (the h100 profile's `model.name_or_path`) written
out below as a config dict (28 layers, 12 query / 2 key-value heads, hidden 1536, vocabulary 151,936),
built with random weights in bfloat16: nothing is downloaded. The step is the project's own
`davinci.rl.trainer.train_step` (chunked log-probs, the clipped REINFORCE loss, AdamW with float32 master
weights) on 32 samples of the profile's longest shape (8,192 tokens: a 6,144-token prompt and a
2,048-token response, `agents.max_new_tokens`), micro-batched by the profile's token budget (16,384), with
gradient checkpointing, as configs/h100.yaml sets them. Two comparison rows run one micro-batch each: the
same without gradient checkpointing, and the old log-prob path (full-vocabulary logits, float32 copy).
An out-of-memory row prints OOM instead of a number.

Needs only torch + transformers (+ numpy, tqdm, which transformers installs) and this repository on
PYTHONPATH. About 1-3 minutes on one H100:

    PYTHONPATH=. python benchmarks/gpu/rl_update_memory.py            # prints the table
    PYTHONPATH=. python benchmarks/gpu/rl_update_memory.py --quick    # only the profile row, 4 samples
    PYTHONPATH=. python benchmarks/gpu/rl_update_memory.py --smoke-cpu   # a shrunken shape on the CPU (no numbers)
"""

from __future__ import annotations

import argparse
import gc
import random
import time

import torch

# Qwen/Qwen2.5-Coder-1.5B-Instruct config.json, the fields that shape memory
MODEL = dict(
    architectures=["Qwen2ForCausalLM"], hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
    num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
    rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
)
# configs/h100.yaml values the update reads
PROFILE = dict(max_seq_len=8192, max_new_tokens=2048, batch_size=32, grad_accum=8, micro_batch_tokens=16384,
               lr=1e-6, clip_ratio=0.2, clip_ratio_high=0.28, logprob_chunk_rows=1024, gradient_checkpointing=True)


DEVICE = "cuda"
OOM = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def build_model(checkpointing: bool) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(**{k: v for k, v in MODEL.items() if k != "architectures"})
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(DEVICE):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        except TypeError:  # transformers < 4.56 names it torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    model.config.use_cache = False
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def make_samples(n: int) -> list:
    from davinci.rl.samples import TrainSample

    rng = random.Random(0)
    total, response = PROFILE["max_seq_len"], PROFILE["max_new_tokens"]
    out = []
    for i in range(n):
        ids = tuple(rng.randrange(MODEL["vocab_size"]) for _ in range(total))
        adv = 1.0 if i % 2 == 0 else -1.0
        out.append(TrainSample("policy", ids, total - response, adv, adv, f"bench{i}/policy/0"))
    return out


def run_row(name: str, n_samples: int, checkpointing: bool, reference_logprobs: bool) -> dict:
    import davinci.rl.trainer as trainer
    from davinci.rl.config import RLConfig
    from davinci.rl.logprobs import response_logprobs, response_logprobs_reference

    cuda = DEVICE == "cuda"
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    row = {"row": name, "samples": n_samples, "grad_ckpt": checkpointing, "logprobs": "full logits" if reference_logprobs else "chunked"}
    model = opt = None
    try:
        model = build_model(checkpointing)
        cfg = RLConfig(**{k: PROFILE[k] for k in ("batch_size", "grad_accum", "micro_batch_tokens", "lr", "clip_ratio", "clip_ratio_high", "logprob_chunk_rows")})
        opt = trainer.make_optimizer(model, cfg)
        if reference_logprobs:  # the old path: full [B, S, V] logits and a float32 copy
            trainer.response_logprobs = lambda m, b, temperature=1.0, chunk_rows=0, with_entropy=False: (
                (lambda lp: (lp, torch.zeros_like(lp)) if with_entropy else lp)(response_logprobs_reference(m, b, temperature=temperature)))
        t0 = time.perf_counter()
        metrics = trainer.train_step(model, opt, make_samples(n_samples), cfg, pad_id=0)
        if cuda:
            torch.cuda.synchronize()
        row.update(status="ok", peak_gib=torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0, step_s=time.perf_counter() - t0,
                   tokens=int(metrics["tokens"]), loss=metrics["loss"])
    except OOM:
        row.update(status="OOM", peak_gib=torch.cuda.max_memory_allocated() / 2**30)
    except Exception as exc:  # a row that fails otherwise is reported, and the next rows still run
        row.update(status="error", peak_gib=torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
                   error=f"{type(exc).__name__}: {str(exc)[-600:]}")
    finally:
        trainer.response_logprobs = response_logprobs
        del model, opt
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    print(f"row done: {row}", flush=True)  # each row as it ends: a suite time limit still leaves the finished ones
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the profile row, with 4 samples")
    ap.add_argument("--smoke-cpu", action="store_true", help="check the script on the CPU with a tiny shape")
    args = ap.parse_args()
    global DEVICE
    if args.smoke_cpu:
        DEVICE = "cpu"
        MODEL.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
        PROFILE.update(max_seq_len=64, max_new_tokens=16, micro_batch_tokens=128, batch_size=4)
    total = torch.cuda.get_device_properties(0).total_memory / 2**30 if DEVICE == "cuda" else 0.0
    name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu (smoke)"
    rows = [run_row("h100 profile step", 4 if args.quick else PROFILE["batch_size"], True, False)]
    if not args.quick:
        per_micro = max(1, PROFILE["micro_batch_tokens"] // PROFILE["max_seq_len"])
        rows.append(run_row("no grad checkpointing", per_micro, False, False))
        rows.append(run_row("old log-prob path", per_micro, True, True))
    print(f"device: {name} ({total:.1f} GiB); model: Qwen2.5-Coder-1.5B shape, random init, bf16")
    print(f"profile: {PROFILE}")
    print(f"{'row':<24} {'samples':>7} {'grad_ckpt':>9} {'logprobs':>12} {'status':>6} {'peak GiB':>9} {'free GiB':>9} {'step s':>7}")
    for r in rows:
        step = f"{r['step_s']:7.1f}" if "step_s" in r else f"{'-':>7}"
        print(f"{r['row']:<24} {r['samples']:>7} {str(r['grad_ckpt']):>9} {r['logprobs']:>12} {r['status']:>6} "
              f"{r['peak_gib']:9.1f} {total - r['peak_gib']:9.1f} {step}")


if __name__ == "__main__":
    main()
