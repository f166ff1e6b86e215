"""Build frozen dataclasses from plain dicts with strict keys and type checks; flatten and hash them.

Supported field types: bool, int, float, str, None/Optional, Literal[...], tuple[T, ...], tuple[A, B],
dict[str, T], nested dataclasses. Anything else is passed through unchecked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from davinci.errors import ConfigError


def build(cls: type, raw: Any, path: str) -> Any:
    """Instantiate dataclass `cls` from mapping `raw`; `path` is the dotted location for messages."""
    if isinstance(raw, cls):
        return raw
    if not isinstance(raw, dict):
        raise ConfigError(f"{path or 'profile'} must be a mapping, got {raw!r}", f"see the fields of {cls.__name__}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        where = path or "the profile"
        raise ConfigError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(repr(_join(path, k)) for k in unknown)} in {where}",
            f"valid keys in {where}: {', '.join(sorted(fields))}",
        )
    kwargs = {name: _coerce(hints[name], value, _join(path, name)) for name, value in raw.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid {path or 'profile'}: {exc}", f"check the values under {path or 'the profile'}") from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_error(path: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(f"{path} = {value!r} is not {expected}", f"set {path} to {expected}")


def _coerce(tp: Any, value: Any, path: str) -> Any:  # noqa: C901 - one branch per supported type
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if tp is Any:
        return value
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{path} = {value!r} is not allowed", f"use one of: {', '.join(map(repr, allowed))}")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, path)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0] if errors else _type_error(path, value, str(tp))
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _type_error(path, value, "true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _type_error(path, value, "an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _is_number(value):  # YAML 1.1 reads `5e-4` (no dot) as a string
            return float(value)
        raise _type_error(path, value, "a number")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise _type_error(path, value, "a string")
    if origin is tuple:
        return _coerce_tuple(tp, value, path)
    if origin is dict:
        if not isinstance(value, dict):
            raise _type_error(path, value, "a mapping")
        _, vt = get_args(tp) or (str, Any)
        return {str(k): _coerce(vt, v, f"{path}.{k}") for k, v in value.items()}
    return value


def _is_number(text: str) -> bool:
    """A finite decimal literal such as `5e-4` or `1E3` (not `nan` or `inf`)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _coerce_tuple(tp: Any, value: Any, path: str) -> tuple:
    args = get_args(tp)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool) and len(args) == 2 and args[1] is Ellipsis:
        value = [value]  # `--set eval.p_values=1.0` or `data.sources=builtin` means a one-element list
    if not isinstance(value, (list, tuple)):
        raise _type_error(path, value, "a list")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_coerce(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
    if args and len(args) != len(value):
        raise _type_error(path, value, f"a list of {len(args)} items")
    return tuple(_coerce(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value))) if args else tuple(value)


def to_dict(obj: Any) -> Any:
    """Dataclass -> nested plain dict/list (JSON- and YAML-safe)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested config -> `{"rl.epochs": 2, "gym.device": "cpu", ...}` (lists become JSON strings)."""
    data = to_dict(obj) if dataclasses.is_dataclass(obj) else obj
    out: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, full + "."))
        elif isinstance(value, list):
            out[full] = json.dumps(value)
        else:
            out[full] = value
    return out


def config_hash(obj: Any, length: int = 12) -> str:
    """Stable hash of a config (or any JSON-able value): keys sorted, floats as repr."""
    blob = json.dumps(to_dict(obj), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


__all__ = ["build", "to_dict", "flatten", "config_hash"]
_ = typing  # keep `typing` imported for get_type_hints on string annotations
