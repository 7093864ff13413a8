"""One Registry type for every table tlm reads by name (mixers, MLPs, backends, families, statistics,
schedule shapes, ...), after lm-evaluation-harness's api/registry.py. A name is registered once (a second
entry is refused); an entry may be lazy, a "package.module:attr" string imported on its first `get` (a
light command reads the names without torch); `get` of a missing name raises the one "unknown <kind> 'y';
choose one of a, b, c" line; iteration gives the names in order (CLI choices, help, docs)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from tlm_probe.errors import UserError

T = TypeVar("T")


def import_entry(path: str) -> Any:
    """The object at "package.module:attr"."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


class Registry(Generic[T]):
    """name -> entry, in registration order; `kind` names the table in its messages."""

    def __init__(self, kind: str, entries: dict[str, T | str] | None = None, *, lazy: bool = False,
                 error: type[UserError] = UserError):
        self.kind, self.lazy, self.error = kind, lazy, error
        self._entries: dict[str, Any] = {}
        for name, entry in (entries or {}).items():
            self.register(name, entry)

    def register(self, name: str, entry: T | str | None = None) -> Any:
        """Add `entry` under `name` (as a decorator when `entry` is left out); a taken name is refused."""
        if entry is None:
            return lambda obj: self.register(name, obj)
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Drop `name` (a test's own entry, when it is done)."""
        self._entries.pop(name, None)

    def check(self, name: str) -> str:
        """`name`, if it is registered; else the one "unknown" line."""
        if name not in self._entries:
            raise self.error(f"unknown {self.kind} {name!r}; choose one of {', '.join(self._entries)}")
        return name

    def get(self, name: str) -> T:
        entry = self._entries[self.check(name)]
        if self.lazy and isinstance(entry, str):  # imported on first use, then kept
            entry = self._entries[name] = import_entry(entry)
        return entry

    def items(self) -> Iterator[tuple[str, T]]:
        return ((name, self.get(name)) for name in self._entries)

    def values(self) -> Iterator[T]:
        return (self.get(name) for name in self._entries)

    def where(self, test: Callable[[T], bool]) -> tuple[str, ...]:
        """The names whose entry passes `test` (in order)."""
        return tuple(name for name, entry in self.items() if test(entry))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> T:
        return self.get(name)
