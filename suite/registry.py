"""A small generic name -> factory registry, and the suite's four registries.

Entries register themselves in their own module (``@MODELS.register("dlrm")``); the
registry imports every module of its package on first use, so nobody keeps a list.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from suite.errors import SuiteError

T = TypeVar("T")


class UnknownNameError(SuiteError):
    """An unknown registry name; the message lists valid names and a suggestion."""


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for the closest of ``valid`` to ``name``, or ``""``.

    The one suggestion helper: registry names, config keys, presets and papers use it.
    """
    close = difflib.get_close_matches(str(name), list(valid), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def first_sentence(text: str) -> str:
    """The first sentence of ``text``'s first paragraph on one line: a docstring summary
    wrapped over two lines stays whole (``e.g.``, ``i.e.`` and dotted names do not end it)."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    end = re.search(r"(?<!\be\.g\.)(?<!\bi\.e\.)(?<=[.!?])\s+(?=[A-Z`(\"'])", paragraph)
    return paragraph[: end.start()] if end else paragraph


def unknown_name_message(kind: str, name: str, valid: Iterable[str]) -> str:
    """``unknown <kind> 'name'. Did you mean ...? Valid: a, b, c``."""
    names = sorted(valid)
    return f"unknown {kind} {name!r}.{did_you_mean(name, names)} Valid: {', '.join(names)}"


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered thing: its name, the object and a one-line description."""

    name: str
    obj: T
    description: str


class Registry(Generic[T]):
    """Maps names to registered classes.

    Args:
        kind: what the entries are, for messages ("model", "dataset", ...).
        package: dotted package whose modules are imported to find entries.
        base: ``"module:Class"`` every entry must subclass. Given as a path because the
            base lives on a higher floor than the registry; it is already imported when
            an entry registers (the entry's module subclasses it).
    """

    def __init__(self, kind: str, package: str | None = None, base: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self.base = base
        self._entries: dict[str, Entry[T]] = {}
        self._discovered = package is None

    def _base_class(self) -> type | None:
        if self.base is None:
            return None
        module, _, name = self.base.partition(":")
        loaded = sys.modules.get(module) or importlib.import_module(module)
        return getattr(loaded, name)

    def register(self, name: str, description: str | None = None) -> Callable[[T], T]:
        """Decorator registering class ``obj`` under ``name``, which it also sets as
        ``obj.registered_name`` (the one place a name is written). The description
        defaults to the first sentence of its docstring."""

        def decorate(obj: T) -> T:
            if name in self._entries and self._entries[name].obj is not obj:
                raise SuiteError(f"duplicate {self.kind} name {name!r}")
            base = self._base_class()
            if base is not None and not (isinstance(obj, type) and issubclass(obj, base)):
                raise SuiteError(f"{self.kind} {name!r} must be a subclass of {base.__name__}")
            if isinstance(obj, type):
                obj.registered_name = name  # type: ignore[attr-defined]
            text = description or first_sentence(getattr(obj, "__doc__", None) or "")
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
        return unknown_name_message(self.kind, name, self._entries)

    def names(self) -> list[str]:
        self._discover()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        self._discover()
        return iter(sorted(self._entries.values(), key=lambda e: e.name))


# Entries are classes; each registry checks them against its base class at registration.
MODELS: Registry[type] = Registry("model", "suite.models", "suite.models.base:Backbone")
EMBEDDINGS: Registry[type] = Registry(
    "embedding method", "suite.embeddings", "suite.embeddings.base:EmbeddingMethod"
)
DATASETS: Registry[type] = Registry("dataset", "suite.datasets", "suite.data.source:DatasetSource")
TASKS: Registry[type] = Registry("task", "suite.tasks", "suite.tasks.base:Task")

ALL_REGISTRIES: dict[str, Registry[type]] = {
    "models": MODELS,
    "embeddings": EMBEDDINGS,
    "datasets": DATASETS,
    "tasks": TASKS,
}
