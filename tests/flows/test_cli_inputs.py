"""Every bad input of the first hour gives one `error:` line with its fix and exit 2 (issue 16), through the
real console entry point in a subprocess against an empty project home. Also: a closed pipe ends quietly,
a busy UI port is an error, Ctrl-C on `ui` does not talk about resuming.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAVINCI_HOME": str(home)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, env=env,
                          timeout=180, cwd=ROOT)


def assert_one_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr
    assert "Traceback" not in err + proc.stdout
    assert sum(line.startswith("error:") for line in err.splitlines()) == 1, err
    assert "fix:" in err, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("override, message", [
    ("rl.epochs=-1", "rl.epochs = -1 is out of range: it must be >= 0"),
    ("agents.group_size=0", "agents.group_size = 0 is out of range: it must be >= 1"),
    ("agents.turns=0", "agents.turns = 0 is out of range: it must be >= 1"),
    ("agents.temperature=-3", "agents.temperature = -3.0 is out of range: it must be > 0"),
])
def test_out_of_range_profile_values(tmp_path: Path, override: str, message: str) -> None:
    proc = cli(tmp_path, "run", "--set", override)
    assert_one_error(proc, message)
    assert not (tmp_path / ".davinci" / "work").exists(), "work started before the profile was checked"


def test_runs_limit_must_be_positive(tmp_path: Path) -> None:
    assert_one_error(cli(tmp_path, "runs", "--limit", "-1"), "argument --limit", ">= 1")


def test_eval_timeout_must_be_positive(tmp_path: Path) -> None:
    problem, candidate = tmp_path / "p.py", tmp_path / "c.py"
    problem.write_text("x = 1\n")
    candidate.write_text("x = 1\n")
    proc = cli(tmp_path, "eval", "--problem", str(problem), "--candidate", str(candidate), "--timeout", "-1")
    assert_one_error(proc, "argument --timeout", "> 0")


def test_serve_bad_cron_fails_before_any_server(tmp_path: Path) -> None:
    proc = cli(tmp_path, "serve", "--cron", "bad")
    assert_one_error(proc, "--cron 'bad' is not a valid cron expression", '"0 3 * * *"')
    assert "Prefect server on" not in proc.stdout and "ValidationError" not in proc.stderr


def test_non_utf8_profile(tmp_path: Path) -> None:
    profile = tmp_path / "latin.yaml"
    profile.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert_one_error(cli(tmp_path, "config", "--profile", str(profile)), "is not UTF-8", "save the file as UTF-8")


def test_skills_list_into_closed_pipe_is_quiet(tmp_path: Path) -> None:
    from davinci.skills import SkillStore, seed_skills

    SkillStore(tmp_path / ".davinci" / "skills").commit(seed_skills(), parent=None, note="seed library")
    env = {**os.environ, "DAVINCI_HOME": str(tmp_path)}
    # `true` has exited long before the CLI writes its first line: every write hits a closed pipe.
    shell = f"{sys.executable} -m flows.cli skills list | true"
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
    assert "BrokenPipeError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "error:" not in proc.stderr
    assert not (tmp_path / ".davinci" / "logs" / "last-error.log").exists()


def test_ui_on_a_busy_port_fails_clearly(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = cli(tmp_path, "ui", "--port", str(port))
    assert_one_error(proc, f"port {port} on 127.0.0.1 is already in use", f"--port {port + 1}")
    assert "MLflow UI on" not in proc.stdout


def _healthy(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_ctrl_c_on_ui_stops_without_resume_advice(tmp_path: Path) -> None:
    env = {**os.environ, "DAVINCI_HOME": str(tmp_path)}
    env.pop("MLFLOW_TRACKING_URI", None)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "ui", "--port", str(port)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    first = proc.stdout.readline()
    assert f"http://127.0.0.1:{port}" in first, first
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _healthy(port):
        time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "resume" not in out + err and "Traceback" not in err, out + err
    assert "stopped" in out + err
