"""A name -> factory registry whose entries are imported only when first used.

Keeping imports lazy is what lets ``import persobench`` stay light: torch, transformers and the
provider SDKs load only when a loader, provider or metric that needs them is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, Iterator, TypeVar

from persobench.errors import ConfigurationError

T = TypeVar("T")


class UnknownNameError(ConfigurationError, KeyError):
    """Raised for a name that is not registered; the message lists the known names."""

    def __str__(self) -> str:  # KeyError would repr-quote the message
        return str(self.args[0])


class Registry(Generic[T]):
    """Maps names to objects given either directly or as a lazy ``"module:attribute"`` path.

    Entries keep their registration order (:meth:`in_order`); :meth:`names` lists them sorted. An
    entry may carry facts its callers read without importing it (:meth:`fact`: whether a provider
    enforces a JSON schema). ``build``, when given, turns a lazily imported attribute into the registered object the first
    time it is asked for (the metric families register their classes and store one instance each).
    """

    def __init__(self, kind: str, *, build: Callable[[Any], T] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}
        self._descriptions: dict[str, str] = {}
        self._facts: dict[str, dict[str, Any]] = {}
        self._build = build

    def register(self, name: str, target: T | str, *, description: str = "", **facts: Any) -> None:
        """Register ``target`` (an object, or ``"package.module:attr"`` to import on first use), with
        ``facts`` about it (``structured=True``) that :meth:`fact` reads without importing it."""
        self._entries[name] = target
        self._descriptions[name] = description
        self._facts[name] = dict(facts)

    def get(self, name: str) -> T:
        try:
            target = self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known {self.kind}s: {known}") from None
        if isinstance(target, str):
            target = load_object(target)
            if self._build is not None:
                target = self._build(target)
            self._entries[name] = target
        return target

    def unregister(self, name: str) -> None:
        """Remove ``name``; an unknown name raises :class:`UnknownNameError`."""
        if name not in self._entries:
            raise UnknownNameError(f"no {self.kind} {name!r} is registered")
        del self._entries[name]
        self._descriptions.pop(name, None)
        self._facts.pop(name, None)

    def in_order(self) -> tuple[str, ...]:
        """Registered names in registration order."""
        return tuple(self._entries)

    def describe(self, name: str) -> str:
        return self._descriptions.get(name, "")

    def fact(self, name: str, key: str, default: Any = None) -> Any:
        """The fact ``key`` ``name`` was registered with (its entry is not imported), else ``default``;
        an unknown name too gives ``default``."""
        return self._facts.get(name, {}).get(key, default)

    def having(self, key: str) -> tuple[str, ...]:
        """The names registered with a true fact ``key``, in registration order."""
        return tuple(name for name in self._entries if self.fact(name, key))

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()!r})"


def load_object(path: str) -> Any:
    """Import ``"module:attribute"``."""
    module_name, _, attr = path.partition(":")
    return getattr(importlib.import_module(module_name), attr)
