"""Stage `skills`: verify the last epoch's candidate skills by execution, retire harmful ones, new version.

Admission reruns each candidate's example in fresh processes on unseen seeds and shapes and on other
problems it was used on; only a reproducible effect (correct everywhere, speedup CI lower bound above
`skills.min_speedup_lower`) is admitted. Logged: the verification report (a table of every decision with
its evidence), the new library version (a table, markdown, HTML, and the version folder itself).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from prefect import flow

from artifacts.refs import StageOutputs
from davinci.config import config_hash, to_dict
from flows.context import log_stage_outputs, stage_run
from flows.stages.common import StageEnv
from tasks.skills import library_rows, update_library_task


@flow(name="stage-skills")
def skills_flow(profile: str = "tiny", overrides: Sequence[str] = (), parent_run_id: str = "",
                upstream: dict[str, Any] | None = None, force: bool = False,
                rerun: bool = False) -> dict[str, Any]:
    env = StageEnv.open("skills", profile, overrides, parent_run_id)
    inputs = env.inputs(upstream, ("data", "rl"))
    data, rl = inputs["data"], inputs["rl"]
    version = int(rl.summary["library_version"])
    cfg = {"gym": to_dict(env.profile.gym), "skills": to_dict(env.profile.skills)}
    folder = env.stage_dir({"rl": rl.dir, "version": version, "cfg": config_hash(cfg)}, fresh=force)
    with stage_run(env.store, parent_run_id, "skills", env.profile, rerun=rerun) as run_id:
        call = update_library_task.with_options(refresh_cache=True) if force else update_library_task
        update = call(
            store_root=env.skill_store, version=version,
            candidates_paths=[str(rl.path("candidates"))] if "candidates" in rl.files else [],
            rollouts_paths=[str(rl.path("rollouts"))] if "rollouts" in rl.files else [],
            problems_path=str(data.path("train")), gym_cfg=cfg["gym"], skills_cfg=cfg["skills"],
            out_dir=str(folder), retire_skills=True, note="skills stage",
        )
        outputs = _export(env, run_id, folder, update)
        log_stage_outputs(env.store, run_id, outputs)
    env.say(f"library v{version} -> v{update['version']}: admitted {update['admitted']}, rejected {update['rejected']}, "
            f"merged {update['merged']}, pending {update['pending']}, retired {update['retired']}")
    return outputs.to_dict()


def _export(env: StageEnv, run_id: str, folder: Path, update: dict[str, Any]) -> StageOutputs:
    from davinci.skills import SkillStore, export_html, export_markdown

    store = SkillStore(Path(env.skill_store))
    library = store.load(update["version"])
    export_markdown(library, folder / "library.md")
    export_html(library, folder / "library.html")
    report = json.loads(Path(update["report_path"]).read_text())
    decisions = [{"skill_id": d["skill_id"], "outcome": d["outcome"], "pending": d["pending"],
                  "reasons": " | ".join(d["reasons"])[:500]} for d in report["decisions"]]
    if decisions:
        env.store.log_table(run_id, decisions, "verification/decisions.json")
    env.store.log_table(run_id, library_rows(env.skill_store, library.version), f"library/v{library.version}.json")
    env.store.log_artifact(run_id, store.version_dir(library.version), f"library/v{library.version}")
    env.store.log_metrics(run_id, {k: float(update[k]) for k in ("version", "admitted", "rejected", "merged", "pending", "retired")}, step=0)
    rel = lambda p: str(Path(p).resolve().relative_to(folder.resolve()))  # noqa: E731
    files = {"report": rel(update["report_path"]), "admissions": rel(update["admissions_path"]),
             "library_md": "library.md", "library_html": "library.html"}
    summary = {"library_version": int(library.version), **{k: update[k] for k in ("admitted", "rejected", "merged", "pending", "retired")}}
    return StageOutputs("skills", str(folder), files, summary).write()
