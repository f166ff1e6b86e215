"""Does batched, left-padded generation give the same logits as one prompt alone? sdpa vs eager, fp32 vs bf16.

Why it exists: on the H100 the tiny RL run's policy wrote no code block in 35-63% of its turns with the
default `attn_implementation: sdpa`, against 0-29% on the CPU and 24% on the H100 with `eager`. Generation
left-pads a batch of prompts (davinci/llm/backends/hf.py); if an attention kernel lets padding leak into
real positions, the batched continuation differs from the one the same prompt gets alone, and the policy
samples from a distribution the trainer never scores. This script measures exactly that, with a
random-init Llama shaped like the tiny profile's (the weights do not matter for a padding leak).
On the H100 (benchmarks/results/h100/rl/attn_padding_check.txt) there is no leak: batched and alone agree
to bf16 rounding with either kernel. (The no-code turns fell to 16-44% once SFT had float32 master weights.)

For each (attention, dtype, device) it prints:
  - max |logit difference| at the last prompt position, batched-and-padded vs alone;
  - the same for every real position of the padded rows (a leak shows at the start of short rows);
  - how many of B greedy continuations (N tokens) are identical batched vs alone.

    PYTHONPATH=. python benchmarks/gpu/attn_padding_check.py                 # cuda when there is one
    PYTHONPATH=. python benchmarks/gpu/attn_padding_check.py --device cpu
    PYTHONPATH=. python benchmarks/gpu/attn_padding_check.py --speed      # + generation tok/s per kernel

`--speed` also times greedy generation (bf16, B prompts, N new tokens) three times per attention setting:
new prompt shapes, the same shapes again, other new shapes. The tiny RL run's first epoch generated at
~110 tok/s with sdpa against ~1300 with eager; a kernel that sets itself up per new shape (one per decoding
step while the KV cache grows) shows as a slow first and third call and a fast second one.
Shapes: B prompts, P padded prompt length, V vocabulary.
"""

from __future__ import annotations

import argparse

import torch


def build(attn: str, dtype: torch.dtype, device: str, vocab: int, seed: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
                      tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=None,
                      attn_implementation=attn)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    # larger weights than the init so logits are peaked, like a trained model's (greedy is then stable)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    return model.to(device=device, dtype=dtype).eval()


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, P] ids and mask; the mask hides the left padding."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


@torch.no_grad()
def compare(model: torch.nn.Module, rows: list[list[int]], device: str, new_tokens: int) -> tuple[float, float, int]:
    ids, mask = left_pad(rows, 0)
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # position ids start at 0 on each row's first real token
    batched = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()  # [B, P, V]
    last_diff = every_diff = 0.0
    for i, r in enumerate(rows):
        alone = model(input_ids=torch.tensor([r], device=device)).logits.float()[0]  # [len(r), V]
        real = batched[i, ids.shape[1] - len(r):]  # this row's real positions
        last_diff = max(last_diff, (real[-1] - alone[-1]).abs().max().item())
        every_diff = max(every_diff, (real - alone).abs().max().item())
    gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False,
                         min_new_tokens=new_tokens, pad_token_id=0, eos_token_id=None)[:, ids.shape[1]:]
    same = 0
    for i, r in enumerate(rows):
        one = model.generate(input_ids=torch.tensor([r], device=device), max_new_tokens=new_tokens,
                             do_sample=False, min_new_tokens=new_tokens, pad_token_id=0,
                             eos_token_id=None)[0, len(r):]
        same += int(torch.equal(one, gen[i]))
    return last_diff, every_diff, same


def timed_generate(model: torch.nn.Module, rows: list[list[int]], device: str, new_tokens: int) -> float:
    """Generated tokens per second for one left-padded greedy batch."""
    import time

    ids, mask = left_pad(rows, 0)
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=new_tokens,
                   min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
    torch.cuda.synchronize()
    return len(rows) * new_tokens / (time.perf_counter() - start)


def speed(args: argparse.Namespace) -> None:
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator().manual_seed(1)
    sets = [[torch.randint(2, args.vocab, (int(n),), generator=g).tolist()
             for n in torch.randint(8, 300, (args.batch,), generator=g)] for _ in range(2)]
    no_cudnn = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    settings = [("eager", "eager", nullcontext), ("sdpa", "sdpa", nullcontext),
                ("sdpa, no cuDNN", "sdpa", lambda: sdpa_kernel(no_cudnn))]
    timed_generate(build("eager", torch.bfloat16, args.device, args.vocab, seed=1), sets[0], args.device, 4)
    print(f"\ngeneration tok/s, bf16, B={args.batch}, {args.speed_tokens} new tokens")
    print(f"{'attention':15}  {'new shapes':>10}  {'same again':>10}  {'other shapes':>12}")
    for label, attn, ctx in settings:
        model = build(attn, torch.bfloat16, args.device, args.vocab, seed=0)
        with ctx():
            rates = [timed_generate(model, rows, args.device, args.speed_tokens) for rows in (sets[0], sets[0], sets[1])]
        print(f"{label:15}  {rates[0]:10.0f}  {rates[1]:10.0f}  {rates[2]:12.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--speed", action="store_true", help="also time generation per attention kernel (GPU)")
    ap.add_argument("--speed-tokens", type=int, default=128)
    args = ap.parse_args()
    import transformers

    g = torch.Generator().manual_seed(0)
    lengths = [int(x) for x in torch.randint(8, 300, (args.batch,), generator=g)]
    lengths[0] = 300  # one unpadded row
    rows = [torch.randint(2, args.vocab, (n,), generator=g).tolist() for n in lengths]
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device {name}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"B={args.batch}, prompt lengths {min(lengths)}..{max(lengths)}, {args.new_tokens} greedy tokens")
    print(f"{'attention':9}  {'dtype':8}  {'max|dlogit| last':>16}  {'max|dlogit| all':>15}  greedy same")
    for attn in ("eager", "sdpa"):
        for dtype in (torch.float32, torch.bfloat16):
            model = build(attn, dtype, args.device, args.vocab, seed=0)
            last, every, same = compare(model, rows, args.device, args.new_tokens)
            print(f"{attn:9}  {str(dtype).split('.')[-1]:8}  {last:16.4g}  {every:15.4g}  {same}/{len(rows)}")
    if args.speed and args.device.startswith("cuda"):
        speed(args)


if __name__ == "__main__":
    main()
