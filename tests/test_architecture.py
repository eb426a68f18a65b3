"""The house's floors: a module imports only from its own floor or below.

Read statically from the source (``ast``), imports inside functions included, so a lazy
import cannot hide an upward arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "suite"

# Lowest first. A top-level module or package of ``suite`` not listed here fails the test,
# so a new package has to be given its floor.
FLOORS: list[set[str]] = [
    {"errors", "fileio", "environment", "kernel_backend", "progress", "units", "stable_hash"}
    | {"versions", "wheelhouse"},  # torch-free: the supported pairs, the offline wheelhouse
    {
        "registry",
        "config",
        "results",
        "tracking",
        "stats",
        "decisions",
        "metrics",
        "presets",
        "figures",
        "catalog",
    },
    {"embeddings"},
    {"data", "datasets", "models"},
    {"engine"},
    {"tasks"},
    {"runs", "executors"},  # executors: where a reproduction's or study's jobs run
    {"studies", "reproduce", "leaderboard", "api", "export", "gpu_check"},
    {"commands"},
    # the package facade lends the API lazily (``from suite import run``), so it sits on top
    {"cli", "__main__", "__init__"},
]


def floor_of(name: str) -> int:
    for level, names in enumerate(FLOORS):
        if name in names:
            return level
    raise AssertionError(f"suite.{name} has no floor in tests/test_architecture.py")


def top_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py")


def suite_imports(path: Path) -> set[str]:
    """Top-level ``suite`` subpackages that ``path`` imports, anywhere in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "suite":  # ``from suite import x``: only submodules count
                names = [
                    f"suite.{alias.name}"
                    for alias in node.names
                    if (ROOT / f"{alias.name}.py").exists() or (ROOT / alias.name).is_dir()
                ]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "suite" and len(parts) > 1:
                found.add(parts[1])
    return found


MODULES = sorted(p for p in ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_a_higher_floor(path: Path) -> None:
    own = top_name(path)
    level = floor_of(own)
    upward = {name for name in suite_imports(path) if name != own and floor_of(name) > level}
    assert not upward, f"suite/{path.relative_to(ROOT)} (floor {level}) imports {sorted(upward)}"


def test_engine_knows_no_task_leaderboard_or_reproduction() -> None:
    for path in (ROOT / "engine").rglob("*.py"):
        forbidden = suite_imports(path) & {"tasks", "runs", "leaderboard", "reproduce", "studies"}
        assert not forbidden, f"{path.name} imports {sorted(forbidden)}"


def test_the_check_sees_a_lazy_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from suite.tasks.base import Task\n    return Task\n")
    assert "tasks" in suite_imports(module)


# --- inside ``reproduce/``: its modules read bottom-up ------------------------------------

REPRODUCE = ROOT / "reproduce"
# Lowest first; a module imports only modules of lower floors. A module of ``reproduce/``
# not listed here fails the test, so a new one has to be given its floor.
REPRODUCE_FLOORS: list[set[str]] = [
    {"spec", "regime_stats"},  # the specs' schema; a regime's data figures
    {"claims", "tuned"},  # judging claims on figures; tuned values beside the spec
    {"store", "plan"},  # results on disk; the one ReproductionPlan
    {"outcome", "costs"},  # what a reproduction found; what its jobs will cost
    {"judge", "curve", "provenance"},  # claims judged; the curve's ranking; what runs rest on
    {"plots", "report", "runner", "tuning"},  # figures, REPORT.md, the jobs, the studies
    {"regime_runs"},  # the regime profile's reproductions
    {"regime_report"},
    {"__init__"},
]


def reproduce_floor_of(name: str) -> int:
    for level, names in enumerate(REPRODUCE_FLOORS):
        if name in names:
            return level
    raise AssertionError(f"suite.reproduce.{name} has no floor in REPRODUCE_FLOORS")


def reproduce_imports(path: Path, inside_functions_only: bool = False) -> set[str]:
    """Modules of ``suite.reproduce`` that ``path`` imports (anywhere in the file, or only
    inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nodes: list[ast.AST] = list(ast.walk(tree))
    if inside_functions_only:
        functions = [n for n in nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        nodes = [inner for f in functions for inner in ast.walk(f)]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "suite.reproduce":
                names = [f"suite.reproduce.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["suite", "reproduce"] and len(parts) > 2:
                found.add(parts[2])
    return found


REPRODUCE_MODULES = sorted(REPRODUCE.glob("*.py"))


@pytest.mark.parametrize("path", REPRODUCE_MODULES, ids=lambda p: p.stem)
def test_a_reproduce_module_imports_only_lower_floors(path: Path) -> None:
    level = reproduce_floor_of(path.stem)
    upward = {n for n in reproduce_imports(path) if reproduce_floor_of(n) >= level}
    assert not upward, f"suite/reproduce/{path.name} (floor {level}) imports {sorted(upward)}"


@pytest.mark.parametrize("path", REPRODUCE_MODULES, ids=lambda p: p.stem)
def test_a_reproduce_module_imports_its_neighbours_at_the_top(path: Path) -> None:
    """With no circle to break, a module of ``reproduce/`` imports the others at its top
    (heavy optional libraries may still load inside the function that needs them)."""
    lazy = reproduce_imports(path, inside_functions_only=True)
    assert not lazy, f"suite/reproduce/{path.name} imports {sorted(lazy)} inside a function"


# --- no import circle anywhere in ``suite/`` ---------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and "TYPE_CHECKING" in ast.unparse(test)


def top_level_imports(path: Path) -> set[str]:
    """The ``suite`` modules that importing ``path`` imports: its module-level import
    statements (inside top-level ``if``/``try`` too, ``if TYPE_CHECKING`` left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path.parent)
    found: set[str] = set()
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If | ast.Try) and not _type_checking(node):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for inner in getattr(node, block, []):
                    pending += inner.body if isinstance(inner, ast.ExceptHandler) else [inner]
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if is_module(candidate) else base)
    return {name for name in found if name.split(".")[0] == "suite" and is_module(name)}


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], _ = 1, path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node], _ = 2, path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_import_circle_in_suite() -> None:
    graph = {module_name(p): top_level_imports(p) - {module_name(p)} for p in MODULES}
    cycle = import_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_circle_check_sees_a_circle() -> None:
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": set()}) is None
