"""How well SFT of the tiny model reproduces the reference solutions it was trained on (and how long SFT takes).

What it does: the tiny profile's cold start, measured. Builds the SFT set exactly as the data stage does
(built-in suite minus the held-out problems, seed skills, `data_prep.build_sft_examples` ->
`davinci.agents.sft_examples_for`), creates the tiny backbone (tokenizer trained on problems, solutions,
skill texts and prompt templates), runs `train_sft`, then decodes every training problem's policy prompt
greedily (the BM25-selected skills, as in SFT and in RL turn 1) and reports per problem: exact reproduction
of the reference solution, whether a ModelNew block was extracted, and the evaluator's verdict
(kernelgym `evaluate_batch` on the CPU, correctness only; `--no-eval` skips it).

    .venv/bin/python benchmarks/llm_sft_repro.py                      # tiny profile, ~2-4 min on 2 cores
    .venv/bin/python benchmarks/llm_sft_repro.py --set sft.epochs=4 --set model.tiny_hidden=192
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time

from pathlib import Path

import torch

from davinci.agents import extract_code, policy_messages, sft_examples_for
from davinci.config import load_profile
from davinci.llm.backends.hf import HFBackend
from davinci.llm.sft import train_sft
from davinci.llm.tiny import create_tiny_backbone
from davinci.llm.types import Sampling
from davinci.tracking import MemoryLogger


def evaluate(problems, codes) -> list[str]:
    """kernelgym verdict per problem ("correct", the error kind, or "no code")."""
    from davinci.kernelgym import GymConfig, evaluate_batch
    from davinci.types import Candidate

    items = [(p, Candidate(p.id, c, "triton")) for p, c in zip(problems, codes) if c]
    cfg = GymConfig(device="cpu", measure_performance=False, correctness_trials=1, baselines=())
    results = iter(evaluate_batch(items, cfg))
    out = []
    for c in codes:
        if not c:
            out.append("no code")
            continue
        r = next(results)
        out.append("correct" if r.correct else str(r.error_kind))
    return out


def episode_check(train, skills, bb, profile) -> dict:
    """Greedy episodes (one per problem, one turn) through the real runner and evaluator: the selection's
    rerank parses, the policy's first turn is correct, the summary's skill JSON parses."""
    from dataclasses import replace

    from davinci.agents import run_episodes
    from davinci.kernelgym import GymConfig, evaluate_batch

    gym = GymConfig(device="cpu", measure_performance=False, correctness_trials=1, baselines=())
    prof = replace(profile, agents=replace(profile.agents, turns=1, summaries_per_problem=1))
    eps = run_episodes(train, skills, HFBackend(bb, batch_size=8), prof, epoch=0, group_size=1, greedy=True,
                       evaluate_fn=lambda items: evaluate_batch(items, gym))
    n = len(eps)
    return {
        "selection_parsed": sum(bool(e.selection and e.selection.parse_ok) for e in eps),
        "turn0_correct": sum(e.turns[0].correct for e in eps),
        "summaries": sum(e.summary is not None for e in eps),
        "summary_parsed": sum(e.skill_candidate is not None for e in eps),
        "episodes": n,
        "rejections": sorted({e.skill_rejection for e in eps if e.skill_rejection}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--set", action="append", default=[], help="profile override key=value")
    parser.add_argument("--no-eval", action="store_true", help="skip the kernelgym correctness check")
    parser.add_argument("--json", default="", help="also write the results to this file")
    parser.add_argument("--save", default="", help="save the fine-tuned checkpoint to this folder")
    args = parser.parse_args()
    torch.manual_seed(0)
    from data_prep import build_sft_examples, builtin_problems, default_heldout_ids
    from davinci.skills import BM25Retriever, seed_skills

    profile = load_profile(args.profile, args.set)
    held = set(default_heldout_ids())
    train = [p for p in builtin_problems() if p.name not in held and p.id not in held and p.reference_solution]
    skills = seed_skills()
    example_fn = functools.partial(sft_examples_for, agents=profile.agents)
    examples = build_sft_examples(
        train, skills, seed=profile.seed, select_k=profile.skills.select_k, bm25_top_k=profile.skills.bm25_top_k, example_fn=example_fn
    )
    # The sft stage's tokenizer corpus (tasks/sft.py): every problem's code, the training solutions, every SFT message.
    corpus = [p.code for p in builtin_problems()] + [p.reference_solution for p in train]
    corpus += [m["content"] for ex in examples for m in ex.messages]
    t0 = time.perf_counter()
    bb = create_tiny_backbone(corpus, profile.model, seed=profile.seed, device="cpu")
    t_create = time.perf_counter() - t0
    cpu0 = time.process_time()
    stats = train_sft(bb, examples, profile.sft, MemoryLogger(), progress=True)
    sft_cpu = time.process_time() - cpu0
    if args.save:
        bb.save(args.save)
    retriever = BM25Retriever(skills)
    prompts = [
        policy_messages(p, [s for s, _ in retriever.search(p.code, profile.skills.bm25_top_k)][: profile.skills.select_k],
                        backend=profile.agents.backend, skill_chars=profile.agents.skill_chars)
        for p in train
    ]
    t1 = time.perf_counter()
    outs = HFBackend(bb, batch_size=8).generate(prompts, Sampling(max_new_tokens=profile.agents.max_new_tokens, greedy=True))
    t_gen = time.perf_counter() - t1
    parses = [extract_code(o.text) for o in outs]
    exact = [o.text.strip() == f"```python\n{p.reference_solution.strip()}\n```" for p, o in zip(train, outs)]
    verdicts = ["skipped"] * len(train) if args.no_eval else evaluate(train, [x.code for x in parses])
    print(f"\n{'problem':28s} {'exact':>5s} {'code':>5s} {'verdict':>10s} {'resp tok':>8s}")
    for p, e, x, v, o in zip(train, exact, parses, verdicts, outs):
        print(f"{p.id:28s} {str(e):>5s} {str(x.ok):>5s} {v:>10s} {len(o.response_ids):8d}")
    n = len(train)
    summary = {
        "problems": n,
        "examples": len(examples),
        "exact": sum(exact),
        "code_ok": sum(x.ok for x in parses),
        "correct": sum(v == "correct" for v in verdicts),
        "sft_seconds": round(stats.seconds, 1),
        "sft_cpu_seconds": round(sft_cpu, 1),
        "sft_steps": stats.steps,
        "sft_tokens": stats.tokens,
        "sft_tokens_per_s": round(stats.tokens / stats.seconds),
        "final_loss": round(stats.final_loss, 4),
        "loss_every_10_steps": [round(x, 3) for x in stats.losses[::10]],
        "truncated": stats.truncated,
        "create_seconds": round(t_create, 1),
        "greedy_gen_seconds": round(t_gen, 1),
        "vocab": len(bb.tokenizer),
        "params": sum(q.numel() for q in bb.model.parameters()),
        "load_avg_1m": os.getloadavg()[0],
        "config": {"model": {k: getattr(profile.model, k) for k in ("tiny_hidden", "tiny_layers", "tiny_heads", "tiny_vocab", "tiny_tokenizer")},
                   "sft": {k: getattr(profile.sft, k) for k in ("epochs", "lr", "batch_size", "max_len")}},
    }
    if not args.no_eval:
        summary["episodes"] = episode_check(train, skills, bb, profile)
    by_agent = {a: sum(len(bb.encode_chat_masked(e.messages)[0]) for e in examples if e.agent == a) for a in ("selection", "policy", "summary")}
    summary["tokens_per_epoch_by_agent"] = by_agent
    print(f"\nreproduced exactly {summary['exact']}/{n}, ModelNew extracted {summary['code_ok']}/{n}, correct {summary['correct']}/{n}")
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))



if __name__ == "__main__":
    main()
