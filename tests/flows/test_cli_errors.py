"""Bad input to `davinci-kernel` ends with one clear message and a non-zero exit, never a traceback.

Each case runs the real console entry point in a subprocess against an empty project home.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAVINCI_HOME": str(tmp_path)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, env=env,
                          timeout=180, cwd=Path(__file__).resolve().parents[2])


def assert_clean_failure(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_unknown_profile_key(tmp_path: Path) -> None:
    proc = cli(tmp_path, "run", "--set", "rl.epochz=1")
    assert_clean_failure(proc, "error: unknown key 'rl.epochz'", "fix: valid keys in rl")
    assert proc.returncode == 2


def test_unknown_profile(tmp_path: Path) -> None:
    proc = cli(tmp_path, "run", "--profile", "nosuch")
    assert_clean_failure(proc, "error: unknown profile 'nosuch'", "tiny")


def test_bad_override_value(tmp_path: Path) -> None:
    proc = cli(tmp_path, "run", "--set", "rl.epochs=lots")
    assert_clean_failure(proc, "rl.epochs = 'lots' is not an integer")


def test_unknown_stage(tmp_path: Path) -> None:
    proc = cli(tmp_path, "stage", "train", "--from", "abc")
    assert_clean_failure(proc, "invalid choice: 'train'")
    assert proc.returncode == 2


def test_run_id_that_does_not_exist(tmp_path: Path) -> None:
    proc = cli(tmp_path, "stage", "eval", "--from", "0123456789abcdef0123456789abcdef")
    assert_clean_failure(proc, "error: no MLflow run with id", "fix:")
    assert proc.returncode == 2


def test_missing_problem_file(tmp_path: Path) -> None:
    candidate = tmp_path / "c.py"
    candidate.write_text("class ModelNew: pass\n")
    proc = cli(tmp_path, "eval", "--problem", str(tmp_path / "missing.py"), "--candidate", str(candidate), "--json")
    assert_clean_failure(proc, "error:", "missing.py")
    assert proc.returncode == 2


def test_skills_show_unknown_id(tmp_path: Path) -> None:
    proc = cli(tmp_path, "skills", "show", "no-such-skill")
    assert_clean_failure(proc, "error:")


@pytest.mark.parametrize("args", [["run", "--set", "norequals"], ["config", "--set", "gym.device=tpu"]])
def test_malformed_overrides(tmp_path: Path, args: list[str]) -> None:
    assert_clean_failure(cli(tmp_path, *args), "error:", "fix:")


@pytest.fixture
def restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    yield
    for s, h in saved.items():
        signal.signal(s, h)
    sys.unraisablehook = hook


def test_interrupt_dropped_by_a_finalizer_is_delivered_again(restore_signals, capsys):
    from flows.cli import install_interrupt_handler

    class Finalizer:
        def __del__(self) -> None:
            raise KeyboardInterrupt  # what a Ctrl-C during garbage collection looks like

    install_interrupt_handler(grace_s=60)
    with pytest.raises(KeyboardInterrupt):
        Finalizer()  # dropped at once: Python can only hand the exception to sys.unraisablehook
        time.sleep(5)  # the re-delivered interrupt is raised here, in ordinary code
    assert "Traceback" not in capsys.readouterr().err
