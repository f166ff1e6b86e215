"""Tasks on the skill library: start it from the seed skills, update it from rollouts (admit, use, retire)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from prefect import task

from davinci.kernelgym.config import GymConfig
from davinci.skills.config import SkillsConfig
from tasks.caching import cache_key_fn
from tasks.common import load_problems, section

SCOPES = ("davinci/skills", "davinci/kernelgym", "davinci/rl/library.py", "davinci/rl/credit.py", "davinci/types.py")


@task(name="init-library", retries=1, retry_delay_seconds=2)
def init_library(store_root: str, seed: bool) -> int:
    """The root library version: the seed skills (or an empty library). Idempotent: same content, same version."""
    from davinci.skills import SkillStore, seed_skills

    store = SkillStore(Path(store_root))
    return store.commit(seed_skills() if seed else [], parent=None, note="seed library" if seed else "empty library").version


@task(name="update-library", retries=1, retry_delay_seconds=5, cache_key_fn=cache_key_fn(SCOPES), persist_result=True)
def update_library_task(store_root: str, version: int, candidates_paths: Sequence[str], rollouts_paths: Sequence[str],
                        problems_path: str, gym_cfg: dict[str, Any], skills_cfg: dict[str, Any], out_dir: str,
                        retire_skills: bool, note: str) -> dict[str, Any]:
    """Verify candidate skills by execution, update usage, retire; returns the new version and decision files."""
    from davinci.rl.library import update_library

    update = update_library(
        store_root, version, candidates_paths, rollouts_paths, load_problems(problems_path),
        section(GymConfig, gym_cfg, "gym"), section(SkillsConfig, skills_cfg, "skills"), out_dir,
        retire_skills=retire_skills, note=note, progress=True,
    )
    return update.to_dict()


def library_rows(store_root: str, version: int) -> list[dict[str, Any]]:
    from davinci.skills import SkillStore, to_rows

    return to_rows(SkillStore(Path(store_root)).load(version))
