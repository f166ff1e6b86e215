"""`davinci-kernel eval` (eval_command): one JSON object with the verdict, exit 0 whatever the verdict,
user errors as InputNotFound / MalformedInput with their fix."""

from __future__ import annotations

import json

import pytest

from davinci.errors import InputNotFound, MalformedInput
from davinci.kernelgym import close_shared
from davinci.kernelgym.cli import eval_command

FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def cfg(tmp_path_factory, make_config):
    yield make_config(tmp_path_factory.mktemp("kg-cli"), measure_performance=False)
    close_shared()


def test_json_verdict_for_a_good_and_a_bad_candidate(cfg, capsys):
    prob = str(FIXTURES / "problems" / "relu.py")
    assert eval_command(prob, str(FIXTURES / "candidates" / "honest_relu.py"), "cpu", 10.0, True, config=cfg) == 0
    good = json.loads(capsys.readouterr().out)
    assert {"compiled", "correct", "flags", "error", "runtime", "speedup", "feedback"} <= set(good)
    assert good["correct"] is True and good["flags"] == []
    assert eval_command(prob, str(FIXTURES / "candidates" / "cheat_decoy_kernel.py"), "cpu", 10.0, True, config=cfg) == 0
    bad = json.loads(capsys.readouterr().out)
    assert bad["correct"] is False and "decoy_kernel" in bad["flags"]


def test_human_output(cfg, capsys):
    prob = str(FIXTURES / "problems" / "relu.py")
    assert eval_command(prob, str(FIXTURES / "candidates" / "fail_syntax.py"), "cpu", 10.0, False, config=cfg) == 0
    out = capsys.readouterr().out
    assert "not correct (compile)" in out and "verdict: compile error" in out


def test_user_errors_raise_with_a_fix(tmp_path, cfg):
    with pytest.raises(InputNotFound):
        eval_command(str(tmp_path / "nope.py"), str(FIXTURES / "candidates" / "honest_relu.py"), "cpu", None, True, config=cfg)
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    with pytest.raises(MalformedInput) as e:
        eval_command(str(bad), str(FIXTURES / "candidates" / "honest_relu.py"), "cpu", None, True, config=cfg)
    assert e.value.hint
    with pytest.raises(InputNotFound):
        eval_command(str(FIXTURES / "problems" / "relu.py"), str(tmp_path / "none.py"), "cpu", None, True, config=cfg)
