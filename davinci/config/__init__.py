"""Profiles: one frozen, typed configuration for the whole pipeline, read from `configs/<name>.yaml`.

Choices:
- Every section is a frozen dataclass owned by the package it configures (`kernelgym.config.GymConfig`,
  `skills.config.SkillsConfig`, ...); defaults are the tiny CPU profile, so a profile YAML holds only
  what differs. A YAML may say `extends: <profile>` to start from another profile.
- `--set key=value` overrides use dotted keys (`rl.epochs=3`); values are parsed as YAML and checked
  against the field's type. An unknown key raises `ConfigError` naming the valid keys at that level.
- Every numeric value is range-checked at load against `schema.RANGES` (the one place valid ranges live);
  a profile file that is not UTF-8 or not YAML is a `ConfigError` too, never an internal error.
- `flatten()` gives `{"rl.epochs": 3, ...}` for MLflow params; `config_hash()` keys caches and resume.

    from davinci.config import load_profile
    profile = load_profile("tiny", ["rl.epochs=1"])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from davinci.agents.config import AgentsConfig
from davinci.config.data import DataConfig
from davinci.config.loader import build, config_hash, flatten, to_dict
from davinci.config.schema import check_ranges
from davinci.config.stages import EvalStageConfig, TrackingConfig
from davinci.errors import ConfigError, InputNotFound
from davinci.evolve.config import EvolveConfig
from davinci.kernelgym.config import GymConfig
from davinci.llm.config import ModelConfig, SFTConfig
from davinci.rl.config import RLConfig
from davinci.skills.config import SkillsConfig

__all__ = ["Profile", "load_profile", "profile_from_dict", "flatten", "config_hash", "to_dict", "CONFIG_DIR"]

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


@dataclass(frozen=True)
class Profile:
    """The whole pipeline's configuration. `name` is the profile it was loaded from."""

    name: str = "tiny"
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    gym: GymConfig = field(default_factory=GymConfig)
    eval: EvalStageConfig = field(default_factory=EvalStageConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    evolve: EvolveConfig = field(default_factory=EvolveConfig)


def available_profiles(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(p.stem for p in config_dir.glob("*.yaml"))


def _read_yaml(name_or_path: str, config_dir: Path, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") and path.exists()):
        path = config_dir / f"{name_or_path}.yaml"
    if not path.exists():
        raise InputNotFound(
            f"unknown profile {name_or_path!r} (no file {path})",
            f"use one of: {', '.join(available_profiles(config_dir))}, or a path to a .yaml file",
        )
    if str(path) in seen:
        raise ConfigError(f"profile {path} extends itself (cycle: {' -> '.join(seen)})", "break the `extends:` cycle")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"profile {path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})",
                          "save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"profile {path} is not valid YAML: {exc}", "fix the YAML syntax") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"profile {path} must be a mapping of sections", "see configs/tiny.yaml for the layout")
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    base = _read_yaml(str(parent), config_dir, seen + (str(path),))
    return _deep_merge(base, raw)


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """`["rl.epochs=3", "gym.device=cpu"]` -> nested dict. Values are parsed as YAML scalars/lists."""
    nested: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not of the form key=value", "write e.g. --set rl.epochs=2")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with another override of {part!r}", "set each key once")
        node[parts[-1]] = value
    return nested


def profile_from_dict(raw: dict[str, Any], name: str = "custom") -> Profile:
    raw = dict(raw)
    raw.setdefault("name", name)
    profile = build(Profile, raw, path="")
    check_ranges(profile)
    return profile


def load_profile(name: str = "tiny", overrides: Sequence[str] = (), config_dir: Path = CONFIG_DIR) -> Profile:
    raw = _read_yaml(name, config_dir)
    raw = _deep_merge(raw, parse_overrides(overrides))
    raw["name"] = raw.get("name", Path(name).stem)
    return profile_from_dict(raw, name=Path(name).stem)
