"""The learning demonstration: does RL raise held-out correctness, and by more than two controls?

Protocol (issue 13, item 6), every piece the engine's own code:
  1. task family: synthetic op-chain problems (`data_prep.synthesis`, generated fused Triton solutions);
     the held-out split is by operator-signature family (`tags[2]`): a family is either all train or all
     held out, so no held-out chain shares its op signature with a training chain, and nothing trains on it;
  2. model: the tiny Llama (`create_tiny_backbone`, tokenizer trained on the training text only), sized by
     --hidden/--layers (defaults: ~20M parameters on a GPU);
  3. SFT on the training problems, stopped early (--sft-steps) so held-out correctness sits between 0 and 1;
  4. three arms from that same SFT checkpoint, at equal optimizer steps:
       rl        `run_rl_epoch` epochs on a fixed probe set of training problems (the same every epoch);
       sft       continued SFT on the training problems for as many optimizer steps as rl took;
       flipped   rl with the advantages negated (estimator `trloo_flipped`, registered here only);
  5. held-out eval of the SFT checkpoint and of each arm on the same problems (`agents.evaluation.run_eval`,
     greedy, `eval.turns` turns), correctness per problem; after - before paired over problems with a
     bootstrap 95% CI (`paired_bootstrap_ci`).
Writes $OUT/summary.json (heldout_n, before, after, ci95_low, ci95_high, control_sft_after,
control_flipped_after, device, commit, ...), $OUT/per_problem.jsonl, $OUT/learning.png, $OUT/learning_log.txt
(not log.txt: run_suite.sh sends the job's stdout to $OUT/log.txt, where the two writers would overwrite each other).

    PYTHONPATH=. OUT=benchmarks/results/h100/learning python benchmarks/gpu/learning_demo.py   # one H100, ~30 min
    PYTHONPATH=. OUT=/tmp/demo python benchmarks/gpu/learning_demo.py --smoke-cpu                 # CPU, ~5-10 min

--smoke-cpu is the CPU version (the slow test `tests/rl/test_learning_demo.py`): the tiny profile's task family
(two-op chains of its eight elementwise ops, `data.synthetic_ops`), held out by operator signature
(`data_prep.stage.split_by_signature`: the signature families of so small a pool are too few to hold one out),
the tiny model at its profile size, SFT stopped where it solves part of the held-out chains, 2 short RL epochs.

Not yet run on an H100 (written by the issue-13 branch); the defaults are a first guess to calibrate:
watch `before` (want well inside (0, 1)) and lower --sft-steps when it is near 1, raise when near 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

T0 = time.perf_counter()


def log(out: Path, msg: str) -> None:
    line = f"[{time.perf_counter() - T0:7.1f}s] {msg}"
    print(line, flush=True)
    with (out / "learning_log.txt").open("a") as fh:
        fh.write(line + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic", type=int, default=2400, help="op-chain problems to generate")
    ap.add_argument("--heldout-every", type=int, default=8, help="one signature family in this many is held out")
    ap.add_argument("--heldout-max", type=int, default=300)
    ap.add_argument("--probe", type=int, default=48, help="training problems rolled out every RL epoch")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--turns", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--sft-steps", type=int, default=1500)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ops", default="", help="comma-separated op names of the chains (default: every op)")
    ap.add_argument("--lengths", default="", help="comma-separated chain lengths (default: the generator's 2-4 mix)")
    ap.add_argument("--split", choices=("family", "signature"), default="family",
                    help="hold out whole signature families (crc32 of tags[2]) or single op signatures (and their reverse)")
    ap.add_argument("--smoke-cpu", action="store_true", help="the CPU version: the tiny profile's task family and sizes")
    ap.add_argument("--set", action="append", default=[], help="extra profile override key=value")
    args = ap.parse_args(argv)
    if args.smoke_cpu:
        from davinci.config import load_profile

        args.ops, args.lengths, args.split = ",".join(load_profile("tiny").data.synthetic_ops), "2", "signature"
        args.synthetic, args.heldout_max, args.probe, args.epochs, args.group_size = 48, 8, 4, 2, 2
        args.hidden, args.layers, args.sft_steps, args.device = 128, 2, 800, "cpu"
        args.set = ["agents.max_new_tokens=96", "gym.workers=1", *args.set]
    return args


def chain_pool(args: argparse.Namespace) -> Any:
    from data_prep.synthesis import ChainPool

    ops = tuple(x for x in args.ops.split(",") if x)
    lengths = tuple(int(x) for x in args.lengths.split(",") if x) or ChainPool().lengths
    return ChainPool(ops=ops, lengths=lengths)


def build_profile(args: argparse.Namespace) -> Any:
    from davinci.config import load_profile

    overrides = [
        f"seed={args.seed}", f"gym.device={args.device}", "gym.baselines=[eager]", "gym.measure_performance=false",
        f"model.tiny_hidden={args.hidden}", f"model.tiny_layers={args.layers}", f"model.tiny_heads={max(2, args.hidden // 64)}",
        f"model.tiny_intermediate={4 * args.hidden}", "model.max_seq_len=4096",
        f"agents.group_size={args.group_size}", f"agents.turns={args.turns}", "agents.summarize=false", "skills.rerank=false",
        "rl.problems_per_epoch=0", "rl.batch_size=32", "rl.checkpoint_every=0",
        f"sft.max_steps={args.sft_steps}", "sft.epochs=1000", f"eval.turns={args.turns}", *args.set,
    ]  # fmt: skip
    return load_profile("tiny", overrides)


def split(problems: list[Any], every: int, heldout_max: int, by: str = "family") -> tuple[list[Any], list[Any]]:
    """(train, held-out) by signature family: a family is held out when its crc32 falls in 1/every; or (`by`
    "signature") the `heldout_max` op signatures with the lowest crc32, each with its reverse."""
    if by == "signature":
        from data_prep.stage import split_by_signature

        from data_prep.source_ast import operator_signature

        held, train = split_by_signature(problems, heldout_max)
        op_sets = {tuple(sorted(operator_signature(p.code))) for p in held}  # a held-out chain's reverse never trains
        return [p for p in train if tuple(sorted(operator_signature(p.code))) not in op_sets], held
    held = [p for p in problems if zlib.crc32(p.tags[2].encode()) % every == 0][:heldout_max]
    ids = {p.id for p in held}
    families = {p.tags[2] for p in held}
    train = [p for p in problems if p.id not in ids and p.tags[2] not in families]
    return train, held


def register_flipped() -> None:
    from davinci.rl.advantages import ADVANTAGES, trloo

    if "trloo_flipped" not in ADVANTAGES:
        ADVANTAGES.register("trloo_flipped")(lambda returns, groups: -trloo(returns, groups))


def sft(profile: Any, train: list[Any], work: Path, out: Path, start: Path | None, max_steps: int) -> Path:
    """SFT on the training problems (from scratch when `start` is None); returns the saved checkpoint."""
    from data_prep import build_sft_examples
    from davinci.llm.backbone import Backbone
    from davinci.llm.sft import train_sft
    from davinci.llm.tiny import create_tiny_backbone
    from davinci.tracking import MemoryLogger

    examples = [ex for ex in build_sft_examples(train, [], seed=profile.seed) if ex.agent == "policy"]  # no skills, no summaries
    if start is None:
        corpus = [m["content"] for ex in examples for m in ex.messages]
        backbone = create_tiny_backbone(corpus, profile.model, seed=profile.seed, device=profile.gym.device)
    else:
        backbone = Backbone.load(start, profile.model, profile.gym.device)
    stats = train_sft(backbone, examples, replace(profile.sft, max_steps=max_steps), MemoryLogger(), progress=False)
    log(out, f"sft {work.name}: {stats.steps} steps on {len(examples)} examples, loss {stats.first_loss:.3f} -> {stats.final_loss:.3f}")
    return backbone.save(work)


def rl(profile: Any, probe: list[Any], sft_ckpt: Path, work: Path, out: Path, epochs: int) -> tuple[Path, int]:
    """RL epochs on the fixed probe set; returns the last checkpoint and the optimizer steps taken."""
    from davinci.rl.epoch import EpochInputs, run_rl_epoch
    from davinci.skills import SkillStore

    version = SkillStore(work / "skills").commit([], parent=None, note="empty").version
    ckpt, steps = sft_ckpt, 0
    for e in range(epochs):
        res = run_rl_epoch(EpochInputs(
            checkpoint_dir=str(ckpt), output_dir=str(work / f"epoch_{e:03d}"), skill_store_root=str(work / "skills"),
            library_version=version, problems=tuple(probe), profile=profile, epoch=e, device=profile.gym.device))  # fmt: skip
        ckpt, steps = Path(res.checkpoint_dir), steps + res.timing.steps
        log(out, f"{work.name} epoch {e}: correct {res.metrics['correct_rate']:.3f}, reward {res.metrics['reward_turn_mean']:.3f}, "
                 f"kl {res.metrics.get('kl', 0):.4f}, {res.timing.steps} steps")  # fmt: skip
    return ckpt, steps


def heldout_correct(profile: Any, ckpt: Path, held: list[Any], work: Path) -> list[float]:
    """1.0 / 0.0 per held-out problem: the best turn of a greedy episode is correct."""
    from davinci.agents.evaluation import eval_profile, problem_record, run_eval
    from davinci.kernelgym import evaluate_batch
    from davinci.llm import Backbone, make_backend

    prof = eval_profile(profile)
    backbone = Backbone.load(ckpt, prof.model, prof.gym.device)
    episodes = run_eval(prof, held, make_backend(backbone, prof.model), (), lambda items: evaluate_batch(items, prof.gym), work / "episodes.jsonl")
    return [float(problem_record(p, episodes.get(p.id))["correct"]) for p in held]


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(0) if device.startswith("cuda") and torch.cuda.is_available() else "cpu"


def plot(path: Path, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["SFT (before)", "RL", "continued SFT", "flipped RL"]
    vals = [summary["before"], summary["after"], summary["control_sft_after"], summary["control_flipped_after"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(names, vals, color=["grey", "tab:green", "tab:blue", "tab:red"])
    ax.errorbar([1], [summary["after"]], yerr=[[summary["after"] - (summary["before"] + summary["ci95_low"])],
                                               [(summary["before"] + summary["ci95_high"]) - summary["after"]]], color="k", capsize=6)  # fmt: skip
    ax.set(ylabel=f"held-out correct (n={summary['heldout_n']})", title="RL vs controls at equal optimizer steps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from data_prep import builtin_problems
    from data_prep.synthesis import synthesize_with_report
    from davinci.agents.evaluation import paired_bootstrap_ci
    from davinci.jsonl import write_jsonl

    args = parse_args(argv)
    out = Path(os.environ.get("OUT", "benchmarks/results/h100/learning"))
    out.mkdir(parents=True, exist_ok=True)
    # checkpoints and episodes outside $OUT ($LEARNING_WORK, else a temporary folder): run_suite.sh packs every
    # job's $OUT into one archive that must stay under 16 MiB to come back, and the checkpoints are far larger
    work = Path(os.environ.get("LEARNING_WORK") or tempfile.mkdtemp(prefix="learning_demo_"))
    profile = build_profile(args)
    register_flipped()
    problems = list(synthesize_with_report(builtin_problems(), args.synthetic, args.seed, verify_solutions=False,
                                           pool=chain_pool(args)).problems)
    train, held = split(problems, args.heldout_every, args.heldout_max, args.split)
    probe = train[: args.probe]
    log(out, f"work folder (checkpoints, episodes): {work}")
    log(out, f"{len(problems)} problems: {len(train)} train, {len(held)} held out (split by {args.split}), probe {len(probe)}")
    sft_ckpt = sft(profile, train, work / "sft", out, None, args.sft_steps)
    before = heldout_correct(profile, sft_ckpt, held, work / "eval_before")
    log(out, f"before RL: held-out correct {sum(before)}/{len(held)}")
    rl_ckpt, steps = rl(profile, probe, sft_ckpt, work / "rl", out, args.epochs)
    flipped = replace(profile, rl=replace(profile.rl, advantage="trloo_flipped"))
    flip_ckpt, _ = rl(flipped, probe, sft_ckpt, work / "flipped", out, args.epochs)
    cont_ckpt = sft(profile, train, work / "sft_control", out, sft_ckpt, max(steps, 1))
    after = heldout_correct(profile, rl_ckpt, held, work / "eval_rl")
    log(out, f"after RL: held-out correct {sum(after)}/{len(held)}")  # each arm as it ends: a time limit keeps them
    after_sft = heldout_correct(profile, cont_ckpt, held, work / "eval_sft")
    log(out, f"after continued SFT: held-out correct {sum(after_sft)}/{len(held)}")
    after_flip = heldout_correct(profile, flip_ckpt, held, work / "eval_flipped")
    log(out, f"after flipped RL: held-out correct {sum(after_flip)}/{len(held)}")
    diff, lo, hi = paired_bootstrap_ci(before, after, seed=args.seed)
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    summary = {
        "heldout_n": len(held), "before": mean(before), "after": mean(after), "after_minus_before": diff,
        "ci95_low": lo, "ci95_high": hi, "control_sft_after": mean(after_sft), "control_flipped_after": mean(after_flip),
        "rl_optimizer_steps": steps, "train_n": len(train), "probe_n": len(probe), "epochs": args.epochs,
        "device": device_name(args.device), "commit": git_commit(), "wall_s": time.perf_counter() - T0, "args": vars(args),
    }  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    rows = [{"problem_id": p.id, "before": b, "rl": a, "sft": s, "flipped": f} for p, b, a, s, f in zip(held, before, after, after_sft, after_flip)]
    write_jsonl(out / "per_problem.jsonl", rows)
    try:
        plot(out / "learning.png", summary)
    except ImportError as exc:  # matplotlib is not on every GPU machine: summary.json holds the numbers
        log(out, f"no plot: {exc}")
    log(out, f"held-out correct: before {summary['before']:.3f}, RL {summary['after']:.3f} (after-before {diff:+.3f}, 95% CI "
             f"[{lo:+.3f}, {hi:+.3f}]), continued SFT {summary['control_sft_after']:.3f}, flipped {summary['control_flipped_after']:.3f}")  # fmt: skip
    return summary


if __name__ == "__main__":
    main()
