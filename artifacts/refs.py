"""Typed references to what a stage produced: a folder, named files in it, and a small summary.

A stage writes `outputs.json` into its folder and its MLflow child run logs the folder under `outputs/`
plus `outputs.json` at the artifact root, with the tag `outputs_dir`. A later stage (in the same pipeline
or in a rerun with `--from RUN_ID`) gets a `StageOutputs` back: from the local folder when it still exists
and matches, otherwise downloaded from the run's artifacts.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from davinci.errors import InputNotFound, MalformedInput

MANIFEST = "outputs.json"


@dataclass(frozen=True)
class StageOutputs:
    stage: str
    dir: str
    files: dict[str, str] = field(default_factory=dict)  # logical name -> path relative to `dir`
    summary: dict[str, Any] = field(default_factory=dict)  # small JSON values: counts, versions, metrics

    def path(self, name: str) -> Path:
        if name not in self.files:
            raise InputNotFound(
                f"the {self.stage} stage outputs have no {name!r} (have: {', '.join(sorted(self.files))})",
                f"rerun the {self.stage} stage",
            )
        return Path(self.dir) / self.files[name]

    def exists(self) -> bool:
        return all((Path(self.dir) / rel).exists() for rel in self.files.values()) and (Path(self.dir) / MANIFEST).exists()

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "dir": self.dir, "files": dict(self.files), "summary": dict(self.summary)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StageOutputs":
        try:
            return cls(stage=d["stage"], dir=d["dir"], files=dict(d["files"]), summary=dict(d.get("summary", {})))
        except (KeyError, TypeError) as exc:
            raise MalformedInput(f"stage outputs manifest is malformed ({exc})", "rerun the stage that wrote it") from None

    def write(self) -> "StageOutputs":
        Path(self.dir).mkdir(parents=True, exist_ok=True)
        tmp = Path(self.dir) / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True))
        tmp.replace(Path(self.dir) / MANIFEST)
        return self

    def rebased(self, new_dir: Path) -> "StageOutputs":
        return StageOutputs(self.stage, str(new_dir), self.files, self.summary)

    @classmethod
    def read(cls, folder: Path) -> "StageOutputs":
        path = folder / MANIFEST
        if not path.exists():
            raise InputNotFound(f"no {MANIFEST} in {folder}", "rerun the stage that writes this folder")
        return cls.from_dict(json.loads(path.read_text()))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
