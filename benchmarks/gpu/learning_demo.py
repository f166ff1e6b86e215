"""The learning demonstration: does RL raise held-out correctness, and by more than two controls?

Protocol (issue 13, item 6), every piece the engine's own code:
  1. task family: synthetic op-chain problems (`data_prep.synthesis`, generated fused Triton solutions);
     the held-out split is by operator-signature family (`tags[2]`): a family is either all train or all
     held out, so no held-out chain shares its op signature with a training chain, and nothing trains on it;
  2. model: the tiny Llama (`create_tiny_backbone`, tokenizer trained on the training text only), sized by
     --hidden/--layers (defaults 256/4, a few million parameters), SFT at --sft-lr 2e-3 with --sft-batch 32;
  3. SFT on the training problems, stopped once it solves --calib-target of a calibration split: families held
     out of training the same way as the held-out ones, but never the held-out ones (checked every --calib-check
     steps, at most --sft-steps), so held-out correctness sits between 0 and 1 without the held-out split
     steering anything;
  4. three arms from that same SFT checkpoint, at equal optimizer steps:
       rl        `run_rl_epoch` epochs on fixed probe sets of training problems: --probe-sets fixed rolls out the
                 same --probe problems every epoch; per-epoch gives epoch e its own --probe problems (the e-th
                 slice of the training problems: the same in every run and every arm, distinct across epochs);
       sft       continued SFT on the training problems for as many optimizer steps as rl took;
       flipped   rl with the advantages negated (estimator `trloo_flipped`, registered here only);
     With --sft-n N the SFT stage and the continued-SFT control train on the reference solutions of the first N
     training problems only, and RL rolls out the others (their solutions are never read): the setting RL is for,
     where problems are plentiful and reference kernels are not. Without it (0), SFT and RL share every training
     problem, and continued SFT then trains on solutions of the very problems RL must solve by itself;
  5. held-out eval of the SFT checkpoint and of each arm on the same problems (`agents.evaluation.run_eval`,
     greedy, `eval.turns` turns), correctness per problem; after - before paired over problems with a
     bootstrap 95% CI (`paired_bootstrap_ci`). With --heldout-samples K, every checkpoint is also scored by K samples
     per held-out problem at the sampling temperature (a pass@1 estimate per problem, the quantity RL optimises,
     which moves before the greedy answer flips), with its own paired CI (`sampled_*` in summary.json).
Writes $OUT/summary.json (heldout_n, before, after, ci95_low, ci95_high, control_sft_after,
control_flipped_after, device, commit, ...), $OUT/per_problem.jsonl, $OUT/learning.png, $OUT/learning_log.txt
(not log.txt: run_suite.sh sends the job's stdout to $OUT/log.txt, where the two writers would overwrite each other).

    PYTHONPATH=. OUT=benchmarks/results/h100/learning python benchmarks/gpu/learning_demo.py --eval-device cpu --set gym.workers=8   # one H100
    PYTHONPATH=. OUT=/tmp/demo python benchmarks/gpu/learning_demo.py --smoke-cpu                 # CPU, ~5-10 min

--smoke-cpu is the CPU version (the slow test `tests/rl/test_learning_demo.py`): the tiny profile's task family
(two-op chains of its eight elementwise ops, `data.synthetic_ops`), held out by operator signature
(`data_prep.stage.split_by_signature`: the signature families of so small a pool are too few to hold one out),
the tiny model at its profile size, SFT stopped where it solves part of the held-out chains, 2 short RL epochs.

Resumable: every stage (problems, SFT, each arm, each evaluation) writes its result into the work folder
($LEARNING_WORK), and a rerun with the same folder starts after the last finished stage, so the demonstration can
span several calls of a warm GPU machine (each call is at most 10 minutes):
    LEARNING_WORK=$PWD/.learning_work LEARNING_ARGS="..." bash benchmarks/gpu/run_suite.sh learning:580   # twice

Why these defaults (each measured; the runs are in benchmarks/results/h200x4/session_2026-11-2*/ and
benchmarks/results/cpu/learning*/):
- The task family: the tokenizer trained on this templated corpus makes every code line one token, so the whole
  loss sits on the op lines and SFT must learn to copy the prompt's forward lines into kernel lines. With every op
  (reductions and row ops too) it did not (op-line loss 2.6 after 4,000 steps); with the 12 elementwise ops
  (UNARY_OPS), lengths 2-4, batch 32 and lr 2e-3 it does, partway, which leaves held-out correctness between 0 and 1.
- The calibration stop: a fixed SFT length held out 0/130 on one run; stopping at --calib-target on a split of its
  own puts the start where the arms can move either way without the held-out split steering anything. A run whose
  SFT still solves nothing held out stops after `eval_before` and says so.
- --eval-device cpu: correctness is all the demonstration measures, and the host's CPU lanes (Triton interpreter,
  ~0.1-0.2 s per evaluation) beat a fresh CUDA context per candidate (~310 s per 256-evaluation epoch on a shared
  GPU host). `check_evaluator` stops a run whose evaluator rejects the reference solutions (an environment that
  fails every candidate would read as a model that learnt nothing).
- RL's step: lr 5e-4 without warmup diverged (KL to SFT up to 10^5 per token); a race against continued SFT is
  fair only once SFT has stopped gaining on its own data (--sft-n, --calib-target above 1 and --calib-patience:
  a fixed SFT length is no plateau: 500 steps left one split's start at loss 0.097 and calibration 0.09, and
  continued SFT then gained +0.39 held out, benchmarks/results/h200x2/learning_300/).
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
# The default task family: chains of the elementwise ops (see the module docstring for why not every op).
UNARY_OPS = ("relu", "gelu", "silu", "sigmoid", "tanh", "softplus", "leaky_relu", "hardtanh", "square", "abs", "scale", "shift")
STAGES = ("sft", "eval_before", "rl", "flipped", "sft_control", "eval_rl", "eval_sft", "eval_flipped")


def log(out: Path, msg: str) -> None:
    line = f"[{time.perf_counter() - T0:7.1f}s] {msg}"
    print(line, flush=True)
    with (out / "learning_log.txt").open("a") as fh:
        fh.write(line + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic", type=int, default=3000, help="op-chain problems to generate (distinct chains are kept)")
    ap.add_argument("--heldout-every", type=int, default=8, help="one signature family in this many is held out")
    ap.add_argument("--heldout-max", type=int, default=100, help="held-out signatures (--split signature) or problems")
    ap.add_argument("--probe", type=int, default=32, help="training problems rolled out every RL epoch")
    ap.add_argument("--probe-sets", choices=("fixed", "per-epoch"), default="fixed",
                    help="fixed: the same probe problems every epoch; per-epoch: epoch e rolls out the e-th slice of "
                         "--probe training problems (more distinct problems at the same compute)")
    ap.add_argument("--sft-n", type=int, default=0,
                    help="the SFT stage and the continued-SFT control see only the first N training problems (their "
                         "reference solutions); RL rolls out the others, whose solutions nothing reads (0: all for both)")
    ap.add_argument("--heldout-samples", type=int, default=0, help="also score every checkpoint by K samples per held-out "
                    "problem at the sampling temperature (pass@1 from K draws, what RL optimises); 0 = greedy only")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--turns", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--sft-steps", type=int, default=4000, help="most SFT steps (all of them with --calib-n 0)")
    ap.add_argument("--calib-n", type=int, default=None,
                    help="calibration problems: families (signatures) held out of training like the held-out split, never "
                         "the held-out ones; SFT stops once it solves --calib-target of them (0: no calibration; "
                         "default 32, 0 with --smoke-cpu)")
    ap.add_argument("--calib-target", type=float, default=0.3)
    ap.add_argument("--calib-check", type=int, default=100, help="SFT steps between calibration checks (~15 s each on a GPU)")
    ap.add_argument("--calib-patience", type=int, default=0,
                    help="also stop SFT once this many calibration checks in a row brought no gain over the best before "
                         "them, after it solved some (a plateau: continued SFT is the control for what more SFT gives); "
                         "0: off, stop at --calib-target or --sft-steps only")
    ap.add_argument("--sft-lr", type=float, default=2e-3, help="SFT learning rate (the tiny profile's 5e-3 suits its 1.5M model)")
    ap.add_argument("--sft-batch", type=int, default=32, help="SFT examples per step (answers are ~45 tokens)")
    ap.add_argument("--device", default="cuda", help="where the model trains and generates")
    ap.add_argument("--eval-device", default="", help="where kernelgym judges the kernels (gym.device; default: "
                    "--device). 'cpu' runs them in the Triton interpreter on the host's cores: correctness only, "
                    "as here (timing is off), without a fresh CUDA context per candidate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ops", default=",".join(UNARY_OPS), help="comma-separated op names of the chains ('' = every op; "
                    "default: the elementwise ones, see the module docstring)")
    ap.add_argument("--lengths", default="2,3,4", help="comma-separated chain lengths ('' = the generator's 2-4 mix)")
    ap.add_argument("--split", choices=("family", "signature"), default="signature",
                    help="hold out whole signature families (crc32 of tags[2]) or single op signatures (and their reverse)")
    ap.add_argument("--smoke-cpu", action="store_true", help="the CPU version: the tiny profile's task family and sizes")
    ap.add_argument("--set", action="append", default=[], help="extra profile override key=value")
    ap.add_argument("--stages", default="", help="comma-separated stages this process runs (default: all), e.g. on "
                    "separate GPUs sharing $LEARNING_WORK: 'sft,eval_before,rl,eval_rl,sft_control,eval_sft' and "
                    "'flipped,eval_flipped' (with --wait-s); "
                    f"stages: {', '.join(STAGES)}")
    ap.add_argument("--wait-s", type=float, default=0.0, help="with --stages: seconds to wait for the SFT checkpoint "
                    "and its held-out score from another process (the flipped arm's process on a second GPU)")
    args = ap.parse_args(argv)
    if args.smoke_cpu:
        from davinci.config import load_profile

        args.ops, args.lengths, args.split = ",".join(load_profile("tiny").data.synthetic_ops), "2", "signature"
        args.synthetic, args.heldout_max, args.probe, args.epochs, args.group_size = 48, 8, 4, 2, 2
        args.hidden, args.layers, args.sft_steps, args.device = 128, 2, 800, "cpu"
        args.sft_lr, args.sft_batch = 5e-3, 4  # the tiny profile's SFT settings
        args.set = ["agents.max_new_tokens=96", "gym.workers=1", *args.set]
        args.calib_n = args.calib_n or 0  # the smoke pool is small to spare a calibration split (tests/rl/test_learning_demo.py)
    args.calib_n = 32 if args.calib_n is None else args.calib_n
    args.eval_device = args.eval_device or args.device
    return args


def chain_pool(args: argparse.Namespace) -> Any:
    from data_prep.synthesis import ChainPool

    ops = tuple(x for x in args.ops.split(",") if x)
    lengths = tuple(int(x) for x in args.lengths.split(",") if x) or ChainPool().lengths
    return ChainPool(ops=ops, lengths=lengths)


def build_profile(args: argparse.Namespace) -> Any:
    from davinci.config import load_profile

    overrides = [
        f"seed={args.seed}", f"gym.device={args.eval_device}", "gym.baselines=[eager]", "gym.measure_performance=false",
        f"model.tiny_hidden={args.hidden}", f"model.tiny_layers={args.layers}", f"model.tiny_heads={max(2, args.hidden // 64)}",
        f"model.tiny_intermediate={4 * args.hidden}", "model.max_seq_len=4096",
        f"agents.group_size={args.group_size}", f"agents.turns={args.turns}", "agents.summarize=false", "skills.rerank=false",
        "rl.problems_per_epoch=0", "rl.batch_size=32", "rl.checkpoint_every=0",
        f"sft.max_steps={args.sft_steps}", "sft.epochs=1000", f"sft.lr={args.sft_lr}", f"sft.batch_size={args.sft_batch}", f"eval.turns={args.turns}", *args.set,
    ]  # fmt: skip
    return load_profile("tiny", overrides)


def split(problems: list[Any], every: int, heldout_max: int, by: str = "family", salt: str = "") -> tuple[list[Any], list[Any]]:
    """(train, held-out) by signature family: a family is held out when crc32(salt + family) falls in 1/every; or
    (`by` "signature") the `heldout_max` op signatures with the lowest crc32, each with its reverse. A second call
    on the train part with another salt gives the calibration split, disjoint from the held-out one."""
    if by == "signature":
        from data_prep.stage import split_by_signature

        from data_prep.source_ast import operator_signature

        held, train = split_by_signature(problems, heldout_max)
        op_sets = {tuple(sorted(operator_signature(p.code))) for p in held}  # a held-out chain's reverse never trains
        return [p for p in train if tuple(sorted(operator_signature(p.code))) not in op_sets], held
    held = [p for p in problems if zlib.crc32((salt + p.tags[2]).encode()) % every == 0][:heldout_max]
    ids = {p.id for p in held}
    families = {p.tags[2] for p in held}
    train = [p for p in problems if p.id not in ids and p.tags[2] not in families]
    return train, held


def register_flipped() -> None:
    from davinci.rl.advantages import ADVANTAGES, trloo

    if "trloo_flipped" not in ADVANTAGES:
        ADVANTAGES.register("trloo_flipped")(lambda returns, groups: -trloo(returns, groups))


def sft(profile: Any, train: list[Any], work: Path, out: Path, start: Path | None, max_steps: int,
        stop: Any = None, *, device: str) -> tuple[Path, int]:
    """SFT on the training problems (from scratch when `start` is None); returns the saved checkpoint and the
    steps taken (fewer than `max_steps` when `stop(steps, backbone)` ends it)."""
    from data_prep import build_sft_examples
    from davinci.llm.backbone import Backbone
    from davinci.llm.sft import train_sft
    from davinci.llm.tiny import create_tiny_backbone
    from davinci.tracking import MemoryLogger

    examples = [ex for ex in build_sft_examples(train, [], seed=profile.seed) if ex.agent == "policy"]  # no skills, no summaries
    if start is None:
        corpus = [m["content"] for ex in examples for m in ex.messages]
        backbone = create_tiny_backbone(corpus, profile.model, seed=profile.seed, device=device)
    else:
        backbone = Backbone.load(start, profile.model, device)
    stats = train_sft(backbone, examples, replace(profile.sft, max_steps=max_steps), MemoryLogger(), progress=False,
                      stop=None if stop is None else (lambda steps: stop(steps, backbone)))
    log(out, f"sft {work.name}: {stats.steps} steps on {len(examples)} examples, loss {stats.first_loss:.3f} -> {stats.final_loss:.3f}")
    return backbone.save(work), stats.steps


def plateaued(rates: list[float], patience: int) -> bool:
    """Whether the last `patience` calibration rates gained nothing over the best rate before them, once some rate
    is above 0 (a model that solves nothing yet has not plateaued: early checks sit at 0 while SFT learns the
    format). `patience` 0 never stops."""
    if patience <= 0 or len(rates) <= patience or max(rates) <= 0.0:
        return False
    return max(rates[-patience:]) <= max(rates[:-patience])


def calibration_stop(profile: Any, calib: list[Any], work: Path, out: Path, every: int, target: float,
                     patience: int = 0) -> Any:
    """stop(steps, backbone) for `sft`: every `every` steps, the greedy correctness on the calibration split;
    True once it reaches `target`, or once it has plateaued (`plateaued`, with `patience`). The held-out split is
    never looked at; the curve goes to the log."""
    rates: list[float] = []

    def stop(steps: int, backbone: Any) -> bool:
        if not calib or steps % every:
            return False
        backbone.model.eval()
        rates.append(sum(correct_with(profile, backbone, calib, work / f"calib_{steps:05d}", out)) / len(calib))
        flat = plateaued(rates, patience)
        log(out, f"calibration after {steps} SFT steps: {rates[-1]:.3f} of {len(calib)} (stop at {target:.2f}"
                 + (f" or after {patience} checks without gain" if patience else "") + ("; plateau: stop" if flat else "") + ")")
        return rates[-1] >= target or flat
    return stop


def sft_and_rl_pools(train: list[Any], sft_n: int) -> tuple[list[Any], list[Any]]:
    """(problems whose reference solutions SFT trains on, problems RL rolls out): the first `sft_n` and the rest,
    disjoint; with `sft_n` 0, all of them for both."""
    if sft_n <= 0:
        return train, train
    if sft_n >= len(train):
        raise SystemExit(f"--sft-n {sft_n} leaves no problem for RL: there are {len(train)} training problems; "
                         "give a smaller --sft-n (or 0 to share them)")
    return train[:sft_n], train[sft_n:]


def probe_sets(train: list[Any], size: int, epochs: int, mode: str) -> list[list[Any]]:
    """The problems each RL epoch rolls out: the first `size` training problems every epoch ("fixed"), or the
    e-th consecutive slice of `size` for epoch e ("per-epoch"; wraps around when the training problems run out)."""
    if mode == "fixed" or not train:
        return [train[:size]] * epochs
    return [[train[(e * size + i) % len(train)] for i in range(min(size, len(train)))] for e in range(epochs)]


def rl(profile: Any, probes: list[list[Any]], sft_ckpt: Path, work: Path, out: Path, epochs: int, device: str) -> tuple[Path, int]:
    """RL epochs, epoch e on `probes[e]`; returns the last checkpoint and the optimizer steps taken."""
    from davinci.rl.epoch import EpochInputs, run_rl_epoch
    from davinci.skills import SkillStore

    version = SkillStore(work / "skills").commit([], parent=None, note="empty").version
    ckpt, steps = sft_ckpt, 0
    for e in range(epochs):
        res = run_rl_epoch(EpochInputs(
            checkpoint_dir=str(ckpt), output_dir=str(work / f"epoch_{e:03d}"), skill_store_root=str(work / "skills"),
            library_version=version, problems=tuple(probes[e]), profile=profile, epoch=e, device=device))  # fmt: skip
        ckpt, steps = Path(res.checkpoint_dir), steps + res.timing.steps
        tm = res.timing  # the epoch's wall split (issue 17: generation / evaluation / update / overlap)
        log(out, f"{work.name} epoch {e}: correct {res.metrics['correct_rate']:.3f}, reward {res.metrics['reward_turn_mean']:.3f}, "
                 f"kl {res.metrics.get('kl', 0):.4f}, {tm.steps} steps; seconds: generation {tm.generation_s:.1f}, "
                 f"evaluation {tm.evaluation_s:.1f} ({tm.evaluations} evaluations, {tm.evaluation_copies} of them copies), overlap {tm.overlap_s:.1f}, "
                 f"scoring {tm.scoring_s:.1f}, update {tm.update_s:.1f}, total {tm.total_s:.1f}")  # fmt: skip
        log(out, f"{work.name} epoch {e}: {eval_phases(Path(res.rollouts_path))}")
    return ckpt, steps


def eval_phases(rollouts: Path) -> str:
    """Median seconds per evaluation phase (`details.phase_s`) and the wall, over an epoch's evaluated turns:
    where the evaluation time went (setup includes the wait for a lane's fresh candidate process)."""
    import statistics

    from davinci.rl.records import read_rollouts

    results = [t.result for rec in read_rollouts(rollouts) for t in rec.episode.turns
               if t.result is not None and "copy_of" not in t.result.details]
    if not results:
        return "no evaluated turns"
    phases = sorted({k for r in results for k in r.details.get("phase_s", {})})
    parts = [f"{k} {statistics.median(r.details.get('phase_s', {}).get(k, 0.0) for r in results):.2f}" for k in phases]
    return f"median s per evaluation ({len(results)}): wall {statistics.median(r.wall_s for r in results):.2f}, " + ", ".join(parts)


def heldout_correct(profile: Any, ckpt: Path, problems: list[Any], work: Path, device: str, out: Path) -> list[float]:
    """1.0 / 0.0 per problem: the best turn of a greedy episode of the checkpoint is correct."""
    from davinci.agents.evaluation import eval_profile
    from davinci.llm import Backbone

    prof = eval_profile(profile)
    return correct_with(profile, Backbone.load(ckpt, prof.model, device), problems, work, out)


def sampled_correct(profile: Any, ckpt: Path, problems: list[Any], work: Path, device: str, out: Path, k: int) -> list[float]:
    """Per problem, the share of `k` sampled episodes (agents.temperature, seeded per problem and sample) whose best
    turn is correct: a pass@1 estimate with k draws."""
    from davinci.agents.episode import Episode
    from davinci.agents.evaluation import eval_profile
    from davinci.agents.runner import run_episodes
    from davinci.jsonl import read_jsonl, write_jsonl
    from davinci.kernelgym import evaluate_batch
    from davinci.llm import Backbone, make_backend

    prof = eval_profile(profile)
    path = work / "episodes.jsonl"
    if not path.is_file():  # one file per checkpoint: a rerun of the stage reads it instead of sampling again
        backbone = Backbone.load(ckpt, prof.model, device)
        episodes = run_episodes(problems, (), make_backend(backbone, prof.model), prof, epoch=-1, group_size=k, greedy=False,
                                evaluate_fn=lambda items: evaluate_batch(items, prof.gym))
        work.mkdir(parents=True, exist_ok=True)
        write_jsonl(path, [ep.to_dict() for ep in episodes])
    by_problem: dict[str, list[bool]] = {}
    for ep in (Episode.from_dict(r) for r in read_jsonl(path)):
        best = ep.best_turn()
        by_problem.setdefault(ep.problem_id, []).append(bool(best is not None and best.result is not None and best.result.correct))
    rates = [sum(by_problem.get(p.id, [])) / k for p in problems]
    log(out, f"{work.name}: sampled correctness {sum(rates) / max(len(rates), 1):.3f} ({k} samples per problem)")
    return rates


def correct_with(profile: Any, backbone: Any, problems: list[Any], work: Path, out: Path) -> list[float]:
    """Greedy correctness per problem; the verdicts' breakdown goes to the log, so that an evaluator failing for
    its own reasons shows as errors, not as a model that has not learnt."""
    from davinci.agents.evaluation import eval_profile, problem_record, run_eval
    from davinci.kernelgym import evaluate_batch
    from davinci.llm import make_backend

    prof = eval_profile(profile)
    episodes = run_eval(prof, problems, make_backend(backbone, prof.model), (), lambda items: evaluate_batch(items, prof.gym), work / "episodes.jsonl")
    log(out, f"{work.name}: {verdict_breakdown([episodes.get(p.id) for p in problems])}")
    return [float(problem_record(p, episodes.get(p.id))["correct"]) for p in problems]


def verdict_breakdown(episodes: list[Any]) -> str:
    """'correct 7, mismatch 20, compile 5; e.g. compile: <first error>' over the episodes' best turns."""
    from collections import Counter

    best = [ep.best_turn() if ep is not None else None for ep in episodes]
    results = [t.result if t is not None else None for t in best]
    kinds = Counter("correct" if r is not None and r.correct else (r.error_kind or "wrong") if r is not None else "no_code"
                    for r in results)
    text = ", ".join(f"{k} {n}" for k, n in kinds.most_common())
    failing = [r for r in results if r is not None and not r.correct and r.error]
    if failing:
        text += f"; e.g. {failing[0].error_kind}: {failing[0].error.strip().splitlines()[-1][:200]}"
    return text


def check_evaluator(profile: Any, problems: list[Any], out: Path) -> None:
    """The problems' reference solutions through the same evaluator the demo uses: all must be correct, or the run
    stops here with the evaluator's own error (a broken evaluator would otherwise read as 0% learnt)."""
    from davinci.agents.evaluation import eval_profile
    from davinci.kernelgym import evaluate_batch
    from davinci.types import Candidate

    gym = eval_profile(profile).gym
    items = [(p, Candidate(problem_id=p.id, code=p.reference_solution, backend="triton")) for p in problems if p.reference_solution]
    bad = [(p, r) for (p, _), r in zip(items, evaluate_batch(items, gym)) if not r.correct]
    log(out, f"evaluator check on gym.device={gym.device}: {len(items) - len(bad)}/{len(items)} reference solutions correct")
    if bad:
        p, r = bad[0]
        raise SystemExit(f"the evaluator (gym.device={gym.device}) rejects {len(bad)} of {len(items)} reference solutions, e.g. "
                         f"{p.id}: {r.error_kind}: {r.error.strip()[-600:]} {dict(r.flag_reasons)}. Fix the evaluator's "
                         "environment (or --eval-device) before training: every candidate would fail the same way")


def _ckpt_and_steps(pair: tuple[Path, int]) -> list[Any]:
    """(checkpoint, steps) as JSON: the path as a string."""
    return [str(pair[0]), pair[1]]


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so that a process reading it meanwhile sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class NotHere(Exception):
    """A stage this process was not asked to run has not finished yet (another process runs it)."""


def stage(work: Path, out: Path, name: str, fn: Any, mine: bool = True, wait_s: float = 0.0) -> Any:
    """fn()'s JSON result, computed once: a rerun with the same LEARNING_WORK folder (the next call on a warm
    machine, after a time limit) takes every finished stage from `stage_<name>.json` and goes on from there.
    A stage that is not `mine` (see --stages) waits up to `wait_s` for the process that runs it, then raises
    NotHere."""
    path = work / f"stage_{name}.json"
    deadline = time.monotonic() + (0.0 if mine else wait_s)
    if not mine and not path.exists() and wait_s > 0:
        log(out, f"waiting up to {wait_s:.0f} s for stage {name} (another process runs it)")
    while not mine and not path.exists() and time.monotonic() < deadline:
        time.sleep(5.0)
    if path.exists():
        log(out, f"{name}: done in an earlier run ({path.name})")
        return json.loads(path.read_text())
    if not mine:
        raise NotHere(name)
    t = time.perf_counter()
    result = fn()
    write_atomic(path, json.dumps(result))  # another process may be polling for it
    log(out, f"{name}: {time.perf_counter() - t:.0f} s")
    return result


def same_run(work: Path, args: argparse.Namespace) -> None:
    """Record the arguments in a new work folder; refuse one whose finished stages came from other arguments
    (`--stages` aside: processes sharing the folder run different stages of the same run)."""
    path, now = work / "args.json", json.loads(json.dumps({k: v for k, v in vars(args).items() if k not in ("stages", "wait_s")}))
    if path.exists() and json.loads(path.read_text()) != now:
        raise SystemExit(f"{work} holds the stages of a run with other arguments ({path}): set LEARNING_WORK to a new "
                         "folder, or rerun with the arguments recorded there to resume it")
    write_atomic(path, json.dumps(now, indent=1))


def load_problems(args: argparse.Namespace, work: Path, out: Path) -> list[Any]:
    """The op-chain problems, generated once per work folder (problems.jsonl)."""
    from data_prep import builtin_problems
    from data_prep.synthesis import synthesize_with_report
    from davinci.jsonl import read_jsonl, write_jsonl
    from davinci.types import Problem

    path = work / "problems.jsonl"
    if path.exists():
        return [Problem.from_dict(d) for d in read_jsonl(path)]
    t = time.perf_counter()
    log(out, f"generating {args.synthetic} problems into {path} (each reference runs once on the CPU: ~25 s on two "
             "cores; copy problems.jsonl between work folders to skip it)")
    problems = list(synthesize_with_report(builtin_problems(), args.synthetic, args.seed, verify_solutions=False,
                                           pool=chain_pool(args)).problems)
    write_jsonl(path, [p.to_dict() for p in problems])
    log(out, f"generated {len(problems)} problems in {time.perf_counter() - t:.0f} s")
    return problems


def git_commit(root: Path = Path(__file__).resolve().parents[2]) -> str:
    """The commit of the code that runs. A tree unpacked from `git archive` (the GPU runs' way: the learning tree
    is `.learning_h100b/tree`) has no .git of its own, and git would describe whatever checkout holds it, so a
    `TREE_COMMIT` file at the tree's root, written when it is unpacked, names it. Otherwise the tree's HEAD, with
    "-dirty" when the working tree differs from it (summary.json then says so instead of naming a commit that did
    not run); "unknown" outside git."""
    marker = root / "TREE_COMMIT"
    if marker.is_file():
        return marker.read_text().strip() or "unknown"
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40"], capture_output=True, text=True,
                              check=True, cwd=root).stdout.strip()
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


def run_stages(args: argparse.Namespace, profile: Any, splits: tuple[list[Any], ...], work: Path, out: Path,
               stop: Any, mine: set[str]) -> tuple[Any, ...]:
    """Every stage in order, each computed here only when it is `mine` (else taken from disk, or NotHere)."""
    train, _calib, held, probes = splits
    dev = args.device  # the model's; kernelgym's is profile.gym.device (--eval-device)
    # only the SFT checkpoint and its held-out score are waited for: every arm starts from them; any other missing
    # stage ends this process
    # a "<eval>_sampled" stage belongs to the process that runs its greedy "<eval>" stage
    run = lambda name, fn: stage(work, out, name, fn, name.removesuffix("_sampled") in mine,  # noqa: E731
                                 args.wait_s if name in ("sft", "eval_before", "eval_before_sampled") else 0.0)
    sft_ckpt, sft_steps = run("sft", lambda: _ckpt_and_steps(sft(profile, train, work / "sft", out, None, args.sft_steps, stop, device=dev)))
    sft_ckpt = Path(sft_ckpt)
    k = args.heldout_samples

    def sampled(name: str, ckpt: Path) -> list[float]:  # the sampled score of a checkpoint, beside its greedy one
        return run(f"{name}_sampled", lambda: sampled_correct(profile, ckpt, held, work / f"{name}_sampled", dev, out, k)) if k else []

    before = run("eval_before", lambda: heldout_correct(profile, sft_ckpt, held, work / "eval_before", dev, out))
    sampled_scores = {"before": sampled("eval_before", sft_ckpt)}
    log(out, f"before RL: held-out correct {sum(before)}/{len(held)}")
    if held and not sum(before) and not args.smoke_cpu:
        raise SystemExit(f"the SFT checkpoint solves 0 of {len(held)} held-out problems: nothing for RL or the controls to "
                         f"move (the calibration curve in {out / 'learning_log.txt'} shows how far SFT got). Start a new "
                         "LEARNING_WORK with a lower --sft-lr, a smaller model (--hidden/--layers), fewer --ops or shorter "
                         "--lengths")
    flipped = replace(profile, rl=replace(profile.rl, advantage="trloo_flipped"))
    if "flipped" in mine and "rl" not in mine:  # a process of its own (another GPU): this control and its eval first
        flip_ckpt, _ = run("flipped", lambda: _ckpt_and_steps(rl(flipped, probes, sft_ckpt, work / "flipped", out, args.epochs, dev)))
        run("eval_flipped", lambda: heldout_correct(profile, Path(flip_ckpt), held, work / "eval_flipped", dev, out))
        sampled("eval_flipped", Path(flip_ckpt))
    rl_ckpt, steps = run("rl", lambda: _ckpt_and_steps(rl(profile, probes, sft_ckpt, work / "rl", out, args.epochs, dev)))
    after = run("eval_rl", lambda: heldout_correct(profile, Path(rl_ckpt), held, work / "eval_rl", dev, out))
    sampled_scores["rl"] = sampled("eval_rl", Path(rl_ckpt))
    log(out, f"after RL: held-out correct {sum(after)}/{len(held)}")  # each arm as it ends: a time limit keeps them
    cont_ckpt, _ = run("sft_control", lambda: _ckpt_and_steps(sft(profile, train, work / "sft_control", out, sft_ckpt, max(steps, 1), device=dev)))
    after_sft = run("eval_sft", lambda: heldout_correct(profile, Path(cont_ckpt), held, work / "eval_sft", dev, out))
    sampled_scores["sft"] = sampled("eval_sft", Path(cont_ckpt))
    log(out, f"after continued SFT: held-out correct {sum(after_sft)}/{len(held)}")
    flip_ckpt, _ = run("flipped", lambda: _ckpt_and_steps(rl(flipped, probes, sft_ckpt, work / "flipped", out, args.epochs, dev)))
    after_flip = run("eval_flipped", lambda: heldout_correct(profile, Path(flip_ckpt), held, work / "eval_flipped", dev, out))
    sampled_scores["flipped"] = sampled("eval_flipped", Path(flip_ckpt))
    log(out, f"after flipped RL: held-out correct {sum(after_flip)}/{len(held)}")
    return before, after, after_sft, after_flip, sft_steps, steps, sampled_scores


def sampled_table(scores: dict[str, list[float]], args: argparse.Namespace) -> dict[str, float]:
    """summary.json's sampled fields: each arm's mean, and RL's after - before with its paired bootstrap CI."""
    from davinci.agents.evaluation import paired_bootstrap_ci

    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    diff, lo, hi = paired_bootstrap_ci(scores["before"], scores["rl"], seed=args.seed)
    return {"sampled_k": args.heldout_samples, "sampled_before": mean(scores["before"]), "sampled_after": mean(scores["rl"]),
            "sampled_after_minus_before": diff, "sampled_ci95_low": lo, "sampled_ci95_high": hi,
            "sampled_control_sft": mean(scores["sft"]), "sampled_control_flipped": mean(scores["flipped"])}


def per_problem_rows(held: list[Any], greedy: tuple[list[float], ...], sampled: dict[str, list[float]]) -> list[dict[str, Any]]:
    """per_problem.jsonl: each held-out problem's greedy score per arm, and its sampled ones when asked for."""
    rows = [{"problem_id": p.id, "before": b, "rl": a, "sft": s, "flipped": f} for p, b, a, s, f in zip(held, *greedy)]
    for name, scores in sampled.items():
        for row, x in zip(rows, scores):
            row[f"{name}_sampled"] = x
    return rows


def log_sampled(out: Path, table: dict[str, float]) -> None:
    """One log line of `sampled_table`'s fields."""
    log(out, f"held-out sampled correctness ({table['sampled_k']} per problem): before {table['sampled_before']:.3f}, "
             f"RL {table['sampled_after']:.3f} (95% CI of after-before [{table['sampled_ci95_low']:+.3f}, "
             f"{table['sampled_ci95_high']:+.3f}]), continued SFT {table['sampled_control_sft']:.3f}, "
             f"flipped {table['sampled_control_flipped']:.3f}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from davinci.agents.evaluation import paired_bootstrap_ci
    from davinci.jsonl import write_jsonl

    args = parse_args(argv)
    out = Path(os.environ.get("OUT", "benchmarks/results/h100/learning"))
    out.mkdir(parents=True, exist_ok=True)
    # checkpoints, episodes and finished stages outside $OUT ($LEARNING_WORK, else a temporary folder): run_suite.sh
    # packs every job's $OUT into one archive that must stay under 16 MiB to come back, and checkpoints are larger
    work = Path(os.environ.get("LEARNING_WORK") or tempfile.mkdtemp(prefix="learning_demo_"))
    work.mkdir(parents=True, exist_ok=True)
    profile = build_profile(args)  # a bad --set fails before the work folder records these arguments
    same_run(work, args)
    register_flipped()
    log(out, f"work folder (checkpoints, episodes, finished stages): {work}")
    train, held = split(load_problems(args, work, out), args.heldout_every, args.heldout_max, args.split)
    train, calib = split(train, args.heldout_every, args.calib_n, args.split, salt="calibration") if args.calib_n else (train, [])
    train, rl_pool = sft_and_rl_pools(train, args.sft_n)
    probes = probe_sets(rl_pool, args.probe, args.epochs, args.probe_sets)
    distinct = len({p.id for ps in probes for p in ps})
    log(out, f"{len(train)} SFT, {len(rl_pool)} RL pool ({'shared' if rl_pool is train else 'disjoint'}), "
             f"{len(calib)} calibration, {len(held)} held out (split by {args.split}), probe "
             f"{args.probe} per epoch ({args.probe_sets}: {distinct} distinct)")
    stop = calibration_stop(profile, calib, work / "calibration", out, args.calib_check, args.calib_target,
                            args.calib_patience) if calib else None
    mine = set(args.stages.split(",")) - {""} or set(STAGES)
    if mine - set(STAGES):
        raise SystemExit(f"--stages {args.stages}: unknown {sorted(mine - set(STAGES))}; stages: {', '.join(STAGES)}")
    check_evaluator(profile, (calib or held)[:4], out)
    try:
        results = run_stages(args, profile, (train, calib, held, probes), work, out, stop, mine)
    except NotHere as waiting:  # another process runs it; this one has done its part
        log(out, f"stage {waiting} is not this process's (--stages {args.stages}) and has not finished: stopping here")
        for f in work.glob("stage_*.json"):  # finished stages come back with $OUT (small: per-problem lists)
            (out / f.name).write_text(f.read_text())
        return {}
    before, after, after_sft, after_flip, sft_steps, steps, sampled_scores = results
    diff, lo, hi = paired_bootstrap_ci(before, after, seed=args.seed)
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    sampled_summary = sampled_table(sampled_scores, args) if args.heldout_samples else {}
    if sampled_summary:
        log_sampled(out, sampled_summary)
    summary = {
        "heldout_n": len(held), "before": mean(before), "after": mean(after), "after_minus_before": diff,
        "ci95_low": lo, "ci95_high": hi, "control_sft_after": mean(after_sft), "control_flipped_after": mean(after_flip),
        "rl_optimizer_steps": steps, "sft_steps": sft_steps, "train_n": len(train), "rl_pool_n": len(rl_pool),
        "sft_n": args.sft_n, "rl_lr": profile.rl.lr, "sft_lr": profile.sft.lr, "calibration_n": len(calib),
        "probe_n": args.probe, "probe_sets": args.probe_sets, "probe_distinct": distinct, "epochs": args.epochs,
        "device": device_name(args.device), "eval_device": device_name(args.eval_device), "commit": git_commit(), "wall_s": time.perf_counter() - T0, "args": vars(args),
        **sampled_summary,
    }  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    write_jsonl(out / "per_problem.jsonl", per_problem_rows(held, (before, after, after_sft, after_flip), sampled_scores))
    try:
        plot(out / "learning.png", summary)
    except ImportError as exc:  # matplotlib is not on every GPU machine: summary.json holds the numbers
        log(out, f"no plot: {exc}")
    log(out, f"held-out correct: before {summary['before']:.3f}, RL {summary['after']:.3f} (after-before {diff:+.3f}, 95% CI "
             f"[{lo:+.3f}, {hi:+.3f}]), continued SFT {summary['control_sft_after']:.3f}, flipped {summary['control_flipped_after']:.3f}")  # fmt: skip
    return summary


if __name__ == "__main__":
    main()
