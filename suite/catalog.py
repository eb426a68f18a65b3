"""What the registries hold, for ``suite list``, without importing torch.

The entries register themselves in modules that import torch and fbgemm (seconds), so
their registrations are also kept lazily, as lm-eval keeps its model mapping: the
registry's own record of every entry (name -> module, description, options, a dataset's
protocols) is written to ``suite/catalog.json`` by ``python -m suite.catalog --write``,
with a digest of the sources it was read from (each registry's package and the modules
its entries' classes and options inherit from). ``suite list`` reads that file; a kind
whose sources changed since is read from the imported registry instead (the reference)
and kept in a user cache under that digest, so a new or edited entry needs nothing
rewritten. ``tests/test_catalog.py`` checks that what ``suite list`` shows equals the
imported registries, and that a current record does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from suite.registry import ALL_REGISTRIES

SUITE_ROOT = Path(__file__).resolve().parent
INDEX_FILE = SUITE_ROOT / "catalog.json"
"""The lazy registrations: each kind's entries and the digest of their sources."""
KINDS: dict[str, str] = {kind: str(reg.package) for kind, reg in ALL_REGISTRIES.items()}
"""Registry title -> the package whose modules register its entries (``suite.registry``)."""
WRITE_COMMAND = "python -m suite.catalog --write"


@dataclass
class OptionInfo:
    """One option of an entry: its type as written, default and help text."""

    name: str
    type: str
    default: Any = None
    required: bool = False
    description: str = ""


@dataclass
class CatalogEntry:
    """One registry entry as ``suite list`` shows it."""

    kind: str
    name: str
    description: str
    module: str
    options: list[OptionInfo] = field(default_factory=list)
    protocols: dict[str, str] = field(default_factory=dict)
    default_protocol: str | None = None
    needs_raw: bool = False

    def defaults(self) -> dict[str, Any]:
        """The entry's resolved default options (what an empty ``options:`` becomes)."""
        return {o.name: o.default for o in self.options if not o.required}

    def to_json(self) -> dict[str, Any]:
        """The entry as ``suite list --json`` prints it (dataset fields for datasets only)."""
        data = asdict(self)
        if self.kind != "datasets":
            for key in ("protocols", "default_protocol", "needs_raw"):
                data.pop(key)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CatalogEntry:
        """An entry from :func:`dataclasses.asdict`'s form (the record and the cache)."""
        return cls(**{**data, "options": [OptionInfo(**o) for o in data["options"]]})


# --- reading the imported registry (imports torch) --------------------------------------


def real_entries(kind: str) -> list[CatalogEntry]:
    """The listing of registry ``kind`` from the imported registry (the reference)."""
    from suite.config import NoOptions

    entries = []
    for item in ALL_REGISTRIES[kind]:
        options_cls = getattr(item.obj, "Options", NoOptions)
        entry = CatalogEntry(
            kind, item.name, item.description, item.obj.__module__, _options_info(options_cls)
        )
        if kind == "datasets":
            source: Any = item.obj  # a DatasetSource subclass (its module is a floor above)
            entry.protocols = dict(source.protocols)
            entry.default_protocol = source.default_protocol
            entry.needs_raw = bool(source.needs_raw)
        entries.append(entry)
    return entries


def _options_info(options_cls: Any) -> list[OptionInfo]:
    out = []
    for name, info in options_cls.model_fields.items():
        required = info.is_required()
        default = None if required else info.get_default(call_default_factory=True)
        out.append(
            OptionInfo(
                name=name,
                type=_type_name(info.annotation),
                default=_jsonable(default),
                required=required,
                description=info.description or "",
            )
        )
    if not any(o.required for o in out):  # defaults as validation resolves them
        resolved = options_cls.model_validate({}).model_dump(mode="json")
        for option in out:
            option.default = resolved.get(option.name, option.default)
    return out


def _type_name(annotation: Any) -> str:
    """``list[suite.tasks.tiered.Placement]`` -> ``list[Placement]``: types by their own
    names, as they are written in the options."""
    if isinstance(annotation, type):
        return annotation.__name__
    text = _QUALIFIED.sub(r"\2", str(annotation))
    return text.replace("NoneType", "None")


_QUALIFIED = re.compile(r"(?<![\w'\"])((?:[A-Za-z_]\w*\.)+)([A-Za-z_]\w*)")


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def inherited_sources(kind: str) -> list[str]:
    """Suite modules outside the registry's package that its entries' classes and options
    inherit from (they define fields and defaults), as paths under ``suite/``."""
    from suite.config import NoOptions

    package = KINDS[kind]
    modules = set()
    for item in ALL_REGISTRIES[kind]:
        for cls in (item.obj, getattr(item.obj, "Options", NoOptions)):
            modules |= {c.__module__ for c in cls.__mro__ if c.__module__.startswith("suite.")}
    outside = sorted(m for m in modules if not m.startswith(package + "."))
    return [str(_module_file(m).relative_to(SUITE_ROOT)) for m in outside]


def _module_file(module: str) -> Path:
    loaded = sys.modules[module]
    return Path(str(loaded.__file__)).resolve()


# --- the record of the registrations and its freshness ----------------------------------


def sources_digest(kind: str, inherited: list[str]) -> str:
    """sha256 over the contents of the registry package's files and ``inherited``: it
    changes with any edit, new or removed file that could change the listing."""
    package = SUITE_ROOT.joinpath(*KINDS[kind].split(".")[1:])
    files = sorted({p.relative_to(SUITE_ROOT).as_posix() for p in package.rglob("*.py")})
    digest = hashlib.sha256()
    for rel in sorted({*files, *inherited}):
        path = SUITE_ROOT / rel
        data = path.read_bytes() if path.is_file() else b"<missing>"
        digest.update(f"{rel}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    return digest.hexdigest()[:20]


def record() -> dict[str, Any]:
    """The lazy registrations of every kind, read from the imported registries."""
    out = {}
    for kind in KINDS:
        inherited = inherited_sources(kind)
        out[kind] = {
            "digest": sources_digest(kind, inherited),
            "inherited": inherited,
            "entries": [asdict(e) for e in real_entries(kind)],
        }
    return out


def write_record(path: Path = INDEX_FILE) -> Path:
    """Write :func:`record` to ``path`` (``suite/catalog.json``)."""
    path.write_text(json.dumps(record(), indent=1) + "\n", encoding="utf-8")
    return path


def _read_json(path: Path | None) -> Any:
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return None  # unreadable: read the registry again


def recorded_entries(kind: str) -> list[CatalogEntry] | None:
    """Kind ``kind``'s entries from ``suite/catalog.json``, or None where its sources
    changed since it was written (or it is missing)."""
    data = _read_json(INDEX_FILE)
    found = data.get(kind) if isinstance(data, dict) else None
    if not found or found.get("digest") != sources_digest(kind, found.get("inherited", [])):
        return None
    return [CatalogEntry.from_json(e) for e in found["entries"]]


def catalog(kinds: list[str] | None = None) -> dict[str, list[CatalogEntry]]:
    """Every entry of the given registries (all by default), from the lazy registrations
    where they are current, else from the imported registry (kept in the user cache under
    the sources' digest, so only the first listing after an edit imports torch)."""
    out = {}
    for kind in list(KINDS) if kinds is None else kinds:
        entries = recorded_entries(kind)
        if entries is None:
            entries = _cached_entries(kind)
        out[kind] = entries
    return out


def _cached_entries(kind: str) -> list[CatalogEntry]:
    recorded = _read_json(INDEX_FILE) or {}
    inherited = recorded.get(kind, {}).get("inherited", [])
    path = _cache_file(kind, sources_digest(kind, inherited))
    cached = _read_json(path)
    try:
        return [CatalogEntry.from_json(e) for e in cached]
    except (TypeError, KeyError):
        pass  # no cache, or one from another layout
    entries = real_entries(kind)
    if path is not None:
        from suite.fileio import write_text_atomic

        with contextlib.suppress(OSError):  # a read-only home: right, only not kept
            write_text_atomic(path, json.dumps([asdict(e) for e in entries]))
    return entries


def _cache_file(kind: str, digest: str) -> Path | None:
    if os.environ.get("RECSUITE_CATALOG_CACHE", "1") == "0":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "recsuite" / "catalog" / f"{kind}-{digest}.json"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {WRITE_COMMAND}  (rewrites {INDEX_FILE.name} from the registries)")
    print(write_record())
