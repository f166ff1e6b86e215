"""Generation tokens/s of the in-process backend (`HFBackend`) at the h100 profile's shapes, for every option.

The model is a random-init Qwen2.5-Coder-1.5B-shaped network in bfloat16 (the h100 profile's
`model.name_or_path`; config written out in rl_update_memory.py, nothing downloaded). Prompts are random
token rows of 1,024-3,072 tokens (the profile's chat prompts with a problem and skills), `--prompts` of them
per run, generated to `--new-tokens` tokens by `HFBackend.generate_ids` exactly as the RL rollouts call it
(sampling at temperature 1, the log-prob recorder on, batches length-sorted). Every option row is timed
after one warm-up run on the same prompts; tokens/s counts generated tokens only.

Options: batch size (the profile's 32, 64, 128, 0 = from free memory), decoder (`model.gen_cache`: dynamic and
static are transformers `generate`, static letting transformers compile the step; graph is `backends.graphgen`,
the step replayed as a CUDA graph), attention (sdpa without cuDNN). The first row is the code before graphgen
at the profile's batch, the baseline the ratio column is measured against (issue target: 5x 1,143 tokens/s);
peak GiB is the row's torch.cuda.max_memory_allocated.

    PYTHONPATH=. python benchmarks/gpu/generation_options.py                  # one GPU, ~5-8 min
    PYTHONPATH=. python benchmarks/gpu/generation_options.py --smoke-cpu      # tiny shapes on the CPU
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu.rl_update_memory import MODEL  # noqa: E402
from davinci.llm.backends.hf import HFBackend  # noqa: E402
from davinci.llm.types import Sampling  # noqa: E402

# (label, batch size, decoder, attention, prompts: 0 = --prompts); the graph rows with large batches get more
# prompts so that a batch is full. Measured once and left out since (benchmarks/results/h200x4/session_2026-11-26c/
# generation_options.txt, H200): batch 64 dynamic 946 tok/s, batch 32 static 433, batch 32 dynamic eager 860.
OPTIONS = [("profile: batch 32, dynamic, sdpa", 32, "dynamic", "sdpa", 0),
           ("batch auto, dynamic, sdpa", 0, "dynamic", "sdpa", 0),
           ("batch auto, static, sdpa", 0, "static", "sdpa", 0),
           ("batch 32, graph, sdpa", 32, "graph", "sdpa", 0),
           ("batch 64, graph, sdpa", 64, "graph", "sdpa", 0),
           ("batch 128, graph, sdpa", 128, "graph", "sdpa", 256),
           ("batch auto, graph, sdpa", 0, "graph", "sdpa", 256)]


def build(device: str, attn: str, smoke: bool) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, Qwen2Config

    fields = {k: v for k, v in MODEL.items() if k != "architectures"}
    if smoke:
        fields.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=512)
    cfg = Qwen2Config(**fields)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    dtype = torch.float32 if smoke else torch.bfloat16
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        except TypeError:  # transformers < 4.56 names it torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype)
    return model.eval()


def rows(n: int, lo: int, hi: int, vocab: int) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(1, vocab - 1) for _ in range(rng.randrange(lo, hi))] for _ in range(n)]


def run(model: torch.nn.Module, device: str, prompts: list[list[int]], batch: int, cache: str, new: int) -> tuple[float, int]:
    vocab = int(model.config.vocab_size)
    # a stand-in for Backbone: generate_ids needs the model, its device, the pad and stop ids, and decode
    bb = SimpleNamespace(model=model, device=torch.device(device), pad_token_id=0, stop_token_ids=(vocab - 1,),
                         decode=lambda ids: "")
    backend = HFBackend(bb, batch_size=batch, cache=cache)  # type: ignore[arg-type]
    sampling = Sampling(max_new_tokens=new, temperature=1.0, seed=0)
    size = backend._batch_size(prompts, sampling)
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    t0, tokens = time.perf_counter(), 0
    for start in range(0, len(order), size):
        outs = backend.generate_ids([prompts[i] for i in order[start:start + size]], sampling, seed=start)
        tokens += sum(len(o.response_ids) for o in outs)
    if device == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - t0), size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--smoke-cpu", action="store_true")
    args = ap.parse_args()
    device = "cpu" if args.smoke_cpu else "cuda"
    n, new = (6, 8) if args.smoke_cpu else (args.prompts, args.new_tokens)
    lo, hi = (8, 24) if args.smoke_cpu else (1024, 3072)
    print(f"device: {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}; {n} prompts of {lo}-{hi} tokens, "
          f"{new} new tokens each")
    table, base, models = [], None, {}
    for label, batch, cache, attn, count in OPTIONS:
        if attn not in models:
            models = {attn: build(device, attn, args.smoke_cpu)}  # one model on the device at a time
        model = models[attn]
        prompts = rows(count if count and not args.smoke_cpu else n, lo, hi, int(model.config.vocab_size))
        try:
            run(model, device, prompts[: max(1, batch or n)], batch, cache, min(new, 32))  # warm-up (compiles)
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            tps, size = run(model, device, prompts, batch, cache, new)
            peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
            base = base or tps
            table.append((label, size, len(prompts), f"{tps:,.0f}", f"{tps / base:.2f}x", f"{peak:.1f}"))
        except torch.cuda.OutOfMemoryError:
            table.append((label, batch, len(prompts), "OOM", "-", "-"))
        except Exception as exc:  # one option failing (e.g. the static cache's compile) keeps the other rows
            table.append((label, batch, len(prompts), "error", "-", "-"))
            print(f"{label}: {type(exc).__name__}: {str(exc)[-600:]}", flush=True)
        print("  ".join(str(x) for x in table[-1]), flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
    print(f"\n{'option':<36} {'batch':>5} {'prompts':>7} {'tok/s':>9} {'vs profile':>10} {'peak GiB':>8}")
    for label, size, count, tps, ratio, peak in table:
        print(f"{label:<36} {size:>5} {count:>7} {tps:>9} {ratio:>10} {peak:>8}")


if __name__ == "__main__":
    main()
