"""A tiny name -> function registry used wherever there are alternatives (rewards, advantages, losses, checks).

One dispatch path: `get(name)` raises `UnknownName` listing the valid names; registering a different
function under an existing name raises. Registries are filled by decorators at import of their module,
never mutated by tests (copy with `dict(reg.items())` if a test needs its own).

    ADVANTAGES = Registry("advantage estimator")
    @ADVANTAGES.register("trloo")
    def trloo(...): ...
    ADVANTAGES.get("trloo")
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from davinci.errors import UnknownName

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def decorator(fn: F) -> F:
            existing = self._items.get(name)
            if existing is not None and existing is not fn:
                raise ValueError(f"{self.kind} {name!r} is already registered to {existing.__qualname__}")
            self._items[name] = fn
            return fn

        return decorator

    def get(self, name: str) -> F:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownName(self.kind, name, list(self._items)) from None

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._items))

    def items(self) -> Iterator[tuple[str, F]]:
        return iter(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items
