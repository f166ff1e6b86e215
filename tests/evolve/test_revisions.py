"""Which revisions are kept (beyond the CI noise), their SFT example and start state, and the file round trip."""

from __future__ import annotations

import pytest

from davinci.errors import InputNotFound, MalformedInput
from davinci.evolve.archive import ArchiveEntry
from davinci.evolve.revisions import (Revision, is_kept_revision, kept_revisions, read_revisions, revision_example,
                                      start_state, write_revisions)
from davinci.types import Problem

PROBLEM = Problem("builtin/relu", "builtin", 1, "relu", "class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n")


def _e(h: str, low: float | None, high: float | None, parents: tuple[str, ...] = (), correct: bool = True) -> ArchiveEntry:
    mid = None if low is None or high is None else (low + high) / 2
    return ArchiveEntry(h, f"# program {h}", 1, parents, "mutation", correct, mid, low, high, feedback=f"feedback of {h}")


def test_kept_only_beyond_the_noise() -> None:
    parent = _e("p", 0.9, 1.1)
    assert is_kept_revision(parent, _e("c", 1.2, 1.4))          # 1.2 > 1.1
    assert not is_kept_revision(parent, _e("c", 1.05, 1.5))     # CIs overlap: within the noise
    assert not is_kept_revision(parent, _e("c", 1.1, 1.3))      # strict >
    assert not is_kept_revision(parent, _e("c", 1.2, 1.4), min_gain=1.2)   # 1.2 > 1.32 fails
    assert not is_kept_revision(parent, _e("c", 2.0, 2.2, correct=False))
    assert not is_kept_revision(_e("p", None, None), _e("c", 2.0, 2.2))    # untimed parent


def test_kept_revisions_follow_first_parent() -> None:
    entries = [_e("a", 1.0, 1.1), _e("b", 1.3, 1.4, ("a",)), _e("c", 1.0, 1.2, ("b",)), _e("d", 2.0, 2.1, ("zz",))]
    kept = kept_revisions(PROBLEM, entries)
    assert [(r.parent.code_hash, r.child.code_hash) for r in kept] == [("a", "b")]
    assert kept[0].gain == pytest.approx(1.3 / 1.1)


def test_example_and_start_state_and_round_trip(tmp_path) -> None:
    rev = Revision(PROBLEM, _e("a", 1.0, 1.1), _e("b", 1.3, 1.4, ("a",)))
    ex = revision_example(rev)
    assert ex.agent == "policy" and ex.problem_id == PROBLEM.id
    assert ex.messages[-1]["role"] == "assistant" and "# program b" in ex.messages[-1]["content"]
    assert any("# program a" in m["content"] for m in ex.messages[:-1])        # the parent is the earlier attempt
    assert any("feedback of a" in m["content"] for m in ex.messages[:-1])
    assert start_state(rev)["code"] == "# program a"
    write_revisions(tmp_path / "r.jsonl", [rev])
    assert read_revisions(tmp_path / "r.jsonl") == [rev]


def test_bad_revision_files_name_the_fix(tmp_path) -> None:
    with pytest.raises(InputNotFound, match="davinci-kernel evolve"):
        read_revisions(tmp_path / "missing.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"problem": {}}\n')
    with pytest.raises(MalformedInput, match="bad.jsonl:1"):
        read_revisions(tmp_path / "bad.jsonl")
