"""Generation throughput of the HF backend (transformers `generate`, KV cache, left padding) and its batch scaling.

What it measures: for each batch size B, B chat prompts (~`--prompt-chars` characters of code each) are
generated to `--new-tokens` tokens (sampling at temperature 1, seeded; the rare early stop on the end-of-turn
token is counted, not hidden), `--repeats` times after one warm-up call. Tokens/s counts generated tokens only.
The model is the tiny profile's (tokenizer trained on this repository's own sources; nothing is downloaded);
`--set model.tiny_hidden=...` etc. change its shape. Runs on the CPU here and on a GPU (bf16) unchanged.

    .venv/bin/python benchmarks/llm_generation_bench.py                       # CPU, ~1-2 min on 2 cores
    PYTHONPATH=. python3 benchmarks/llm_generation_bench.py --device cuda --batches 1,8,32,64 --new-tokens 256

Writes `llm_generation_bench.json` under $OUT when OUT is set. Prints a table at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from davinci.config import load_profile
from davinci.llm.backends.hf import HFBackend
from davinci.llm.tiny import create_tiny_backbone
from davinci.llm.types import Sampling

REPO = Path(__file__).resolve().parents[1]


def corpus() -> list[str]:
    files = sorted((REPO / "davinci").rglob("*.py"))
    return [f.read_text() for f in files]


def prompts(texts: list[str], n: int, chars: int) -> list[list[dict]]:
    out = []
    for i in range(n):
        text = texts[i % len(texts)]
        start = (i * 997) % max(1, len(text) - chars)
        out.append([{"role": "system", "content": "You write GPU kernels."}, {"role": "user", "content": text[start : start + chars]}])
    return out


def measure(backend: HFBackend, batch: list, new_tokens: int, repeats: int, greedy: bool) -> dict:
    sampling = Sampling(max_new_tokens=new_tokens, greedy=greedy, seed=None if greedy else 0)
    times, tokens = [], []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        outs = backend.generate(batch, sampling)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        tokens.append(sum(len(o.response_ids) for o in outs))
    best = min(range(repeats), key=lambda i: times[i])
    return {"batch": len(batch), "seconds": times[best], "tokens": tokens[best], "tokens_per_s": tokens[best] / times[best],
            "prompt_tokens": sum(len(o.prompt_ids) for o in outs) / len(outs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--set", action="append", default=[], help="profile override key=value")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batches", default="1,2,4,8,16")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt-chars", type=int, default=800)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--greedy", action="store_true")
    args = parser.parse_args()
    profile = load_profile(args.profile, args.set)
    texts = corpus()
    t0 = time.perf_counter()
    bb = create_tiny_backbone(texts, profile.model, seed=0, device=None if args.device == "auto" else args.device)
    print(f"tiny model on {bb.device} ({next(bb.model.parameters()).dtype}): "
          f"{sum(p.numel() for p in bb.model.parameters()) / 1e6:.2f}M params, vocab {len(bb.tokenizer)}, built in {time.perf_counter() - t0:.1f}s", flush=True)
    sizes = [int(b) for b in args.batches.split(",")]
    backend = HFBackend(bb, batch_size=max(sizes))
    backend.generate(prompts(texts, 2, args.prompt_chars), Sampling(max_new_tokens=8, seed=0))  # warm-up
    rows = []
    for b in sizes:
        try:
            row = measure(backend, prompts(texts, b, args.prompt_chars), args.new_tokens, args.repeats, args.greedy)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory at a large batch: report, go on
            print(f"  batch {b:4d}: failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        rows.append(row)
        print(f"  batch {b:4d}: {row['tokens_per_s']:9.1f} tok/s", flush=True)
    if not rows:
        raise SystemExit("every batch size failed")
    base = rows[0]["tokens_per_s"] / rows[0]["batch"]  # one sequence's throughput at the smallest batch
    print(f"\n{'batch':>6} {'prompt tok':>10} {'new tok':>8} {'seconds':>8} {'tok/s':>9} {'tok/s/seq':>9} {'x batch 1':>9}")
    for r in rows:
        print(f"{r['batch']:6d} {r['prompt_tokens']:10.0f} {r['tokens']:8d} {r['seconds']:8.2f} {r['tokens_per_s']:9.1f} "
              f"{r['tokens_per_s'] / r['batch']:9.1f} {r['tokens_per_s'] / base:9.2f}")
    result = {"device": str(bb.device), "dtype": str(next(bb.model.parameters()).dtype), "new_tokens": args.new_tokens,
              "greedy": args.greedy, "model": {k: getattr(profile.model, k) for k in ("tiny_hidden", "tiny_layers", "tiny_heads", "tiny_vocab")},
              "torch": torch.__version__, "rows": rows}
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / "llm_generation_bench.json"
        path.write_text(json.dumps(result, indent=1))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
