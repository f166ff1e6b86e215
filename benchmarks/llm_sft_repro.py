"""How well SFT of the tiny model reproduces the reference solutions it was trained on (and how long SFT takes).

What it does: the tiny profile's cold start, measured. Builds the SFT set exactly as the data stage does
(built-in suite minus the held-out problems, seed skills, `data_prep.build_sft_examples` ->
`davinci.agents.sft_examples_for`), creates the tiny backbone with the sft stage's tokenizer corpus (every
problem's code, the training solutions, every SFT message; tasks/sft.py), runs `train_sft`, then:
1. decodes every training problem's policy prompt greedily (the BM25-selected skills, as in SFT) and reports
   per problem: exact reproduction of the reference solution, whether a ModelNew block was extracted, and
   kernelgym's verdict (correctness only);
2. runs one greedy episode per problem through the real runner and evaluator (`run_episodes`, one turn) and
   counts parseable selections, correct first turns and parseable summary skills.
`--no-eval` skips both evaluator parts. Writes llm_sft_repro.json under $OUT (or to --json).

    .venv/bin/python benchmarks/llm_sft_repro.py                      # tiny profile, ~2-3 min on 2 cores
    PYTHONPATH=. python3 benchmarks/llm_sft_repro.py --device cuda    # on a GPU (bf16 with model.dtype auto)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from pathlib import Path

from davinci.agents import extract_code, policy_messages, sft_examples_for
from davinci.config import load_profile
from davinci.llm.backends.hf import HFBackend
from davinci.llm.sft import train_sft
from davinci.llm.tiny import create_tiny_backbone
from davinci.llm.types import Sampling
from davinci.tracking import MemoryLogger


def evaluate(problems, codes, device: str) -> list[str]:
    """kernelgym verdict per problem ("correct", the error kind, or "no code")."""
    from davinci.kernelgym import GymConfig, evaluate_batch
    from davinci.types import Candidate

    items = [(p, Candidate(p.id, c, "triton")) for p, c in zip(problems, codes) if c]
    cfg = GymConfig(device=device, measure_performance=False, correctness_trials=1, baselines=())
    results = iter(evaluate_batch(items, cfg))
    out = []
    for c in codes:
        if not c:
            out.append("no code")
            continue
        r = next(results)
        out.append("correct" if r.correct else str(r.error_kind))
    return out


def episode_check(train, skills, bb, profile, device: str) -> dict:
    """Greedy episodes (one per problem, one turn) through the real runner and evaluator: the selection's
    rerank parses, the policy's first turn is correct, the summary's skill JSON parses."""
    from dataclasses import replace

    from davinci.agents import run_episodes
    from davinci.kernelgym import GymConfig, evaluate_batch

    gym = GymConfig(device=device, measure_performance=False, correctness_trials=1, baselines=())
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


def sft_setup(profile):
    """(train problems, seed skills, SFT examples, tokenizer corpus) exactly as the data and sft stages build them."""
    from data_prep import build_sft_examples, builtin_problems, default_heldout_ids
    from davinci.skills import seed_skills

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
    return train, skills, examples, corpus


def policy_prompts(train, skills, profile) -> list:
    """Turn-1 policy prompts with BM25's first select_k skills (what SFT trained on)."""
    from davinci.skills import BM25Retriever

    retriever = BM25Retriever(skills)
    k, sel = profile.skills.bm25_top_k, profile.skills.select_k
    return [policy_messages(p, [s for s, _ in retriever.search(p.code, k)][:sel], backend=profile.agents.backend,
                            skill_chars=profile.agents.skill_chars) for p in train]


def is_exact(problem, text: str) -> bool:
    return text.strip() == f"```python\n{problem.reference_solution.strip()}\n```"


def sampled_exact_rate(bb, train, prompts, max_new: int, group: int = 4) -> float:
    """Share of temperature-1 samples (group of 4 per problem, as in RL rollouts) that reproduce the solution."""
    outs = HFBackend(bb, batch_size=32).generate([m for m in prompts for _ in range(group)], Sampling(max_new, 1.0, seed=1))
    return sum(is_exact(train[i // group], o.text) for i, o in enumerate(outs)) / len(outs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--set", action="append", default=[], help="profile override key=value")
    parser.add_argument("--no-eval", action="store_true", help="skip the kernelgym correctness check")
    parser.add_argument("--json", default="", help="also write the results to this file")
    parser.add_argument("--save", default="", help="save the fine-tuned checkpoint to this folder")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (the model's dtype follows model.dtype)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    profile = load_profile(args.profile, args.set)
    train, skills, examples, corpus = sft_setup(profile)
    t0 = time.perf_counter()
    bb = create_tiny_backbone(corpus, profile.model, seed=profile.seed, device=None if args.device == "auto" else args.device)
    t_create = time.perf_counter() - t0
    cpu0 = time.process_time()
    stats = train_sft(bb, examples, profile.sft, MemoryLogger(), progress=True)
    sft_cpu = time.process_time() - cpu0
    if args.save:
        bb.save(args.save)
    prompts = policy_prompts(train, skills, profile)
    t1 = time.perf_counter()
    outs = HFBackend(bb, batch_size=8).generate(prompts, Sampling(max_new_tokens=profile.agents.max_new_tokens, greedy=True))
    t_gen = time.perf_counter() - t1
    parses = [extract_code(o.text) for o in outs]
    exact = [is_exact(p, o.text) for p, o in zip(train, outs)]
    verdicts = ["skipped"] * len(train) if args.no_eval else evaluate(train, [x.code for x in parses], bb.device.type)
    print(f"\n{'problem':28s} {'exact':>5s} {'code':>5s} {'verdict':>10s} {'resp tok':>8s}")
    for p, e, x, v, o in zip(train, exact, parses, verdicts, outs):
        print(f"{p.id:28s} {str(e):>5s} {str(x.ok):>5s} {v:>10s} {len(o.response_ids):8d}")
    n = len(train)
    summary = {
        "problems": n,
        "examples": len(examples),
        "exact": sum(exact),
        "code_ok": sum(x.ok for x in parses),
        "correct": None if args.no_eval else sum(v == "correct" for v in verdicts),
        "sampled_exact_rate_t1": round(sampled_exact_rate(bb, train, prompts, profile.agents.max_new_tokens), 3),
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
        "device": str(bb.device),
        "load_avg_1m": os.getloadavg()[0],
        "tokens_per_epoch_by_agent": {a: sum(len(bb.encode_chat_masked(e.messages)[0]) for e in examples if e.agent == a)
                                      for a in ("selection", "policy", "summary")},
        "config": {"model": {k: getattr(profile.model, k) for k in ("tiny_hidden", "tiny_layers", "tiny_heads", "tiny_vocab", "tiny_tokenizer", "dtype")},
                   "sft": {k: getattr(profile.sft, k) for k in ("epochs", "lr", "batch_size", "max_len")}},
    }
    if not args.no_eval:
        try:
            summary["episodes"] = episode_check(train, skills, bb, profile, bb.device.type)
        except Exception as exc:  # noqa: BLE001 - report and still write what was measured
            summary["episodes_error"] = f"{type(exc).__name__}: {exc}"
    report(summary, args.json)


def report(summary: dict, json_path: str) -> None:
    n = summary["problems"]
    print(f"\nreproduced exactly {summary['exact']}/{n}, ModelNew extracted {summary['code_ok']}/{n}, correct {summary['correct']}/{n}; "
          f"temperature-1 samples exact {summary['sampled_exact_rate_t1']:.0%}")
    if "episodes" in summary:
        e = summary["episodes"]
        print(f"episodes: selection parsed {e['selection_parsed']}/{n}, turn 0 correct {e['turn0_correct']}/{n}, summary skill parsed {e['summary_parsed']}/{n}")
    print(f"SFT: {summary['sft_steps']} steps, {summary['sft_seconds']} s wall ({summary['sft_cpu_seconds']} CPU-s) on {summary['device']}, "
          f"final loss {summary['final_loss']}")
    print(json.dumps({k: v for k, v in summary.items() if k != "loss_every_10_steps"}, indent=1))
    target = json_path or (str(Path(os.environ["OUT"]) / "llm_sft_repro.json") if os.environ.get("OUT") else "")
    if target:
        Path(target).write_text(json.dumps(summary, indent=1))
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
