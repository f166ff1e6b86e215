"""Peak CPU memory of the response log-prob computation: the full-logits reference vs the chunked path.

A random-init Llama from `davinci.llm.tiny` with the h100 model's vocabulary (151,936) and a small body,
one forward + backward of the response log-probs of B sequences of S tokens (half prompt, half response).
Each (method, size) runs in a fresh subprocess and reports its peak resident memory (ru_maxrss) minus the
resident memory after building the model and the batch, so the numbers are the computation's own.

    PYTHONPATH=. python benchmarks/rl_logprobs_memory.py              # ~1 minute, prints a table
    PYTHONPATH=. python benchmarks/rl_logprobs_memory.py --seq 256    # smaller
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

VOCAB = 151936


def measure(method: str, batch: int, seq: int, chunk_rows: int) -> dict:
    """Run in the child: build, note RSS, compute forward + backward, report the peak above the baseline."""
    import torch

    from davinci.llm.config import ModelConfig
    from davinci.llm.tiny import tiny_model
    from davinci.rl.logprobs import response_logprobs, response_logprobs_reference
    from davinci.rl.samples import TrainSample
    from davinci.rl.trainer import collate

    torch.set_num_threads(1)
    cfg = ModelConfig(tiny_hidden=64, tiny_layers=2, tiny_heads=2, tiny_intermediate=128, max_seq_len=seq + 8)
    model = tiny_model(cfg, vocab_size=VOCAB, pad_id=0, eos_id=2, seed=0)
    g = torch.Generator().manual_seed(0)
    samples = [TrainSample("policy", tuple(torch.randint(3, VOCAB, (seq,), generator=g).tolist()), seq // 2, 1.0, 1.0, f"s{i}")
               for i in range(batch)]
    b = collate(samples, [1.0] * batch, pad_id=0, device=torch.device("cpu"))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if method == "reference":
        lp = response_logprobs_reference(model, b)
    else:
        lp = response_logprobs(model, b, chunk_rows=chunk_rows)
    (lp * b.resp_mask).sum().backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"method": method, "batch": batch, "seq": seq, "chunk_rows": chunk_rows, "peak_over_base_mib": (peak - base) / 1024,
            "logits_f32_mib": batch * seq * VOCAB * 4 / 2**20, "lp_sum": float((lp.detach() * b.resp_mask).sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--chunk-rows", type=int, default=128)
    ap.add_argument("--child", default="")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.batch, args.seq, args.chunk_rows)))
        return
    rows = []
    for method in ("reference", "chunked"):
        cmd = [sys.executable, __file__, "--child", method, "--batch", str(args.batch), "--seq", str(args.seq), "--chunk-rows", str(args.chunk_rows)]
        rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]))
    one = rows[0]["logits_f32_mib"]
    print(f"B={args.batch} S={args.seq} V={VOCAB}: one float32 [B, S, V] = {one:.0f} MiB")
    print(f"{'method':<10} {'chunk_rows':>10} {'peak over base MiB':>19} {'in [B,S,V] f32 copies':>22} {'sum of log-probs':>17}")
    for r in rows:
        chunk = r["chunk_rows"] if r["method"] == "chunked" else "-"
        print(f"{r['method']:<10} {chunk:>10} {r['peak_over_base_mib']:19.0f} {r['peak_over_base_mib'] / one:22.2f} {r['lp_sum']:17.3f}")


if __name__ == "__main__":
    main()
