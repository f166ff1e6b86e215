"""Task of the sft stage: create (tiny) or load (hf) the backbone and fine-tune it on the role-tagged examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import task

from artifacts.refs import StageOutputs
from davinci.llm.config import ModelConfig, SFTConfig
from tasks.caching import cache_key_fn, work_dir
from tasks.common import load_problems, read_jsonl, section, task_logger
from tasks.plots import line_plot

SCOPES = ("davinci/llm", "davinci/config", "davinci/types.py")


def _tokenizer_corpus(data_dir: Path, examples: list[Any]) -> list[str]:
    """Texts the tiny tokenizer is trained on: problems, solutions and every SFT message."""
    corpus: list[str] = []
    for split in ("train", "eval"):
        path = data_dir / "problems" / f"{split}.jsonl"
        if path.exists():
            for p in load_problems(path):
                corpus.append(p.code)
                if p.reference_solution and split == "train":
                    corpus.append(p.reference_solution)
    corpus.extend(m["content"] for ex in examples for m in ex.messages)
    return corpus


@task(name="sft-train", retries=1, retry_delay_seconds=5, cache_key_fn=cache_key_fn(SCOPES), persist_result=True)
def sft_train(data_dir: str, examples_file: str, model_cfg: dict[str, Any], sft_cfg: dict[str, Any], seed: int,
              run_ref: dict[str, str] | None = None) -> dict[str, Any]:
    """Fine-tune the backbone; the checkpoint folder is the stage's product."""
    from davinci.llm import Backbone, create_tiny_backbone, train_sft
    from davinci.llm.types import ChatExample

    params = {"data_dir": data_dir, "examples_file": examples_file, "model_cfg": model_cfg, "sft_cfg": sft_cfg, "seed": seed}
    out = work_dir("sft-train", params, SCOPES)
    (out / "metrics.jsonl").unlink(missing_ok=True)  # SFT restarts from scratch on a retry
    mcfg, scfg = section(ModelConfig, model_cfg, "model"), section(SFTConfig, sft_cfg, "sft")
    examples = [ChatExample(agent=d["agent"], messages=tuple(d["messages"]), problem_id=d.get("problem_id", ""))
                for d in read_jsonl(examples_file)]
    if mcfg.kind == "tiny":
        backbone = create_tiny_backbone(_tokenizer_corpus(Path(data_dir), examples), mcfg, seed)
    else:
        backbone = Backbone.load(mcfg.name_or_path, mcfg)
    stats = train_sft(backbone, examples, scfg, task_logger(run_ref, out / "metrics.jsonl"))
    backbone.save(out / "checkpoint")
    line_plot(out / "sft_loss.png", {"loss": list(enumerate(stats.losses))}, "SFT loss", "step", "loss")
    summary = {k: v for k, v in stats.__dict__.items() if k != "losses"}
    (out / "sft_stats.json").write_text(json.dumps(summary, indent=2))
    files = {"checkpoint": "checkpoint", "metrics": "metrics.jsonl", "loss_plot": "sft_loss.png", "stats": "sft_stats.json"}
    return StageOutputs("sft", str(out), files, summary).write().to_dict()
