"""Profiles: strict keys, typed overrides, `extends`, flatten/hash. Hand-checked expectations."""

from __future__ import annotations

from pathlib import Path

import pytest

from davinci.config import available_profiles, config_hash, flatten, load_profile, parse_overrides
from davinci.errors import ConfigError, InputNotFound


def test_every_shipped_profile_loads() -> None:
    names = available_profiles()
    assert {"tiny", "h100", "paper-14b"} <= set(names)
    for name in names:
        assert load_profile(name).name == name


def test_override_sets_typed_value() -> None:
    profile = load_profile("tiny", ["rl.epochs=3", "eval.p_values=[1.0, 2]", "gym.device=cpu"])
    assert profile.rl.epochs == 3
    assert profile.eval.p_values == (1.0, 2.0)
    assert profile.gym.device == "cpu"


def test_exponent_without_dot_is_a_number() -> None:
    """YAML 1.1 reads `5e-4` as a string; a float field takes it as 0.0005, in an override and in a profile."""
    assert load_profile("tiny", ["rl.lr=5e-4"]).rl.lr == 0.0005
    assert load_profile("tiny", ["rl.lr=1E3"]).rl.lr == 1000.0
    for bad in ("nan", "inf", "1e-4x", "fast"):
        with pytest.raises(ConfigError, match="not a number"):
            load_profile("tiny", [f"rl.lr={bad}"])


def test_unknown_key_names_valid_keys() -> None:
    with pytest.raises(ConfigError) as err:
        load_profile("tiny", ["rl.epochz=3"])
    assert "rl.epochz" in err.value.message and "epochs" in err.value.hint


def test_unknown_section_names_valid_sections() -> None:
    with pytest.raises(ConfigError) as err:
        load_profile("tiny", ["nope.x=1"])
    assert "rl" in err.value.hint and "gym" in err.value.hint


def test_wrong_type_and_literal_rejected() -> None:
    with pytest.raises(ConfigError, match="not an integer"):
        load_profile("tiny", ["rl.epochs=two"])
    with pytest.raises(ConfigError, match="not allowed"):
        load_profile("tiny", ["gym.device=tpu"])
    with pytest.raises(ConfigError, match="true or false"):
        load_profile("tiny", ["eval.greedy=maybe"])


def test_malformed_override_and_missing_profile() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["rl.epochs"])
    with pytest.raises(InputNotFound) as err:
        load_profile("no-such-profile")
    assert "tiny" in err.value.hint


def test_extends_merges_sections(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("rl:\n  epochs: 5\n  lr: 0.5\n")
    (tmp_path / "child.yaml").write_text("extends: base\nrl:\n  epochs: 7\n")
    profile = load_profile("child", config_dir=tmp_path)
    assert (profile.rl.epochs, profile.rl.lr, profile.name) == (7, 0.5, "child")


def test_extends_cycle_is_reported(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b\n")
    (tmp_path / "b.yaml").write_text("extends: a\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_profile("a", config_dir=tmp_path)


def test_flatten_and_hash_are_stable() -> None:
    a, b = load_profile("tiny"), load_profile("tiny")
    flat = flatten(a)
    assert flat["rl.epochs"] == a.rl.epochs and flat["name"] == "tiny"
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(load_profile("tiny", ["rl.epochs=9"]))
