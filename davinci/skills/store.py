"""The versioned skill store: immutable numbered library versions on disk, written atomically.

Layout under `root`:
    versions/v000001/manifest.json   version, parent, note, created_at, content_hash, counts
    versions/v000001/library.json    [Skill.to_dict(), ...] sorted by id
    versions/v000001/library.md      human-readable export (also library.html)
    .tmp-<uuid>/                     a commit in progress (never read; removed by the next commit)

Choices:
- A version is written into a fresh temp folder, every file fsynced, the folder fsynced, then the folder
  is renamed to `versions/vNNNNNN` in one `rename` (atomic on POSIX) and `versions/` is fsynced. A crash
  at any point leaves either no new version or a complete one; a leftover temp folder is invisible.
- Versions are never modified. A version folder whose manifest is missing is not a version.
- `commit` of the same skills on the same parent returns the existing version (the content hash covers
  the skills and the parent, not the note), so a retried pipeline task does not fork the history.
- Two processes committing at once: the loser of the rename race takes the next number.
- `load` re-checks the content hash and raises `MalformedInput` when a version was tampered with.
- Each version folder is what the lead logs as the MLflow artifact (`version_dir`).

    store = SkillStore(".davinci/skills")
    v1 = store.commit(seed_skills(), parent=None, note="seed")
    lib = store.load("latest")
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Sequence

from davinci.errors import InputNotFound, MalformedInput
from davinci.skills.schema import Skill

_VERSION_DIR = re.compile(r"^v(\d{6})$")
_TMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class LibraryVersion:
    """One immutable library version: its number, parent, note and skills (any status)."""

    version: int
    parent: int | None
    note: str
    created_at: str
    content_hash: str
    skills: tuple[Skill, ...]

    def get(self, skill_id: str) -> Skill | None:
        return next((s for s in self.skills if s.id == skill_id), None)

    def ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.skills)

    def with_status(self, *statuses: str) -> tuple[Skill, ...]:
        return tuple(s for s in self.skills if s.status in statuses)

    def admitted(self) -> tuple[Skill, ...]:
        return self.with_status("admitted")


def content_hash(skills: Sequence[Skill], parent: int | None) -> str:
    payload = json.dumps({"parent": parent, "skills": [s.to_dict() for s in _sorted(skills)]}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _sorted(skills: Iterable[Skill]) -> list[Skill]:
    return sorted(skills, key=lambda s: s.id)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


class SkillStore:
    """Numbered, immutable library versions under `root` (created on first commit)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.versions_dir = self.root / "versions"

    # --- reading ---------------------------------------------------------------------------

    def versions(self) -> list[int]:
        """Complete versions, ascending."""
        if not self.versions_dir.is_dir():
            return []
        found = []
        for child in self.versions_dir.iterdir():
            match = _VERSION_DIR.match(child.name)
            if match and (child / "manifest.json").is_file():
                found.append(int(match.group(1)))
        return sorted(found)

    def version_dir(self, version: int) -> Path:
        return self.versions_dir / f"v{version:06d}"

    def resolve(self, version: int | str) -> int:
        """`"latest"`, `3`, `"3"` or `"v3"` -> a version number that exists."""
        have = self.versions()
        if version == "latest":
            if not have:
                raise InputNotFound(f"the skill store {self.root} has no library version yet", "commit one first (the pipeline commits the seed library as version 1)")
            return have[-1]
        text = str(version).lstrip("v")
        if not text.isdigit() or int(text) not in have:
            raise InputNotFound(f"library version {version!r} does not exist in {self.root}", f"use 'latest' or one of: {', '.join(map(str, have)) or '(none)'}")
        return int(text)

    def load(self, version: int | str = "latest") -> LibraryVersion:
        number = self.resolve(version)
        folder = self.version_dir(number)
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
            records = json.loads((folder / "library.json").read_text())
        except (OSError, ValueError) as exc:
            raise MalformedInput(f"library version {number} in {folder} is unreadable: {exc}", "restore the folder from its MLflow artifact") from None
        skills = tuple(Skill.from_dict(r) for r in records)
        if content_hash(skills, manifest.get("parent")) != manifest.get("content_hash"):
            raise MalformedInput(f"library version {number} in {folder} does not match its content hash", "the folder was edited by hand; restore it from its MLflow artifact")
        return LibraryVersion(number, manifest.get("parent"), manifest.get("note", ""), manifest.get("created_at", ""), manifest["content_hash"], skills)

    def find(self, parent: int | None, digest: str) -> LibraryVersion | None:
        """An existing version with this parent and content hash (the idempotent-commit lookup)."""
        for number in reversed(self.versions()):
            manifest = json.loads((self.version_dir(number) / "manifest.json").read_text())
            if manifest.get("parent") == parent and manifest.get("content_hash") == digest:
                return self.load(number)
        return None

    # --- writing ---------------------------------------------------------------------------

    def commit(self, skills: Sequence[Skill], parent: int | None, note: str = "", *, on_file_written: Callable[[Path], None] | None = None) -> LibraryVersion:
        """Write `skills` as a new version on `parent` (None = a root version); idempotent on content.

        `on_file_written(path)` is called after each file is durably written (progress reporting; the
        crash tests use it to die between two file writes).
        """
        _check_unique(skills)
        if parent is not None:
            self.resolve(parent)
        digest = content_hash(skills, parent)
        existing = self.find(parent, digest)
        if existing is not None:
            return existing
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        self._remove_stale_temps()
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        tmp = self.root / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            self._write_files(tmp, skills, parent, note, created, digest, on_file_written)
            number = self._publish(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return LibraryVersion(number, parent, note, created, digest, tuple(_sorted(skills)))

    def _write_files(self, tmp: Path, skills: Sequence[Skill], parent: int | None, note: str, created: str, digest: str, hook: Callable[[Path], None] | None) -> None:
        from davinci.skills.export import render_html, render_markdown

        ordered = _sorted(skills)
        counts = {status: sum(1 for s in ordered if s.status == status) for status in ("candidate", "admitted", "retired")}
        # The version number is only known at publish time; exports name the content hash instead.
        preview = LibraryVersion(0, parent, note, created, digest, tuple(ordered))
        files = [
            ("library.json", json.dumps([s.to_dict() for s in ordered], indent=1)),
            ("library.md", render_markdown(preview)),
            ("library.html", render_html(preview)),
            ("manifest.json", json.dumps({"parent": parent, "note": note, "created_at": created, "content_hash": digest, "counts": counts, "n_skills": len(ordered)}, indent=1)),
        ]
        for name, text in files:
            _write_durable(tmp / name, text)
            if hook is not None:
                hook(tmp / name)
        _fsync_dir(tmp)

    def _publish(self, tmp: Path) -> int:
        """Rename the finished temp folder to the next free version number; returns that number."""
        for _ in range(1000):
            number = (self.versions() or [0])[-1] + 1
            while self.version_dir(number).exists():  # a half-visible folder without manifest is skipped
                number += 1
            try:
                os.rename(tmp, self.version_dir(number))
            except OSError:
                continue  # another committer took this number between our check and the rename
            _fsync_dir(self.versions_dir)
            return number
        raise MalformedInput(f"could not publish a version under {self.versions_dir}", "check the folder's permissions")

    def _remove_stale_temps(self) -> None:
        """Delete temp folders of commits that crashed (older than 10 minutes, so live ones survive)."""
        for child in self.root.glob(f"{_TMP_PREFIX}*"):
            try:
                if time.time() - child.stat().st_mtime > 600:
                    shutil.rmtree(child, ignore_errors=True)
            except OSError:
                continue

    # --- exports ---------------------------------------------------------------------------

    def export_markdown(self, version: int | str, path: str | Path) -> Path:
        from davinci.skills.export import export_markdown

        return export_markdown(self.load(version), path)

    def to_rows(self, version: int | str) -> list[dict]:
        from davinci.skills.export import to_rows

        return to_rows(self.load(version))


def _check_unique(skills: Sequence[Skill]) -> None:
    seen: set[str] = set()
    dupes = sorted({s.id for s in skills if s.id in seen or seen.add(s.id)})  # type: ignore[func-returns-value]
    if dupes:
        raise MalformedInput(f"skill ids repeat in one version: {', '.join(dupes)}", "give each skill a unique id (merge near-duplicates first)")
