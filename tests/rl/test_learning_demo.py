"""The learning demonstration's CPU version (`benchmarks/gpu/learning_demo.py --smoke-cpu`, ~70 s on 2 cores): the
tiny profile's op-chain family held out by signature, every arm on the engine's code, and `summary.json` with the
keys the issue asks for. SFT solves part of the held-out chains here (measured before = 0.75, 6/8), so `before`
is checked to be non-zero; the sign of after - before is not asserted: the smoke RL (2 epochs, 4 probe problems
the SFT model already solves) has no reward variance to learn from, and every arm measured 0.75 (difference
+0.000, CI [0, 0]); the sign needs the GPU run."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from pathlib import Path

import pytest

from davinci.jsonl import read_jsonl

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "learning_demo.py"
KEYS = {"heldout_n", "before", "after", "ci95_low", "ci95_high", "control_sft_after", "control_flipped_after", "device", "commit"}


@pytest.mark.slow
def test_demo_smoke_writes_the_summary(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("learning_demo", SCRIPT)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # type: ignore[union-attr]
    monkeypatch.setenv("OUT", str(tmp_path))
    summary = demo.main(["--smoke-cpu", "--heldout-samples", "2"])
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert KEYS <= set(on_disk) and on_disk["heldout_n"] == summary["heldout_n"] > 0
    # the sampled scores (2 draws per problem) ride beside the greedy ones: shares in {0, 0.5, 1} per problem
    assert all(0.0 <= on_disk[k] <= 1.0 for k in ("sampled_before", "sampled_after", "sampled_control_sft", "sampled_control_flipped"))
    assert on_disk["sampled_ci95_low"] <= on_disk["sampled_after_minus_before"] <= on_disk["sampled_ci95_high"]
    assert all(0.0 <= on_disk[k] <= 1.0 for k in ("before", "after", "control_sft_after", "control_flipped_after"))
    assert on_disk["before"] > 0.0  # the SFT checkpoint solves some held-out chains: the comparison can move
    assert on_disk["ci95_low"] <= on_disk["after"] - on_disk["before"] <= on_disk["ci95_high"]
    rows = read_jsonl(tmp_path / "per_problem.jsonl")
    assert len(rows) == on_disk["heldout_n"] and (tmp_path / "learning.png").exists()
    assert all(r["rl_sampled"] in (0.0, 0.5, 1.0) for r in rows)


@pytest.mark.slow
def test_demo_resumes_from_its_finished_stages(tmp_path, monkeypatch):
    """Calibrated SFT (a 4-problem calibration split, checked every 200 steps) stops before the 800-step cap; a
    process given some stages (--stages, as on separate GPUs) runs those and stops; a run on the same work folder
    takes every finished stage from disk, a rerun writes the same summary; other arguments on that folder are
    refused."""
    spec = importlib.util.spec_from_file_location("learning_demo_resume", SCRIPT)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # type: ignore[union-attr]
    monkeypatch.setenv("LEARNING_WORK", str(tmp_path / "work"))
    argv = ["--smoke-cpu", "--calib-n", "4", "--calib-check", "200", "--calib-target", "0.25"]
    monkeypatch.setenv("OUT", str(tmp_path / "part"))  # one process's share (--stages): it stops at the first other stage
    assert demo.main([*argv, "--stages", "sft,eval_before,flipped,eval_flipped"]) == {}
    assert {f.name for f in (tmp_path / "part").glob("stage_*.json")} == {
        "stage_sft.json", "stage_eval_before.json", "stage_flipped.json", "stage_eval_flipped.json"}
    monkeypatch.setenv("OUT", str(tmp_path / "wait"))  # a process waiting for another's SFT finds it and goes on
    (tmp_path / "work" / "stage_flipped.json").rename(tmp_path / "flipped.json")
    (tmp_path / "work" / "stage_eval_flipped.json").unlink()
    moved = {"sft": tmp_path / "work" / "stage_sft.json"}
    moved["sft"].rename(tmp_path / "sft.json")
    def restore_once_waiting() -> None:  # the SFT stage appears only after the process has started waiting for it
        log = tmp_path / "wait" / "learning_log.txt"
        while not (log.exists() and "waiting up to" in log.read_text()):
            time.sleep(0.05)
        (tmp_path / "sft.json").rename(moved["sft"])

    threading.Thread(target=restore_once_waiting, daemon=True).start()
    assert demo.main([*argv, "--stages", "flipped", "--wait-s", "60"]) == {}
    assert "waiting up to 60 s for stage sft" in (tmp_path / "wait" / "learning_log.txt").read_text()
    assert (tmp_path / "work" / "stage_flipped.json").exists()  # it ran its own stage after the wait
    monkeypatch.setenv("OUT", str(tmp_path / "a"))
    first = demo.main(argv)
    assert first["calibration_n"] == 4 and 0 < first["sft_steps"] < 800
    monkeypatch.setenv("OUT", str(tmp_path / "b"))
    second = demo.main(argv)
    assert {k: v for k, v in second.items() if k != "wall_s"} == {k: v for k, v in first.items() if k != "wall_s"}
    assert "done in an earlier run" in (tmp_path / "b" / "learning_log.txt").read_text()
    with pytest.raises(SystemExit, match="other arguments"):
        demo.main([*argv, "--seed", "1"])


def test_probe_sets_fixed_and_per_epoch():
    """Hand-computed: 'fixed' repeats the first slice; 'per-epoch' gives consecutive slices, wrapping around."""
    spec = importlib.util.spec_from_file_location("learning_demo_probes", SCRIPT)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # type: ignore[union-attr]
    train = list("abcdefg")
    assert demo.probe_sets(train, 3, 2, "fixed") == [["a", "b", "c"], ["a", "b", "c"]]
    assert demo.probe_sets(train, 3, 3, "per-epoch") == [["a", "b", "c"], ["d", "e", "f"], ["g", "a", "b"]]
    assert demo.probe_sets(train[:2], 3, 1, "per-epoch") == [["a", "b"]]  # never more than the training problems


def test_sft_and_rl_pools_are_disjoint_or_shared():
    """Hand-computed: --sft-n N gives SFT the first N problems and RL the rest; 0 shares all; N too large says so."""
    spec = importlib.util.spec_from_file_location("learning_demo_pools", SCRIPT)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # type: ignore[union-attr]
    train = list("abcde")
    assert demo.sft_and_rl_pools(train, 2) == (["a", "b"], ["c", "d", "e"])
    assert demo.sft_and_rl_pools(train, 0) == (train, train)
    with pytest.raises(SystemExit, match="--sft-n 5 leaves no problem for RL"):
        demo.sft_and_rl_pools(train, 5)


def test_sampled_table_hand_computed():
    """Hand-computed: two problems, before (0, 0.5), RL (0.5, 1): every resample of pairs differs by 0.5."""
    import argparse

    spec = importlib.util.spec_from_file_location("learning_demo_sampled", SCRIPT)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # type: ignore[union-attr]
    args = argparse.Namespace(heldout_samples=2, seed=0)
    got = demo.sampled_table({"before": [0.0, 0.5], "rl": [0.5, 1.0], "sft": [0.0, 0.0], "flipped": [1.0, 0.0]}, args)
    assert got == {"sampled_k": 2, "sampled_before": 0.25, "sampled_after": 0.75, "sampled_after_minus_before": 0.5,
                   "sampled_ci95_low": 0.5, "sampled_ci95_high": 0.5, "sampled_control_sft": 0.0, "sampled_control_flipped": 0.5}


def _demo_module():
    spec = importlib.util.spec_from_file_location("learning_demo_plateau", SCRIPT)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # type: ignore[union-attr]
    return demo


@pytest.mark.parametrize("rates, patience, stops", [
    # the H100 run's calibration curve (steps 100-500): still rising at its last check, then two checks below 0.531
    ([0.0, 0.0, 0.406, 0.531, 0.5], 2, False),
    ([0.0, 0.0, 0.406, 0.531, 0.5, 0.52], 2, True),
    # the 300-held-out run's curve: rising at step 500, where the fixed length stopped it
    ([0.0, 0.0, 0.0, 0.062, 0.094], 2, False),
    ([0.0, 0.0, 0.0, 0.0], 2, False),              # nothing solved yet: the format is still being learnt
    ([0.3, 0.3, 0.3], 2, True),                    # flat above 0: no gain over the first check
    ([0.3, 0.2, 0.1, 0.4], 2, False),              # a new best inside the window
    ([0.5, 0.5, 0.5, 0.5], 0, False),              # patience 0: the plateau stop is off
])
def test_plateau_stop_from_hand_made_calibration_curves(rates, patience, stops):
    assert _demo_module().plateaued(rates, patience) is stops


def test_calibration_stop_ends_sft_at_the_plateau(tmp_path, monkeypatch):
    """The stop `sft` calls: checked every 100 steps, it ends SFT at the second check without gain (patience 2),
    not at the target (1.01: never reached), and logs why. The calibration scores are scripted (a stand-in for
    the evaluator: this tests the stop rule, not the scoring)."""
    demo = _demo_module()
    scripted = iter([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]])
    monkeypatch.setattr(demo, "correct_with", lambda *a, **k: next(scripted))

    class Backbone:
        class model:
            @staticmethod
            def eval():
                return None

    stop = demo.calibration_stop(None, ["p"] * 4, tmp_path, tmp_path, every=100, target=1.01, patience=2)
    assert [stop(s, Backbone) for s in (50, 100, 200, 300, 350)] == [False, False, False, False, False]
    assert stop(400, Backbone) is True  # 0.5 at step 200 is the best; 300 and 400 brought nothing above it
    assert "plateau: stop" in (tmp_path / "learning_log.txt").read_text()


def test_summary_commit_names_the_tree_that_ran(tmp_path, monkeypatch):
    """summary.json's `commit`: an archived tree's TREE_COMMIT, not the HEAD of the checkout around it; a tree in
    git its own HEAD, "-dirty" once edited; "unknown" with neither."""
    import subprocess

    demo = _demo_module()
    repo = tmp_path / "checkout"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert demo.git_commit(repo) == head
    (repo / "a.py").write_text("x = 2\n")
    assert demo.git_commit(repo) == head + "-dirty"
    tree = repo / "tree"  # an archived tree inside the checkout: git alone would name the checkout
    tree.mkdir()
    (tree / "TREE_COMMIT").write_text("cb20d3a\n")
    assert demo.git_commit(tree) == "cb20d3a"
    outside = tmp_path / "plain"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git may not look above tmp_path for a .git
    assert demo.git_commit(outside) == "unknown"


def test_pooled_table_reads_runs_and_refuses_a_folder_without_results(tmp_path, capsys):
    """benchmarks/learning_pool.py over two hand-made runs: run a's 2 problems gained 1 under RL, run b's 2 none,
    so the pooled RL - before is 0.5 with no spread; a folder without per_problem.jsonl is one clear error."""
    spec = importlib.util.spec_from_file_location("learning_pool", SCRIPT.parents[1] / "learning_pool.py")
    pool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pool)  # type: ignore[union-attr]
    cols = ["before", "rl", "sft"]
    for run, gain in (("a", 1.0), ("b", 0.0)):
        (tmp_path / run).mkdir()
        rows = [{**{c + s: 0.0 for c in cols for s in ("", "_sampled")}, "rl": gain, "problem_id": f"{run}{i}"}
                for i in range(2)]
        (tmp_path / run / "per_problem.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pool.main([str(tmp_path / "a"), str(tmp_path / "b")])
    first = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("RL - before") and "greedy" in line)
    assert first.split()[-3:] == ["+0.500", "[+0.500,", "+0.500]"]
    with pytest.raises(SystemExit, match="per_problem.jsonl does not exist"):
        pool.main([str(tmp_path / "missing")])
