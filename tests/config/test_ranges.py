"""Profile values are range-checked at load: the schema in one place, the valid range in the message."""

from __future__ import annotations

from pathlib import Path

import pytest

from davinci.config import available_profiles, load_profile
from davinci.config.schema import DEFAULT, RANGES, Range, numeric_values
from davinci.errors import ConfigError


@pytest.mark.parametrize("name", available_profiles())
def test_shipped_profiles_are_in_range(name: str) -> None:
    load_profile(name)


@pytest.mark.parametrize("override, needle", [
    ("rl.epochs=-1", "rl.epochs = -1 is out of range: it must be >= 0"),
    ("agents.group_size=0", "agents.group_size = 0 is out of range: it must be >= 1"),
    ("agents.top_p=1.5", "agents.top_p = 1.5 is out of range: it must be in (0, 1]"),
    ("gym.run_timeout_s=.nan", "gym.run_timeout_s = nan is out of range"),
    ("data.kernelbench_levels=[1, 7]", "data.kernelbench_levels = 7 is out of range: it must be in [1, 4]"),
    ("gym.timing_min_reps=50", "gym.timing_min_reps must be <= gym.timing_max_reps"),
    ("gym.build_dir_max_mb=0", "gym.build_dir_max_mb = 0 is out of range: it must be >= 1"),
    ("gym.build_dir_max_mb=9000", "gym.build_dir_max_mb must be <= gym.build_cache_max_mb"),
    ("data.synthetic_lengths=[2, 5]", "data.synthetic_lengths = 5 is out of range: it must be in [1, 4]"),
    ("data.synthetic_heldout=0", "data.eval_source=synthetic_heldout needs data.synthetic_heldout >= 1"),
])
def test_out_of_range_values_name_key_and_range(override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_profile("tiny", [override])
    assert needle in info.value.message
    assert info.value.hint


def test_negative_allowed_where_the_schema_says_so() -> None:
    assert load_profile("tiny", ["rl.hack_penalty=-1"]).rl.hack_penalty == -1.0


def test_every_schema_key_names_a_real_numeric_value() -> None:
    keys = {key for key, _ in numeric_values(load_profile("tiny"))}
    assert set(RANGES) - keys <= {"rl.gamma"}  # gamma is None by default (no value to walk)


def test_unlisted_numbers_get_the_default_rule() -> None:
    assert "sft.warmup_steps" not in RANGES
    with pytest.raises(ConfigError, match=f"must be {DEFAULT.describe()}"):
        load_profile("tiny", ["sft.warmup_steps=-5"])


def test_range_edges() -> None:
    half_open = Range(0, 1, hi_open=True)
    assert half_open.contains(0) and not half_open.contains(1) and half_open.describe() == "in [0, 1)"
    assert not Range(0, lo_open=True).contains(0) and not Range(None).contains(float("inf"))


def test_profile_that_is_not_utf8(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_profile(str(bad))
