"""SFT steps/s of the tiny model on an idle and on a loaded CPU box, per torch intra-op thread count.

Why: on a loaded 2-core box SFT ran 20x slower than idle (0.8 vs 16.5 steps/s, issue 16). Torch's intra-op
pool (OpenMP) takes every core by default, and its threads wait for each other at every op: when another
process holds a core, each op waits for a thread that is not running. This script measures that and the
thread budget the pipeline now sets (`tasks.common.thread_budget`, applied by every stage flow).

What it does: builds the tiny profile's SFT set (data stage engine into a temporary folder), creates the
tiny backbone, then for each load (idle; `--spinners` busy-looping processes, default one per core, like
the evaluator's workers or another job) and each thread count (1 .. cores, and the budget) runs
`--steps` SFT steps after a warm-up and prints steps/s as a table (also written as JSON with `--json`).

    PYTHONPATH=. .venv/bin/python benchmarks/sft_threads.py               # ~2 min on 2 cores
    PYTHONPATH=. .venv/bin/python benchmarks/sft_threads.py --steps 40 --json benchmarks/results/cpu/sft_threads.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

from davinci.config import load_profile


def _spin(stop: "mp.synchronize.Event") -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def _sft_set(profile):  # noqa: ANN001, ANN202
    from data_prep.stage import run_data_stage
    from davinci.agents import sft_examples_for
    from davinci.llm.types import ChatExample
    from tasks.common import read_jsonl
    from tasks.sft import _tokenizer_corpus

    out = Path(tempfile.mkdtemp(prefix="sft-threads-"))
    import functools

    result = run_data_stage(profile.data, out, profile.seed, select_k=profile.skills.select_k,
                            bm25_top_k=profile.skills.bm25_top_k,
                            example_fn=functools.partial(sft_examples_for, agents=profile.agents))
    examples = [ChatExample(agent=d["agent"], messages=tuple(d["messages"]), problem_id=d.get("problem_id", ""))
                for d in read_jsonl(result.sft_path)]
    return examples, _tokenizer_corpus(out, examples)


def steps_per_s(profile, examples, corpus, threads: int, steps: int) -> float:  # noqa: ANN001
    import torch

    from davinci.llm import create_tiny_backbone, train_sft
    from davinci.tracking import MemoryLogger

    torch.set_num_threads(threads)
    backbone = create_tiny_backbone(corpus, profile.model, profile.seed)
    warm = dataclasses.replace(profile.sft, max_steps=5)
    train_sft(backbone, examples, warm, MemoryLogger(), progress=False)
    cfg = dataclasses.replace(profile.sft, max_steps=steps)
    start = time.perf_counter()
    stats = train_sft(backbone, examples, cfg, MemoryLogger(), progress=False)
    return stats.steps / (time.perf_counter() - start)


def measure(steps: int, spinners: int) -> list[dict]:
    from tasks.common import thread_budget

    profile = load_profile("tiny")
    examples, corpus = _sft_set(profile)
    cores = os.cpu_count() or 1
    counts = sorted(set(range(1, cores + 1)))
    rows = []
    for load in ("idle", "loaded"):
        stop = mp.Event()
        procs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(spinners if load == "loaded" else 0)]
        for p in procs:
            p.start()
        time.sleep(1.0)
        budget = thread_budget()  # what a stage flow would pick now (load average, one core kept free)
        for threads in counts:
            rate = steps_per_s(profile, examples, corpus, threads, steps)
            rows.append({"load": load, "spinners": len(procs), "threads": threads, "budget": threads == budget,
                         "steps_per_s": round(rate, 2), "loadavg_1m": round(os.getloadavg()[0], 2)})
            print(f"{load:7s} spinners={len(procs)} threads={threads}{' (budget)' if threads == budget else '':9s} "
                  f"{rate:7.2f} steps/s  loadavg {os.getloadavg()[0]:.2f}", flush=True)
        stop.set()
        for p in procs:
            p.join()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--spinners", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    rows = measure(args.steps, args.spinners)
    print("\n| load | threads | budget | steps/s | loadavg 1m |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['load']} ({r['spinners']} spinners) | {r['threads']} | {'yes' if r['budget'] else ''} | "
              f"{r['steps_per_s']} | {r['loadavg_1m']} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
