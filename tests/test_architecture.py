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
    {"errors", "fileio", "environment", "kernel_backend", "progress", "units", "hashing"}
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
    {"runs"},
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
