"""The data stage: problem sources -> eval split -> synthesis -> decontamination -> diversity -> SFT examples.

What it does (`run_data_stage(cfg, out_dir, seed)`), writing under `out_dir`:
    problems/train.jsonl, problems/eval.jsonl   one `Problem.to_dict()` per line
    sft/examples.jsonl                           one role-tagged example per line (agent, problem_id, messages)
    report/filter_report.json                    counts per source and stage, synthesis, diversity clusters, drops
    report/filter_table.csv, report/filter_report.md   every drop: stage, problem, reason, matched id, score
    evolution/start_states.jsonl                 RL start states from evolution revisions (only with that source)
    manifest.json                                every file with sha256, bytes and record count; the counts

Choices:
- Eval split (`cfg.eval_source`): `builtin_heldout` = the held-out built-in problems (`cfg.eval_ids`, else the
  suite's default list), training on the rest of the sources; `kernelbench` = the configured KernelBench
  levels, training on built-in + synthetic problems; `synthetic_heldout` = `cfg.synthetic_heldout` op-chain
  problems synthesized in the same draw as the training ones (`synthetic_count`, ops and lengths from
  `cfg.synthetic_ops` / `cfg.synthetic_lengths`) and held out by operator signature: synthesis never keeps
  two chains with one signature, and the held-out ones are those whose signature hashes lowest
  (`split_by_signature`), so the split does not depend on the draw order. Training on KernelBench while
  evaluating on it is refused. Decontamination of train against eval always runs (at threshold 1.0 it drops
  exact copies and same-signature problems only, which is what a signature split of one template needs).
- Evolution revisions (`data.sources` with `evolution`, files in `data.evolution_revisions`) add policy SFT
  examples and RL start states, decontaminated against the eval problems and diversity-filtered by their
  edits (`data_prep.evolution`).
- Synthetic problems avoid the signatures of every built-in and eval problem before they are validated.
- KernelBench files are only parsed (`ast`), never run, so all 250 files take seconds here.
- Deterministic: same config and seed give byte-identical files (no timestamps in the outputs).

    from data_prep.stage import run_data_stage
    outputs = run_data_stage(profile.data, Path("runs/x/data"), seed=profile.seed)
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from data_prep.builtin import builtin_problems, default_heldout_ids
from data_prep.decontam import decontaminate
from data_prep.diversity import diversity_filter
from data_prep.evolution import EvolutionData, evolution_source
from data_prep.kernelbench import load_kernelbench, load_kernelbench_hf
from data_prep.records import DropRecord
from data_prep.sft import ExampleFn, Retriever, build_sft_examples, example_to_dict, load_trajectories
from data_prep.source_ast import operator_signature
from data_prep.synthesis import ChainPool, SynthesisResult, synthesize_with_report
from davinci.config.data import DataConfig
from davinci.config.loader import to_dict
from davinci.errors import ConfigError, DavinciError
from davinci.llm.types import ChatExample
from davinci.types import Problem

TRAIN_FILE = "problems/train.jsonl"
EVAL_FILE = "problems/eval.jsonl"
SFT_FILE = "sft/examples.jsonl"
REPORT_FILE = "report/filter_report.json"
TABLE_CSV = "report/filter_table.csv"
TABLE_MD = "report/filter_report.md"
MANIFEST_FILE = "manifest.json"
START_STATES_FILE = "evolution/start_states.jsonl"


@dataclass(frozen=True)
class DataStageOutputs:
    out_dir: Path
    train_path: Path
    eval_path: Path
    sft_path: Path
    report_path: Path
    table_csv_path: Path
    table_md_path: Path
    manifest_path: Path
    counts: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


def _kernelbench(cfg: DataConfig) -> list[Problem]:
    if cfg.kernelbench_hf:
        return load_kernelbench_hf(cfg.kernelbench_levels, cfg.kernelbench_limit)
    return load_kernelbench(cfg.kernelbench_path, cfg.kernelbench_levels, cfg.kernelbench_limit)


def _check_config(cfg: DataConfig) -> None:
    if not cfg.sources:
        raise ConfigError("data.sources is empty", "list at least one of: builtin, synthetic, kernelbench")
    if cfg.eval_source == "kernelbench" and "kernelbench" in cfg.sources:
        raise ConfigError(
            "data.sources includes kernelbench while data.eval_source is kernelbench (training on the eval set)",
            "drop kernelbench from data.sources, or set data.eval_source=builtin_heldout",
        )
    if "evolution" in cfg.sources and not cfg.evolution_revisions:
        raise ConfigError("data.sources includes evolution but data.evolution_revisions is empty",
                          "set data.evolution_revisions=[path/to/revisions.jsonl] (printed by `davinci-kernel evolve`)")
    if cfg.eval_ids and cfg.eval_source != "builtin_heldout":
        raise ConfigError("data.eval_ids only applies to data.eval_source=builtin_heldout", "clear data.eval_ids")
    if cfg.eval_source == "synthetic_heldout" and cfg.synthetic_heldout < 1:
        raise ConfigError("data.eval_source=synthetic_heldout holds out no problems", "set data.synthetic_heldout >= 1")
    try:
        chain_pool(cfg)
    except ValueError as exc:
        raise ConfigError(f"data.synthetic_ops / data.synthetic_lengths: {exc}", "use op names of data_prep.synthesis_ops.OPS") from None


def chain_pool(cfg: DataConfig) -> ChainPool:
    """The op-chain family the config asks for (the generator's default mix where a field is empty)."""
    return ChainPool(ops=tuple(cfg.synthetic_ops), lengths=tuple(cfg.synthetic_lengths) or ChainPool().lengths)


def split_by_signature(problems: Sequence[Problem], k: int) -> tuple[list[Problem], list[Problem]]:
    """(held out, rest): the `k` problems whose operator multiset (signature, sorted) has the lowest crc32.

    Synthesized problems have distinct signatures, so this holds out whole signatures; sorting first keeps a
    chain and its reverse together (decontamination counts them as one task: signature similarity 1.0). The
    choice depends on the signatures only, never on the order they were drawn in; ties go by id."""
    def key(p: Problem) -> tuple[int, str]:
        return zlib.crc32(" ".join(sorted(operator_signature(p.code))).encode()), p.id

    held = {p.id for p in sorted(problems, key=key)[:k]}
    return [p for p in problems if p.id in held], [p for p in problems if p.id not in held]


def split_eval(cfg: DataConfig, builtin: Sequence[Problem]) -> tuple[list[Problem], list[Problem]]:
    """(eval problems, built-in problems left for training)."""
    if cfg.eval_source == "kernelbench":
        return _kernelbench(cfg), list(builtin)
    ids = tuple(cfg.eval_ids) or default_heldout_ids()
    known = {p.id for p in builtin}
    unknown = sorted(set(ids) - known)
    if unknown:
        raise ConfigError(f"data.eval_ids has unknown problems {unknown}",
                          f"use built-in ids: {', '.join(sorted(known))}")
    chosen = set(ids)
    return [p for p in builtin if p.id in chosen], [p for p in builtin if p.id not in chosen]


def _synthesize(cfg: DataConfig, seed: int, avoid: Sequence[Problem], progress: bool) -> SynthesisResult | None:
    """Training chains (when `synthetic` is a source) and held-out chains (synthetic_heldout), in one draw."""
    n = (cfg.synthetic_count if "synthetic" in cfg.sources else 0) + _heldout_count(cfg)
    if n == 0:
        return None
    return synthesize_with_report(avoid, n, seed, verify_solutions=cfg.synthetic_verify, progress=progress,
                                  pool=chain_pool(cfg))


def _heldout_count(cfg: DataConfig) -> int:
    return cfg.synthetic_heldout if cfg.eval_source == "synthetic_heldout" else 0


def _splits(
    cfg: DataConfig, seed: int, builtin: list[Problem], progress: bool
) -> tuple[list[Problem], list[Problem], list[Problem], SynthesisResult | None]:
    """(eval problems, built-in problems left for training, synthetic training problems, synthesis result)."""
    if cfg.eval_source == "synthetic_heldout":
        synth = _synthesize(cfg, seed, builtin, progress)
        held, rest = split_by_signature(synth.problems if synth else (), cfg.synthetic_heldout)
        return held, builtin, rest, synth
    eval_problems, builtin_train = split_eval(cfg, builtin)
    synth = _synthesize(cfg, seed, [*builtin_train, *eval_problems], progress)
    return eval_problems, builtin_train, list(synth.problems) if synth else [], synth


def _candidates(cfg: DataConfig, builtin_train: list[Problem], synthetic_train: list[Problem]) -> list[Problem]:
    train: list[Problem] = []
    for source in dict.fromkeys(cfg.sources):
        if source == "builtin":
            train.extend(builtin_train)
        elif source == "kernelbench":
            train.extend(_kernelbench(cfg))
        elif source == "synthetic":
            train.extend(synthetic_train)
    return train


def _sft(
    cfg: DataConfig, train: list[Problem], eval_ids: set[str], seed: int, sft_kwargs: dict[str, Any]
) -> tuple[list[ChatExample], list[DropRecord], int]:
    examples = build_sft_examples(train, sft_kwargs.pop("skills", None), seed, **sft_kwargs)
    drops: list[DropRecord] = []
    n_traj = 0
    if cfg.sft_trajectories:
        loaded = load_trajectories(cfg.sft_trajectories)
        drops.extend(loaded.errors)
        for number, example in enumerate(loaded.examples):
            if example.problem_id in eval_ids:
                drops.append(DropRecord("sft", example.problem_id, "bad-trajectory",
                                        f"trajectory {number} trains on eval problem {example.problem_id}",
                                        example.problem_id, 1.0))
            else:
                examples.append(example)
                n_traj += 1
    return examples, drops, n_traj


def run_data_stage(
    cfg: DataConfig,
    out_dir: Path,
    seed: int,
    *,
    select_k: int = 3,
    bm25_top_k: int = 8,
    skills: Sequence[Any] | None = None,
    example_fn: ExampleFn | None = None,
    retriever_factory: Callable[[Sequence[Any]], Retriever] | None = None,
    progress: bool = False,
) -> DataStageOutputs:
    """Run the whole data stage into `out_dir` (see module docstring). `select_k`/`bm25_top_k` should be the
    profile's `skills.select_k`/`skills.bm25_top_k` so SFT prompts show as many skills as RL prompts do."""
    _check_config(cfg)
    eval_problems, builtin_train, synthetic_train, synth = _splits(cfg, seed, builtin_problems(), progress)
    if not eval_problems:
        raise DavinciError("no eval problems (synthesis kept none to hold out)",
                           "widen data.synthetic_ops / data.synthetic_lengths or lower data.synthetic_heldout")
    candidates = _candidates(cfg, builtin_train, synthetic_train)
    kept, decontam_drops = decontaminate(candidates, eval_problems, cfg.decontam_threshold, progress=progress)
    train, diversity_drops, diversity_report = diversity_filter(kept, cfg.dedup_threshold, cfg.cluster_cap, seed)
    if not train:
        raise DavinciError(
            f"no training problems left ({len(candidates)} candidates, {len(decontam_drops)} decontaminated, "
            f"{len(diversity_drops)} removed by the diversity filter)",
            "add sources (data.sources, data.synthetic_count) or raise data.decontam_threshold",
        )
    sft_kwargs = dict(skills=skills, select_k=select_k, bm25_top_k=bm25_top_k, example_fn=example_fn,
                      retriever_factory=retriever_factory)
    examples, sft_drops, n_traj = _sft(cfg, train, {p.id for p in eval_problems}, seed, sft_kwargs)
    evo = _evolution(cfg, eval_problems)
    examples.extend(evo.examples)
    drops = [*(synth.dropped if synth else ()), *decontam_drops, *diversity_drops, *sft_drops, *evo.drops]
    counts = {**_counts(candidates, kept, train, eval_problems, examples, n_traj, drops), "sft_evolution": len(evo.examples)}
    report = {
        "seed": seed,
        "eval": {"source": cfg.eval_source, "ids": [p.id for p in eval_problems]},
        "counts": counts,
        "per_source": _per_source(candidates, kept, train),
        "synthesis": _synthesis_summary(cfg, synth),
        "decontamination": {"threshold": cfg.decontam_threshold, "dropped": len(decontam_drops)},
        "diversity": diversity_report.to_dict(),
        "sft": {"problems_with_solution": sum(bool(p.reference_solution) for p in train),
                "problems_without_solution": sum(not p.reference_solution for p in train),
                "examples": len(examples), "trajectories": n_traj},
        "evolution": {"revisions_loaded": evo.loaded, "examples": len(evo.examples), "dropped": len(evo.drops)},
        "drops": [d.to_dict() for d in drops],
    }
    out = _write_outputs(Path(out_dir), cfg, seed, train, eval_problems, examples, drops, report, counts,
                         evo.start_states if "evolution" in cfg.sources else None)
    return out


def _evolution(cfg: DataConfig, eval_problems: list[Problem]) -> EvolutionData:
    if "evolution" not in cfg.sources:
        return EvolutionData([], [], [], 0)
    return evolution_source(cfg.evolution_revisions, eval_problems, cfg.decontam_threshold, cfg.dedup_threshold)


def _per_source(candidates: list[Problem], kept: list[Problem], train: list[Problem]) -> dict[str, dict[str, int]]:
    stages = {"candidates": candidates, "after_decontamination": kept, "train": train}
    sources = sorted({p.source for p in candidates})
    return {s: {name: sum(p.source == s for p in items) for name, items in stages.items()} for s in sources}


def _synthesis_summary(cfg: DataConfig, synth: SynthesisResult | None) -> dict[str, int]:
    if synth is None:
        return {"requested": 0, "kept": 0, "dropped": 0, "attempts": 0}
    return {"requested": (cfg.synthetic_count if "synthetic" in cfg.sources else 0) + _heldout_count(cfg),
            "kept": len(synth.problems), "dropped": len(synth.dropped), "attempts": synth.attempts,
            "held_out": min(_heldout_count(cfg), len(synth.problems))}


def _counts(candidates, kept, train, eval_problems, examples, n_traj, drops) -> dict[str, int]:  # noqa: ANN001
    by_agent = Counter(e.agent for e in examples)
    by_stage = Counter(d.stage for d in drops)
    return {
        "candidates": len(candidates),
        "after_decontamination": len(kept),
        "train": len(train),
        "eval": len(eval_problems),
        "sft_examples": len(examples),
        "sft_selection": by_agent.get("selection", 0),
        "sft_policy": by_agent.get("policy", 0),
        "sft_summary": by_agent.get("summary", 0),
        "sft_trajectories": n_traj,
        **{f"dropped_{s}": by_stage.get(s, 0) for s in ("synthesis", "decontamination", "diversity", "sft")},
    }


# ------------------------------------------------------------------------------------------------ writing


def _jsonl(rows: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows)


def _table_csv(drops: Sequence[DropRecord]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["stage", "problem_id", "reason", "matched_id", "score", "detail"])
    for d in drops:
        writer.writerow([d.stage, d.problem_id, d.reason, d.matched_id, f"{d.score:.4f}", d.detail])
    return buf.getvalue()


def _table_md(report: dict[str, Any], drops: Sequence[DropRecord]) -> str:
    lines = ["# Data stage filter report", "", "## Problems per source", "",
             "| source | candidates | after decontamination | train |", "|---|---|---|---|"]
    for source, c in report["per_source"].items():
        lines.append(f"| {source} | {c['candidates']} | {c['after_decontamination']} | {c['train']} |")
    lines += ["", f"Eval ({report['eval']['source']}): {len(report['eval']['ids'])} problems.", "",
              "## Drops", "", "| stage | problem | reason | matched | score | detail |", "|---|---|---|---|---|---|"]
    for d in drops:
        detail = d.detail.replace("|", "\\|")
        lines.append(f"| {d.stage} | {d.problem_id} | {d.reason} | {d.matched_id} | {d.score:.2f} | {detail} |")
    if not drops:
        lines.append("| - | - | - | - | - | nothing dropped |")
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _write_outputs(  # noqa: ANN001 - internal, the arguments are run_data_stage's locals
    out_dir, cfg, seed, train, eval_problems, examples, drops, report, counts, start_states=None
) -> DataStageOutputs:
    contents = {
        TRAIN_FILE: (_jsonl([p.to_dict() for p in train]), len(train)),
        EVAL_FILE: (_jsonl([p.to_dict() for p in eval_problems]), len(eval_problems)),
        SFT_FILE: (_jsonl([example_to_dict(e) for e in examples]), len(examples)),
        REPORT_FILE: (json.dumps(report, indent=2, sort_keys=True) + "\n", len(drops)),
        TABLE_CSV: (_table_csv(drops), len(drops)),
        TABLE_MD: (_table_md(report, drops), len(drops)),
    }
    if start_states is not None:
        contents[START_STATES_FILE] = (_jsonl(start_states), len(start_states))
    files = []
    for rel, (text, records) in contents.items():
        _write(out_dir / rel, text)
        blob = text.encode()
        files.append({"path": rel, "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob), "records": records})
    manifest = {"stage": "data", "seed": seed, "config": to_dict(cfg), "files": files, "counts": counts}
    _write(out_dir / MANIFEST_FILE, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return DataStageOutputs(
        out_dir=out_dir,
        train_path=out_dir / TRAIN_FILE,
        eval_path=out_dir / EVAL_FILE,
        sft_path=out_dir / SFT_FILE,
        report_path=out_dir / REPORT_FILE,
        table_csv_path=out_dir / TABLE_CSV,
        table_md_path=out_dir / TABLE_MD,
        manifest_path=out_dir / MANIFEST_FILE,
        counts=counts,
    )


def read_problems(path: Path) -> list[Problem]:
    """Problems from a `problems/*.jsonl` file the stage wrote (for later stages)."""
    return [Problem.from_dict(json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]


__all__ = ["run_data_stage", "DataStageOutputs", "split_eval", "split_by_signature", "chain_pool", "read_problems"]
