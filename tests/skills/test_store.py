"""The versioned store: immutable versions, idempotent commits, and crash safety mid-write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from davinci.errors import InputNotFound, MalformedInput
from davinci.skills.export import render_markdown, to_rows
from davinci.skills.store import SkillStore

REPO = Path(__file__).resolve().parents[2]


def test_commit_load_and_version_numbers(tmp_path, skill_factory):
    store = SkillStore(tmp_path / "lib")
    assert store.versions() == []
    v1 = store.commit([skill_factory("skill-b"), skill_factory("skill-a")], parent=None, note="seed")
    v2 = store.commit([skill_factory("skill-a")], parent=1, note="drop b")
    assert (v1.version, v2.version) == (1, 2) and store.versions() == [1, 2]
    assert store.load("latest") == v2 and store.load(1) == v1 and store.load("v1") == v1 and store.load("1") == v1
    assert v1.ids() == ("skill-a", "skill-b")  # stored sorted by id
    assert (store.version_dir(1) / "library.md").read_text().startswith("# Skill library")
    assert json.loads((store.version_dir(2) / "manifest.json").read_text())["parent"] == 1


def test_identical_commit_on_same_parent_is_idempotent(tmp_path, skill_factory):
    store = SkillStore(tmp_path)
    v1 = store.commit([skill_factory("skill-a")], parent=None, note="first")
    again = store.commit([skill_factory("skill-a")], parent=None, note="retry with another note")
    assert again == v1 and store.versions() == [1]
    # Same content on a different parent is a new version; different content too.
    v2 = store.commit([skill_factory("skill-a")], parent=1)
    v3 = store.commit([skill_factory("skill-a", title="Another title for the same id")], parent=1)
    assert (v2.version, v3.version) == (2, 3)


def test_bad_input_names_the_fix(tmp_path, skill_factory):
    store = SkillStore(tmp_path)
    with pytest.raises(InputNotFound, match="no library version yet"):
        store.load()
    store.commit([skill_factory("skill-a")], parent=None)
    with pytest.raises(InputNotFound, match="use 'latest' or one of: 1"):
        store.load(7)
    with pytest.raises(InputNotFound):
        store.commit([skill_factory("skill-a")], parent=9)
    with pytest.raises(MalformedInput, match="repeat"):
        store.commit([skill_factory("skill-a"), skill_factory("skill-a")], parent=1)


def test_tampered_version_is_detected(tmp_path, skill_factory):
    store = SkillStore(tmp_path)
    store.commit([skill_factory("skill-a")], parent=None)
    path = store.version_dir(1) / "library.json"
    records = json.loads(path.read_text())
    records[0]["title"] = "edited by hand"
    path.write_text(json.dumps(records))
    with pytest.raises(MalformedInput, match="content hash"):
        store.load(1)


def test_injected_failure_between_file_writes_leaves_no_half_version(tmp_path, skill_factory):
    store = SkillStore(tmp_path)
    v1 = store.commit([skill_factory("skill-a")], parent=None)
    written: list[str] = []

    def fail_after_second_file(path: Path) -> None:
        written.append(path.name)
        if len(written) == 2:
            raise OSError("disk full (injected)")

    with pytest.raises(OSError, match="injected"):
        store.commit([skill_factory("skill-a"), skill_factory("skill-b")], parent=1, on_file_written=fail_after_second_file)
    assert written == ["library.json", "library.md"]
    assert store.versions() == [1] and store.load("latest") == v1
    assert not list(tmp_path.glob(".tmp-*"))  # the failed commit cleaned up its temp folder
    v2 = store.commit([skill_factory("skill-a"), skill_factory("skill-b")], parent=1)
    assert v2.version == 2


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from conftest import make_skill
    from davinci.skills.store import SkillStore

    def die(path):
        if path.name == {die_after!r}:
            os.kill(os.getpid(), signal.SIGKILL)   # a crash: no cleanup, no exception handlers

    SkillStore({root!r}).commit([make_skill("skill-a"), make_skill("skill-c")], parent=1, on_file_written=die)
    """
)


@pytest.mark.parametrize("die_after", ["library.json", "library.html", "manifest.json"])
def test_killed_process_mid_commit_leaves_previous_version_loadable(tmp_path, skill_factory, die_after):
    store = SkillStore(tmp_path)
    v1 = store.commit([skill_factory("skill-a")], parent=None, note="before the crash")
    code = CHILD.format(tests=str(Path(__file__).parent), die_after=die_after, root=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr  # it really died by SIGKILL mid-commit
    assert list(tmp_path.glob(".tmp-*"))  # the half-written version is there, in its temp folder...
    assert store.versions() == [1]  # ...but invisible
    assert store.load("latest") == v1
    # The next commit works and the stale temp folder (once old) is swept away.
    for stale in tmp_path.glob(".tmp-*"):
        os.utime(stale, (0, 0))
    v2 = store.commit([skill_factory("skill-a"), skill_factory("skill-c")], parent=1)
    assert v2.version == 2 and store.load(2).ids() == ("skill-a", "skill-c")
    assert not list(tmp_path.glob(".tmp-*"))


def test_exports_render_every_skill(tmp_path, skill_factory):
    store = SkillStore(tmp_path)
    lib = store.commit([skill_factory("skill-a"), replace(skill_factory("skill-b"), status="admitted")], parent=None, note="n")
    md = render_markdown(lib)
    assert "## Fuse add and relu" in md and "`skill-b` | admitted" in md
    rows = to_rows(lib)
    assert [r["id"] for r in rows] == ["skill-a", "skill-b"]
    assert all(isinstance(v, (str, int, float, type(None))) for r in rows for v in r.values())
    html = (store.version_dir(1) / "library.html").read_text()
    assert html.startswith("<!doctype html>") and "<script" not in html
    out = store.export_markdown(1, tmp_path / "out" / "lib.md")
    assert out.read_text() == md
