"""Helpers shared by the benchmark scripts: tables and JSON output."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from suite.environment import environment

BENCH_DIR = Path("results/bench")


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """A plain aligned text table."""
    cells = [[_fmt(row.get(c)) for c in columns] for row in rows]
    widths = [
        max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)
    ]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    return "" if value is None else str(value)


def write_json(name: str, payload: dict[str, Any]) -> Path:
    """Write ``results/bench/<name>.json`` atomically, with the environment."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path = BENCH_DIR / f"{name}.json"
    data = {"environment": environment(), **payload}
    fd, tmp = tempfile.mkstemp(dir=BENCH_DIR, prefix=f".{name}.")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
    os.replace(tmp, path)
    return path
