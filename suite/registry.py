"""A small generic name -> factory registry, and the suite's four registries.

Entries register themselves in their own module (``@MODELS.register("dlrm")``); the
registry imports every module of its package on first use, so nobody keeps a list.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from suite.errors import SuiteError

T = TypeVar("T")


class UnknownNameError(SuiteError):
    """An unknown registry name; the message lists valid names and a suggestion."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered thing: its name, the object and a one-line description."""

    name: str
    obj: T
    description: str


class Registry(Generic[T]):
    """Maps names to registered objects (classes or factories).

    Args:
        kind: what the entries are, for messages ("model", "dataset", ...).
        package: dotted package whose modules are imported to find entries.
    """

    def __init__(self, kind: str, package: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self._entries: dict[str, Entry[T]] = {}
        self._discovered = package is None

    def register(self, name: str, description: str | None = None) -> Callable[[T], T]:
        """Decorator registering ``obj`` under ``name``; the description defaults to
        the first line of its docstring."""

        def decorate(obj: T) -> T:
            if name in self._entries and self._entries[name].obj is not obj:
                raise SuiteError(f"duplicate {self.kind} name {name!r}")
            doc = description or (getattr(obj, "__doc__", None) or "").strip().splitlines()
            text = doc if isinstance(doc, str) else (doc[0] if doc else "")
            self._entries[name] = Entry(name, obj, text)
            return obj

        return decorate

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        assert self.package is not None
        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self.package}.{info.name}")

    def get(self, name: str) -> T:
        """The object registered as ``name``; unknown names raise ``UnknownNameError``."""
        return self.entry(name).obj

    def entry(self, name: str) -> Entry[T]:
        self._discover()
        if name not in self._entries:
            raise UnknownNameError(self.unknown_message(name))
        return self._entries[name]

    def unknown_message(self, name: str) -> str:
        self._discover()
        valid = sorted(self._entries)
        close = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return f"unknown {self.kind} {name!r}.{hint} Valid: {', '.join(valid)}"

    def names(self) -> list[str]:
        self._discover()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        self._discover()
        return iter(sorted(self._entries.values(), key=lambda e: e.name))


MODELS: Registry[Any] = Registry("model", "suite.models")
EMBEDDINGS: Registry[Any] = Registry("embedding method", "suite.embeddings")
DATASETS: Registry[Any] = Registry("dataset", "suite.datasets")
TASKS: Registry[Any] = Registry("task", "suite.tasks")

ALL_REGISTRIES: dict[str, Registry[Any]] = {
    "models": MODELS,
    "embeddings": EMBEDDINGS,
    "datasets": DATASETS,
    "tasks": TASKS,
}
