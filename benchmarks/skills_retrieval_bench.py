"""Skill retrieval benchmark: BM25 latency at 100 / 1k / 10k skills, and retrieval quality on labelled
KernelBench problems (recall@5 and MRR), BM25 alone vs BM25 + rerank by a backbone.

- Latency: libraries made by perturbing the seed skills (word dropout, shuffled guidance, borrowed
  operators and words from other seeds, new ids); queries are the labelled problems' sources; the
  timed call is `BM25Retriever.search(code, k)` including the AST query extraction. Index build time
  is reported too. Timings are CPU wall-clock on this machine (labelled "cpu").
- Quality: `benchmarks/data/retrieval_labels.json` maps KernelBench problems to their relevant seed
  skills. Over the seed library: BM25 top-k (k = bm25_top_k, 8), then rerank of those k by a model.
  recall@5 = |relevant in top 5| / |relevant|; MRR = 1 / rank of the first relevant skill (0 if none in
  the k candidates). A random shuffle of the BM25 candidates is a control row.
- Rerank backbone: `--openai-url URL --model NAME` (an OpenAI-compatible server, e.g. `vllm serve`),
  or `--checkpoint PATH` (a davinci backbone through `davinci.llm.make_backend`). Without either the
  rerank rows say "not run". Rows report which model reranked and how often its output parsed.
- Oracle-free sanity row: `parse_rerank` over random and adversarial strings; the rate at which it
  returns a valid permutation of the candidates (must be 1.0) and the rate at which it found an order.

    .venv/bin/python benchmarks/skills_retrieval_bench.py [--sizes 100,1000,10000] [--queries 300]
        [--openai-url http://localhost:8000 --model NAME | --checkpoint PATH] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import string
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from davinci.skills.config import SkillsConfig  # noqa: E402
from davinci.skills.rerank import parse_rerank, rerank_messages  # noqa: E402
from davinci.skills.retrieval import BM25Retriever  # noqa: E402
from davinci.skills.schema import AppliesTo, Skill  # noqa: E402
from davinci.skills.seed import seed_skills  # noqa: E402

LABELS = REPO / "benchmarks" / "data" / "retrieval_labels.json"
KERNELBENCH = REPO.parent / "shared" / "kernelbench" / "KernelBench"

Generate = Callable[[list[list[dict]]], list[str]]


# --- synthetic libraries ------------------------------------------------------------------------


def _perturb_text(text: str, rng: random.Random, donor: str) -> str:
    words = [w for w in text.split() if rng.random() > 0.2]
    extra = donor.split()
    words += rng.sample(extra, min(len(extra), rng.randint(3, 25)))
    rng.shuffle(words)
    return " ".join(words) or "kernel"


def synthetic_library(n: int, seed: int = 0) -> list[Skill]:
    """`n` skills made from the seed skills by perturbation (distinct ids, overlapping vocabularies)."""
    seeds = seed_skills(evidence_path=None)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base, donor = rng.choice(seeds), rng.choice(seeds)
        ops = tuple(dict.fromkeys(rng.sample(base.applies_to.ops, max(1, len(base.applies_to.ops) - 1)) + rng.sample(donor.applies_to.ops, 1)))
        out.append(
            replace(
                base,
                id=f"syn-{i:05d}-{base.id}"[:80],
                title=_perturb_text(base.title, rng, donor.title)[:150],
                intent=_perturb_text(base.intent, rng, donor.intent)[:3900],
                guidance=_perturb_text(base.guidance, rng, donor.guidance)[:12000],
                applies_to=AppliesTo(ops, base.applies_to.patterns),
            )
        )
    return out


# --- measurements -------------------------------------------------------------------------------


def load_labels() -> list[tuple[str, str, list[str]]]:
    items = json.loads(LABELS.read_text())["items"]
    return [(it["problem"], (KERNELBENCH / it["problem"]).read_text(), it["relevant"]) for it in items]


def latency_rows(sizes: Sequence[int], codes: Sequence[str], n_queries: int, k: int) -> list[dict]:
    rows = []
    for n in sizes:
        skills = synthetic_library(n)
        t0 = time.perf_counter()
        retriever = BM25Retriever(skills)
        build = time.perf_counter() - t0
        times = []
        for q in range(n_queries):
            code = codes[q % len(codes)]
            t0 = time.perf_counter()
            retriever.search(code, k)
            times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        rows.append({"skills": n, "build_s": build, "p50_ms": statistics.median(times), "p95_ms": times[int(0.95 * (len(times) - 1))], "queries": n_queries})
        print(f"  latency n={n}: build {build:.2f} s, p50 {rows[-1]['p50_ms']:.2f} ms", flush=True)
    return rows


def quality(rankings: Sequence[Sequence[str]], labels: Sequence[list[str]]) -> tuple[float, float]:
    recalls, rrs = [], []
    for ranked, relevant in zip(rankings, labels):
        recalls.append(len(set(ranked[:5]) & set(relevant)) / len(relevant))
        rank = next((i + 1 for i, sid in enumerate(ranked) if sid in relevant), None)
        rrs.append(1.0 / rank if rank else 0.0)
    return statistics.mean(recalls), statistics.mean(rrs)


def parser_robustness(n: int = 3000, seed: int = 0) -> tuple[float, float]:
    """(rate of valid permutations returned, rate of outputs parsed as an order) over garbage."""
    rng = random.Random(seed)
    ids = [f"skill-{i}" for i in range(8)]
    valid = parsed = 0
    for i in range(n):
        noise = "".join(rng.choice(string.printable + "\u2603{}[]\"") for _ in range(rng.randint(0, 300)))
        if i % 2:
            cut = json.dumps({"order": rng.sample(ids + ["bogus"], rng.randint(0, 5))})[: rng.randint(0, 60)]
            noise = noise[: len(noise) // 2] + cut + noise[len(noise) // 2 :]
        try:
            result = parse_rerank(noise, ids)
        except Exception:  # noqa: BLE001 - counted as a failure, which the row exposes
            continue
        valid += sorted(result.order) == sorted(ids)
        parsed += result.ok
    return valid / n, parsed / n


# --- rerank backbones ---------------------------------------------------------------------------


def openai_generate(url: str, model: str, max_tokens: int) -> Generate:
    import httpx

    def generate(prompts: list[list[dict]]) -> list[str]:
        out = []
        for messages in prompts:
            resp = httpx.post(url.rstrip("/") + "/v1/chat/completions", json={"model": model, "messages": messages, "temperature": 0.0, "max_tokens": max_tokens}, timeout=300)
            resp.raise_for_status()
            out.append(resp.json()["choices"][0]["message"]["content"] or "")
        return out

    return generate


def checkpoint_generate(path: str, max_tokens: int) -> Generate:
    from davinci.config import load_profile
    from davinci.llm import Backbone, make_backend  # type: ignore[attr-defined]
    from davinci.llm.types import Sampling

    cfg = load_profile("tiny").model
    backend = make_backend(Backbone.load(path, cfg, "cpu"), cfg)

    def generate(prompts: list[list[dict]]) -> list[str]:
        return [g.text for g in backend.generate(prompts, Sampling(max_new_tokens=max_tokens, greedy=True))]

    return generate


def rerank_rankings(generate: Generate, problems: Sequence[str], candidates: Sequence[list[Skill]], cfg: SkillsConfig) -> tuple[list[list[str]], float]:
    prompts = [rerank_messages(code, cands, max_code_chars=cfg.rerank_max_code_chars, guidance_chars=cfg.rerank_guidance_chars) for code, cands in zip(problems, candidates)]
    texts = generate(prompts)
    results = [parse_rerank(t, [s.id for s in cands]) for t, cands in zip(texts, candidates)]
    return [list(r.order) for r in results], sum(r.ok for r in results) / max(len(results), 1)


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100,1000,10000")
    p.add_argument("--queries", type=int, default=300, help="timed queries per library size")
    p.add_argument("--openai-url", default="")
    p.add_argument("--model", default="", help="model name for --openai-url")
    p.add_argument("--checkpoint", default="", help="a davinci backbone checkpoint folder")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--out", default=os.environ.get("OUT", ""), help="folder for retrieval_bench.json")
    return p.parse_args(argv)


def pick_generator(args: argparse.Namespace) -> tuple[str, Generate | None]:
    if args.openai_url:
        return f"{args.model or '(default model)'} via {args.openai_url}", openai_generate(args.openai_url, args.model, args.max_new_tokens)
    if args.checkpoint:
        try:
            return f"checkpoint {args.checkpoint} (davinci.llm, greedy)", checkpoint_generate(args.checkpoint, args.max_new_tokens)
        except Exception as exc:  # noqa: BLE001 - report and continue with BM25-only rows
            return f"not run: could not load {args.checkpoint} ({type(exc).__name__}: {exc})", None
    return "not run (no model given: pass --openai-url/--model or --checkpoint)", None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = SkillsConfig()
    labelled = load_labels()
    names, codes, labels = [x[0] for x in labelled], [x[1] for x in labelled], [x[2] for x in labelled]
    print(f"retrieval benchmark: {len(labelled)} labelled KernelBench problems; timings are CPU wall-clock ({os.cpu_count()} cores)", flush=True)
    lat = latency_rows([int(s) for s in args.sizes.split(",") if s], codes, args.queries, cfg.bm25_top_k)

    library = seed_skills(evidence_path=None)
    retriever = BM25Retriever(library)
    hits = [retriever.search(code, cfg.bm25_top_k) for code in codes]
    bm25_rank = [[s.id for s, _ in h] for h in hits]
    rng = random.Random(0)
    shuffled = [rng.sample(r, len(r)) for r in bm25_rank]
    model_label, generate = pick_generator(args)
    rows = [("BM25 (rank-bm25, AST query)", *quality(bm25_rank, labels), "-"), ("BM25 + random shuffle of top-8 (control)", *quality(shuffled, labels), "-")]
    if generate is not None:
        reranked, ok_rate = rerank_rankings(generate, codes, [[s for s, _ in h] for h in hits], cfg)
        rows.append((f"BM25 + rerank: {model_label}", *quality(reranked, labels), f"{ok_rate:.2f}"))
    else:
        rows.append((f"BM25 + rerank: {model_label}", float("nan"), float("nan"), "-"))
    valid_rate, parsed_rate = parser_robustness()

    print(f"\nBM25 latency (cpu, search incl. AST query extraction, k={cfg.bm25_top_k})")
    print("| skills | index build (s) | p50 (ms) | p95 (ms) | queries |\n|---|---|---|---|---|")
    for r in lat:
        print(f"| {r['skills']} | {r['build_s']:.2f} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['queries']} |")
    print(f"\nRetrieval quality on {len(labelled)} labelled KernelBench problems (seed library, {len(library)} skills; candidates = BM25 top {cfg.bm25_top_k})")
    print("| method | recall@5 | MRR | rerank parse rate |\n|---|---|---|---|")
    for name, rec, mrr, ok in rows:
        print(f"| {name} | {rec:.3f} | {mrr:.3f} | {ok} |")
    print(f"| oracle-free sanity: parse_rerank on 3000 garbage strings | valid permutation {valid_rate:.3f} | parsed {parsed_rate:.3f} | - |")
    misses = [n for n, r, lab in zip(names, bm25_rank, labels) if not set(r[:5]) & set(lab)]
    print(f"\nBM25 top-5 misses every relevant skill on {len(misses)} problem(s): {', '.join(misses) or 'none'}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        doc = {"latency": lat, "quality": [dict(zip(("method", "recall_at_5", "mrr", "parse_rate"), r)) for r in rows], "parser": {"valid": valid_rate, "parsed": parsed_rate}, "timing_label": "cpu"}
        (Path(args.out) / "retrieval_bench.json").write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
