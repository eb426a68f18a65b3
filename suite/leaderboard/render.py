"""Rendering validated submissions to ``leaderboard/README.md`` and ``leaderboard/index.html``.

One board per dataset x task (and protocol and data fingerprint, so a board only ever
compares runs on the same data), ranked by the task's primary metric
(:mod:`suite.leaderboard.ranking`); its rows, title and description
(:mod:`suite.leaderboard.board`) are written as Markdown (:mod:`suite.leaderboard.markdown`)
and as an HTML page from a Jinja2 template (:mod:`suite.leaderboard.page`). The output
depends only on the submissions (sorted; no clock), so re-rendering reproduces the
checked-in files byte for byte.
"""

from __future__ import annotations

from pathlib import Path

from suite.leaderboard import INDEX, README
from suite.leaderboard.board import (
    Cell,
    Column,
    board_of_submission,
    board_rows,
    row_cells,
    safe_url,
)
from suite.leaderboard.fingerprints import write_atomic
from suite.leaderboard.markdown import md_text, render_markdown
from suite.leaderboard.page import (
    SCRIPT,
    STYLE,
    chart_data,
    csp_hash,
    json_for_script,
    render_html,
)
from suite.leaderboard.ranking import MEMORY_METRIC, Group, Item, groups
from suite.stats import format_p

__all__ = [
    "INDEX",
    "MEMORY_METRIC",
    "README",
    "SCRIPT",
    "STYLE",
    "Cell",
    "Column",
    "Group",
    "Item",
    "board_of_submission",
    "board_rows",
    "chart_data",
    "csp_hash",
    "format_p",
    "groups",
    "json_for_script",
    "md_text",
    "render_html",
    "render_markdown",
    "row_cells",
    "safe_url",
    "write_leaderboard",
]


def write_leaderboard(items: list[Item], out_dir: Path, option: str | None = None) -> list[Path]:
    """Write README.md and index.html into ``out_dir`` (atomically); returns the paths. A
    full disk is one line naming ``option``, the setting that moves them."""
    readme, index = out_dir / README, out_dir / INDEX
    write_atomic(readme, render_markdown(items), option)
    write_atomic(index, render_html(items), option)
    return [readme, index]
