"""What the registries hold, read from the entries' own files without importing torch.

``suite list`` must answer in well under a second, but the entries register themselves in
modules that import torch and fbgemm (seconds). This module reads those same files: it
finds each ``@REGISTRY.register("name")`` with ``ast``, follows the class's ``Options``
(through its base classes) to the pydantic class, and executes only the statements that
class needs (its bases, field types, constants, validators), recursively across suite
modules. Imports of anything but the standard library, pydantic, yaml and suite modules
are left out; a statement that needed one fails, and :func:`catalog` then falls back to
the real registry. The entries' files stay the one source of truth, and
``tests/test_catalog.py`` checks that this light reading equals the imported registry.
The result is cached per state of the sources (see :func:`catalog`).
"""

from __future__ import annotations
import __future__

import ast
import hashlib
import importlib
import json
import os
import re
import sys
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SUITE_ROOT = Path(__file__).resolve().parent
KINDS: dict[str, str] = {
    "models": "suite.models",
    "embeddings": "suite.embeddings",
    "datasets": "suite.datasets",
    "tasks": "suite.tasks",
}
"""Registry title -> the package whose modules register its entries (as in ``suite.registry``)."""

_LIGHT_PREFIX = "_suite_light."
_ALLOWED_ROOTS = {"pydantic", "pydantic_core", "annotated_types", "typing_extensions", "yaml"}
_DEFAULT_OPTIONS = ("suite.config", "NoOptions")


class LightLoadError(Exception):
    """A definition could not be executed without importing a heavy dependency."""


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
        data = asdict(self)
        if self.kind != "datasets":
            for key in ("protocols", "default_protocol", "needs_raw"):
                data.pop(key)
        return data


def _module_file(module: str) -> Path:
    rel = Path(*module.split(".")[1:])
    package = SUITE_ROOT / rel / "__init__.py"
    return package if package.is_file() else SUITE_ROOT / rel.with_suffix(".py")


def _is_allowed(module: str) -> bool:
    root = module.split(".")[0]
    return root in _ALLOWED_ROOTS or root in sys.stdlib_module_names


class _Source:
    """A suite module's parsed top-level statements, indexed by the names they bind."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.path = _module_file(module)
        text = self.path.read_text(encoding="utf-8")
        self.tree = ast.parse(text, filename=str(self.path))
        self.flags = 0
        self.binds: dict[str, ast.stmt] = {}
        for stmt in self.tree.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                for alias in stmt.names:
                    self.flags |= getattr(__future__, alias.name).compiler_flag
                continue
            for name in _bound_names(stmt):
                self.binds[name] = stmt
        self.classes = {s.name: s for s in self.tree.body if isinstance(s, ast.ClassDef)}


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return [stmt.name]
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    if isinstance(stmt, ast.Assign):
        return [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


class LightLoader:
    """Executes single definitions of suite modules, with only what they need."""

    def __init__(self) -> None:
        self._sources: dict[str, _Source] = {}
        self._modules: dict[str, types.ModuleType] = {}
        self._done: set[tuple[str, str]] = set()

    def source(self, module: str) -> _Source:
        if module not in self._sources:
            self._sources[module] = _Source(module)
        return self._sources[module]

    def _namespace(self, module: str) -> types.ModuleType:
        if module not in self._modules:
            light = types.ModuleType(_LIGHT_PREFIX + module)
            light.__file__ = str(self.source(module).path)
            # pydantic resolves string annotations through sys.modules[cls.__module__]
            sys.modules[light.__name__] = light
            self._modules[module] = light
        return self._modules[module]

    def load(self, module: str, name: str) -> Any:
        """The object bound to ``name`` at the top level of suite module ``module``."""
        self._define(module, name)
        try:
            return self._namespace(module).__dict__[name]
        except KeyError:
            raise LightLoadError(f"{module}.{name} is not defined at top level") from None

    def _define(self, module: str, name: str) -> None:
        if (module, name) in self._done:
            return
        self._done.add((module, name))
        src = self.source(module)
        stmt = src.binds.get(name)
        if stmt is None:
            return  # a builtin, or bound only under TYPE_CHECKING
        namespace = self._namespace(module).__dict__
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            self._import(stmt, name, namespace)
            return
        own = set(_bound_names(stmt))
        for used in {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} - own:
            self._define(module, used)
        for other in own - {name}:
            self._done.add((module, other))
        code = compile(ast.Module([stmt], []), str(src.path), "exec", src.flags, dont_inherit=True)
        try:
            exec(code, namespace)  # noqa: S102 - the suite's own source, one definition
        except Exception as exc:  # a definition that needs a left-out import
            raise LightLoadError(f"{module}.{name}: {type(exc).__name__}: {exc}") from None

    def _import(self, stmt: ast.Import | ast.ImportFrom, name: str, namespace: dict) -> None:
        if isinstance(stmt, ast.ImportFrom):
            if stmt.level or not stmt.module:
                return
            alias = next(a for a in stmt.names if (a.asname or a.name) == name)
            if stmt.module.startswith("suite."):
                namespace[name] = self.load(stmt.module, alias.name)
            elif _is_allowed(stmt.module):
                namespace[name] = getattr(importlib.import_module(stmt.module), alias.name)
            return
        for alias in stmt.names:
            bound = (alias.asname or alias.name).split(".")[0]
            if bound == name and _is_allowed(alias.name):
                module = importlib.import_module(alias.name)
                namespace[name] = module if alias.asname else sys.modules[alias.name.split(".")[0]]


def _register_call(decorator: ast.expr) -> ast.Call | None:
    if (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "register"
        and decorator.args
        and isinstance(decorator.args[0], ast.Constant)
    ):
        return decorator
    return None


def _class_attr(
    loader: LightLoader, module: str, cls: str, attr: str
) -> tuple[str, ast.expr] | None:
    """Where ``attr`` is assigned in ``cls`` or its suite base classes: (module, value)."""
    node = loader.source(module).classes.get(cls)
    if node is None:
        return None
    for stmt in node.body:
        targets = (
            stmt.targets
            if isinstance(stmt, ast.Assign)
            else [stmt.target]
            if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
            return module, stmt.value  # type: ignore[union-attr]
    for base in node.bases:
        if not isinstance(base, ast.Name):
            continue
        where = _definition(loader, module, base.id)
        if where and (found := _class_attr(loader, *where, attr)):
            return found
    return None


def _definition(loader: LightLoader, module: str, name: str) -> tuple[str, str] | None:
    """The (module, name) where ``name`` as used in ``module`` is defined, following
    ``from suite.x import name`` imports."""
    stmt = loader.source(module).binds.get(name)
    if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("suite."):
        alias = next(a for a in stmt.names if (a.asname or a.name) == name)
        return _definition(loader, stmt.module, alias.name)
    if stmt is None:
        return None
    return module, name


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
    names, so the light reading (its own module names) and the real one read alike."""
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


def _literal(found: tuple[str, ast.expr] | None, default: Any) -> Any:
    if found is None:
        return default
    try:
        return ast.literal_eval(found[1])
    except ValueError:
        raise LightLoadError(f"{found[0]}: not a literal: {ast.unparse(found[1])}") from None


def light_entries(kind: str, loader: LightLoader | None = None) -> list[CatalogEntry]:
    """The entries of registry ``kind`` ("models", ...), read without importing them."""
    loader = loader or LightLoader()
    package = KINDS[kind]
    entries = []
    for path in sorted((SUITE_ROOT / package.split(".", 1)[1]).glob("*.py")):
        if path.name.startswith("_") or ".register(" not in path.read_text(encoding="utf-8"):
            continue  # no entry here: parsed later only if an entry needs one of its names
        module = f"{package}.{path.stem}"
        src = loader.source(module)
        for node in src.tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            for decorator in node.decorator_list:
                call = _register_call(decorator)
                if call is None:
                    continue
                entries.append(_entry(loader, kind, module, node, call))
    return sorted(entries, key=lambda e: e.name)


def _entry(
    loader: LightLoader, kind: str, module: str, node: ast.ClassDef, call: ast.Call
) -> CatalogEntry:
    name = call.args[0].value  # type: ignore[attr-defined]
    given = [kw.value for kw in call.keywords if kw.arg == "description"] + call.args[1:2]
    description = ast.literal_eval(given[0]) if given else None
    if not description:
        from suite.registry import first_sentence

        description = first_sentence(ast.get_docstring(node, clean=False) or "")
    found = _class_attr(loader, module, node.name, "Options")
    if found is None:
        options_cls = loader.load(*_DEFAULT_OPTIONS)
    else:
        where, value = found
        if not isinstance(value, ast.Name):
            raise LightLoadError(f"{module}.{node.name}.Options is not a plain name")
        target = _definition(loader, where, value.id)
        if target is None:
            raise LightLoadError(f"{where}: cannot find {value.id}")
        options_cls = loader.load(*target)
    entry = CatalogEntry(kind, str(name), description, module, _options_info(options_cls))
    if kind == "datasets":
        entry.protocols = _literal(
            _class_attr(loader, module, node.name, "protocols"),
            {"default": "the dataset's own train/val/test splits"},
        )
        entry.default_protocol = _literal(
            _class_attr(loader, module, node.name, "default_protocol"), "default"
        )
        entry.needs_raw = bool(_literal(_class_attr(loader, module, node.name, "needs_raw"), False))
    return entry


def real_entries(kind: str) -> list[CatalogEntry]:
    """The same listing from the imported registry (imports torch; the reference)."""
    from suite.config import NoOptions
    from suite.registry import ALL_REGISTRIES

    entries = []
    for item in ALL_REGISTRIES[kind]:
        options_cls = getattr(item.obj, "Options", NoOptions)
        entry = CatalogEntry(
            kind, item.name, item.description, item.obj.__module__, _options_info(options_cls)
        )
        if kind == "datasets":
            entry.protocols = dict(item.obj.protocols)
            entry.default_protocol = item.obj.default_protocol
            entry.needs_raw = bool(item.obj.needs_raw)
        entries.append(entry)
    return entries


def catalog(kinds: list[str] | None = None) -> dict[str, list[CatalogEntry]]:
    """Every entry of the given registries (all by default), read light when possible.

    The reading is kept in a cache keyed by the path, size and mtime of every suite
    source file (as Python keeps ``.pyc`` files), so a repeated ``suite list`` parses
    nothing; any edit to a suite file makes a new key.
    """
    wanted = list(KINDS) if kinds is None else kinds
    cache = _cache_file()
    cached = _read_cache(cache)
    if cached is None:
        loader = LightLoader()
        cached = {}
        for kind in KINDS:
            try:
                cached[kind] = light_entries(kind, loader)
            except LightLoadError:
                cached[kind] = real_entries(kind)
        _write_cache(cache, cached)
    return {kind: cached[kind] for kind in wanted}


def _cache_file() -> Path | None:
    if os.environ.get("RECSUITE_CATALOG_CACHE", "1") == "0":
        return None
    stats = [
        f"{p.relative_to(SUITE_ROOT)}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
        for p in sorted(SUITE_ROOT.rglob("*.py"))
    ]
    key = hashlib.sha256("\n".join([sys.version, *stats]).encode()).hexdigest()[:20]
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "recsuite" / "catalog" / f"{key}.json"


def _read_cache(path: Path | None) -> dict[str, list[CatalogEntry]] | None:
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {
            kind: [
                CatalogEntry(**{**e, "options": [OptionInfo(**o) for o in e["options"]]})
                for e in data[kind]
            ]
            for kind in KINDS
        }
    except (ValueError, KeyError, TypeError, OSError):
        return None  # unreadable or from another layout: read the sources again


def _write_cache(path: Path | None, entries: dict[str, list[CatalogEntry]]) -> None:
    if path is None:
        return
    from suite.fileio import write_text_atomic

    try:
        text = json.dumps({k: [asdict(e) for e in v] for k, v in entries.items()})
        write_text_atomic(path, text)
    except OSError:
        pass  # a read-only home: the listing is still right, only not kept


def prepared_dir_of(
    dataset: str, protocol: str | None, options: dict[str, Any], cache_dir: str | None = None
) -> Path:
    """Where the prepared cache of this dataset config lives (``suite.data.source``'s rule,
    read light)."""
    rule = LightLoader().load("suite.data.source", "prepared_dir")
    spec = types.SimpleNamespace(
        name=dataset, protocol=protocol, options=options, cache_dir=cache_dir
    )
    return rule(spec)
