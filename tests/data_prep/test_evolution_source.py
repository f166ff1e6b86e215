"""Evolution revisions as a data source: edit-level dedup (hand-checked), decontamination against eval problems,
and the data stage with `sources: [builtin, evolution]` (SFT examples, start states, drops in the report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.builtin import builtin_problems
from data_prep.evolution import dedup_revisions, edit_signature
from data_prep.stage import START_STATES_FILE, run_data_stage
from davinci.config.data import DataConfig
from davinci.errors import ConfigError
from davinci.evolve.archive import ArchiveEntry
from davinci.evolve.revisions import Revision, write_revisions

BUILTIN = {p.id: p for p in builtin_problems()}


def _rev(pid: str, old: int, new: int, low: float = 1.2) -> Revision:
    code = BUILTIN[pid].reference_solution
    parent = ArchiveEntry(f"p{old}", code.replace("BLOCK_SIZE = 1024", f"BLOCK_SIZE = {old}"), 0, correct=True,
                          speedup=1.0, ci_low=0.9, ci_high=1.1, feedback="correct; speedup 1.0")
    child = ArchiveEntry(f"c{new}", code.replace("BLOCK_SIZE = 1024", f"BLOCK_SIZE = {new}"), 1, (parent.code_hash,),
                         "mutation", True, low + 0.1, low, low + 0.2)
    return Revision(BUILTIN[pid], parent, child)


def test_edit_signature_and_dedup() -> None:
    assert edit_signature("a\nx = 1\n", "a\nx = 2\n") == frozenset({"-x = 1", "+x = 2"})
    same_edit_weaker = _rev("builtin/relu", 256, 512, low=1.15)
    revs = [_rev("builtin/relu", 256, 512), _rev("builtin/relu", 512, 1024), same_edit_weaker, _rev("builtin/swish", 256, 512)]
    kept, drops = dedup_revisions(revs, threshold=0.9)
    assert kept == [revs[0], revs[1], revs[3]]  # the weaker copy of 256 -> 512 on relu goes; swish's is another problem
    assert [(d.stage, d.reason, d.problem_id) for d in drops] == [("diversity", "near-duplicate", "builtin/relu")]


def test_data_stage_takes_evolution_revisions(tmp_path: Path, sft_doubles) -> None:
    # relu is a training problem; gelu_tanh is held out for eval, so its revision must be dropped
    write_revisions(tmp_path / "revisions.jsonl", [_rev("builtin/relu", 256, 512), _rev("builtin/relu", 256, 512, 1.15),
                                                   _rev("builtin/gelu_tanh", 256, 512)])
    cfg = DataConfig(sources=("builtin", "evolution"), evolution_revisions=(str(tmp_path / "revisions.jsonl"),))
    out = run_data_stage(cfg, tmp_path / "out", seed=0, **sft_doubles.kwargs())
    assert out.counts["sft_evolution"] == 1
    states = [json.loads(line) for line in (tmp_path / "out" / START_STATES_FILE).read_text().splitlines()]
    assert [s["problem_id"] for s in states] == ["builtin/relu"] and "BLOCK_SIZE = 256" in states[0]["code"]
    examples = [json.loads(line) for line in out.sft_path.read_text().splitlines()]
    assert any("BLOCK_SIZE = 512" in e["messages"][-1]["content"] for e in examples if e["problem_id"] == "builtin/relu")
    report = json.loads(out.report_path.read_text())
    reasons = {(d["problem_id"], d["stage"]) for d in report["drops"]}
    assert ("builtin/gelu_tanh", "decontamination") in reasons and ("builtin/relu", "diversity") in reasons
    assert report["evolution"] == {"revisions_loaded": 3, "examples": 1, "dropped": 2}


def test_evolution_source_needs_files(tmp_path: Path, sft_doubles) -> None:
    with pytest.raises(ConfigError, match="evolution_revisions"):
        run_data_stage(DataConfig(sources=("builtin", "evolution")), tmp_path, seed=0, **sft_doubles.kwargs())


def test_input_files_digest_follows_file_content(tmp_path: Path) -> None:
    from tasks.data import input_files_digest

    path = tmp_path / "revisions.jsonl"
    write_revisions(path, [_rev("builtin/relu", 256, 512)])
    cfg = DataConfig(sources=("builtin", "evolution"), evolution_revisions=(str(path),))
    first = input_files_digest(cfg)
    write_revisions(path, [_rev("builtin/relu", 256, 1024)])
    assert input_files_digest(cfg) != first and input_files_digest(DataConfig()) == ""
