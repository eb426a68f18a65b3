"""The leaderboard as one HTML page, ``leaderboard/index.html``, from a Jinja2 template.

The page (``templates/leaderboard.html.j2``) is self-contained: its CSS and script
(``templates/leaderboard.css``, ``leaderboard.js``) are inlined, with no external assets,
and a Content-Security-Policy allows only that inline script and style (by hash). Every
value the template writes is escaped with ``html.escape`` (the environment's ``finalize``)
unless it is the page's own Markup; the chart data sits in a ``<script
type="application/json">`` block with ``<``, ``>``, ``&`` and U+2028/9 escaped, and the
script builds the chart with ``createElementNS``/``textContent`` only. A link to
``index.html#config-<entry>`` or ``#record-<entry>`` (the Markdown board's links) opens
and shows that entry's block; open blocks wrap inside the Files column.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from functools import cache
from importlib.resources import files
from typing import Any

import jinja2
import yaml
from markupsafe import Markup

from suite.leaderboard.board import Cell, Column, board_rows, group_meta, group_titles
from suite.leaderboard.ranking import LEVEL_TEXT, MEMORY_METRIC, Group, Item, groups

TEMPLATES = files("suite.leaderboard") / "templates"
WIDE_CHART = 12
"""A board with more entries than this draws its chart the page's full width."""
STYLE = (TEMPLATES / "leaderboard.css").read_text(encoding="utf-8")
SCRIPT = (TEMPLATES / "leaderboard.js").read_text(encoding="utf-8")


def esc(text: object) -> str:
    """HTML-escaped text for element content and quoted attributes."""
    escaped = html.escape(str(text), quote=True)
    return escaped.replace("\u2028", "&#x2028;").replace("\u2029", "&#x2029;")


def json_for_script(data: object) -> str:
    """JSON that cannot end its ``<script>`` block or be read as markup."""
    text = json.dumps(data, sort_keys=True, ensure_ascii=True, allow_nan=False)
    for char, code in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, code)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def chart_data(boards: list[Group]) -> dict[str, object]:
    out = []
    for group in boards:
        if not group.has_chart:
            continue
        points = []
        for n, item in enumerate(group.items):
            s = item.sub
            mean = s.metrics[group.primary].mean
            ci = item.interval(group.primary)
            finite = math.isfinite(ci.low) and math.isfinite(ci.high)
            points.append(
                {
                    "row": f"{group.gid}-r{n}",
                    "label": f"{s.model} + {s.embedding}",
                    "submitter": s.submitter,
                    "quality": mean,
                    "ci_low": ci.low if finite else mean,
                    "ci_high": ci.high if finite else mean,
                    "memory": s.metrics[MEMORY_METRIC].mean,
                    "verified": item.ranked,
                    "status": item.status,
                }
            )
        out.append(
            {
                "id": group.gid,
                "quality": group.spec(group.primary).label_for(group.primary),
                "higher_is_better": group.higher_is_better,
                "memory": group.spec(MEMORY_METRIC).label_for(MEMORY_METRIC),
                "level": LEVEL_TEXT,
                "points": points,
            }
        )
    return {"charts": out}


def config_yaml(item: Item) -> str:
    """The submission's full recorded config as YAML (each seed ran it with its own
    ``seed``)."""
    seeds = ", ".join(str(run.seed) for run in item.sub.seeds)
    head = f"# config {item.sub.config_hash}; seed {seeds} (one run each)\n"
    return head + yaml.safe_dump(item.sub.config, sort_keys=False, allow_unicode=True)


def record_yaml(item: Item) -> str:
    """Where the entry's figures come from: its file, MLflow runs, seeds' config hashes
    (and data fingerprints, where each seed drew its own data), environment and the re-runs
    that reproduced it (``verifications.yaml``)."""
    s = item.sub
    data = {
        "file": f"submissions/{item.file}",
        "status": item.status,
        "mlflow_parent_run_id": s.mlflow_parent_run_id,
        "seeds": [
            {
                "seed": r.seed,
                "config_hash": r.config_hash,
                "mlflow_run_id": r.mlflow_run_id,
                **({"data_fingerprint": r.data_fingerprint} if r.data_fingerprint else {}),
            }
            for r in s.seeds
        ],
        "environment": s.environment.model_dump(mode="json", exclude_none=True),
        "verifications": [r.model_dump(mode="json") for r in item.records],
    }
    if item.stale:
        data["stale"] = item.stale
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _finalize(value: object) -> object:
    """Every value the template writes, escaped unless it is already Markup."""
    return value if isinstance(value, Markup) else Markup(esc(value))


@cache
def template() -> jinja2.Template:
    """The page's template; block tags take their lines with them."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("suite.leaderboard", "templates"),
        autoescape=True,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("leaderboard.html.j2")


def head_view(group: Group, column: Column, cell: Cell) -> dict[str, Any]:
    """A column header: its kind, direction (metrics), sort state and tooltip."""
    better = ""
    if column.key in group.metrics:
        better = "high" if group.spec(column.key).higher_is_better else "low"
    # the board arrives ranked by the primary metric: its header says so from the start
    order = "descending" if group.higher_is_better else "ascending"
    return {
        "head": column.head,
        "title": column.title,
        "shown": column.shown,
        "kind": "num" if cell.numeric else "text",
        "better": better,
        "sort": order if column.key == group.primary else "none",
    }


def cell_view(column: Column, cell: Cell) -> dict[str, Any]:
    """A table cell: its classes, sort key and what it shows (text, a link or the files)."""
    is_files = column.key == "file"
    kinds = ("num" if cell.numeric else "", "" if column.shown else "extra")
    classes = " ".join(c for c in (*kinds, "files" if is_files else "") if c)
    return {
        "classes": classes,
        "label": column.head,
        "sort": cell.sort,
        "files": is_files,
        "link": cell.link,
        "link_text": cell.link_text,
        "text": cell.text,
    }


def board_view(group: Group, title: str) -> dict[str, Any]:
    """What the template needs of one board: title, description, chart and table."""
    rows = board_rows(group)
    chart = None
    if group.has_chart:
        chart = {
            "wide": len(group.items) > WIDE_CHART,
            "direction": "higher" if group.higher_is_better else "lower",
            "quality": group.spec(group.primary).label_for(group.primary),
            "memory": group.spec(MEMORY_METRIC).label_for(MEMORY_METRIC),
            "level": LEVEL_TEXT,
        }
    entries = []
    for n, (item, row) in enumerate(zip(group.items, rows, strict=True)):
        s = item.sub
        entries.append(
            {
                "id": f"{group.gid}-r{n}",
                "status": item.status,
                "rank": n,
                "method": s.embedding,
                "search": " ".join((s.model, s.embedding, s.submitter)).lower(),
                "anchor": item.anchor,
                "config": config_yaml(item),
                "record": record_yaml(item),
                "cells": [cell_view(column, cell) for column, cell in row],
            }
        )
    return {
        "gid": group.gid,
        "dataset": group.dataset,
        "task": group.task,
        "key": group.key,
        "title": title,
        "meta": group_meta(group),
        "chart": chart,
        "heads": [head_view(group, column, cell) for column, cell in rows[0]],
        "rows": entries,
    }


def render_html(items: list[Item]) -> str:
    """The whole ``index.html``: filters, then each board with its chart and table."""
    boards = groups(items)
    subs = [i.sub for i in items]
    titles = group_titles(boards)
    csp = (
        f"default-src 'none'; script-src {csp_hash(SCRIPT)}; style-src {csp_hash(STYLE)}; "
        "img-src 'none'; base-uri 'none'; form-action 'none'"
    )
    return template().render(
        csp=csp,
        style=Markup(STYLE),
        script=Markup(SCRIPT),
        data=Markup(json_for_script(chart_data(boards))),
        count=len(items),
        datasets=sorted({s.dataset for s in subs}),
        tasks=sorted({s.task for s in subs}),
        methods=sorted({s.embedding for s in subs}),
        boards=[board_view(g, titles[g.gid]) for g in boards],
    )
