"""A board's rows and words, shared by the Markdown and HTML pages: its columns and cells
(figures through :func:`suite.units.format_cell`), title and description.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from suite.leaderboard.ranking import (
    LEVEL_TEXT,
    Group,
    Item,
    budget_text,
    groups,
    versus_best,
)
from suite.leaderboard.schema import FILENAME_PATTERN, Submission
from suite.results import MetricSpec
from suite.stats import Interval
from suite.units import format_cell


def metric_cell(spec: MetricSpec, interval: Interval) -> str:
    """A metric's cell: sizes in bytes and counts (the same on every seed) in human units,
    other figures as mean ± 90% CI half-width (samples/s with thousands separated)."""
    size = spec.kind == "size" and spec.unit == "bytes"
    thousands = spec.unit == "samples/s"
    spread = interval.half_width
    shown = not size and math.isfinite(interval.low) and spread != 0
    return format_cell(
        interval.mean,
        spread if shown else None,
        unit="bytes" if size else "",
        kind=spec.kind,
        decimals=0 if thousands else 4,
        thousands=thousands,
        missing="nan",
    )


def metric_header(spec: MetricSpec, metric: str) -> str:
    """A column's label with its unit (bytes shown in human units need none)."""
    if spec.kind == "size" and spec.unit == "bytes":
        return spec.label_for(metric)
    return spec.unit_label(metric)


def direction_text(spec: MetricSpec) -> str:
    return "higher is better" if spec.higher_is_better else "lower is better"


def safe_url(url: str | None) -> str | None:
    """``url`` if it is a plain http(s) URL (re-checked here, whatever the schema said)."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if re.search(r"[\s<>\"'`\\\x00-\x1f\x7f]", url):
        return None
    return url


def file_link(name: str) -> str | None:
    return f"submissions/{name}" if FILENAME_PATTERN.match(name) else None


@dataclass(frozen=True)
class Cell:
    text: str
    sort: str
    numeric: bool = False
    link: str | None = None
    link_text: str = ""
    more: tuple[tuple[str, str], ...] = ()  # further (text, link) pairs after the link


@dataclass(frozen=True)
class Column:
    """A column of a board: its header, tooltip, whether shown by default, and a key."""

    key: str
    head: str
    title: str = ""
    shown: bool = True


Row = list[tuple[Column, Cell]]
"""A board's row: each column with its cell."""

VERSUS = Column("versus", "vs #1", "{primary} against #1: one-sided tests at 5%, TOST for a tie")
STATUS = Column(
    "status",
    "Status",
    "verified: a re-run reproduced a recorded seed; stale: this suite can no "
    "longer re-run it as recorded",
)
FILES = Column(
    "file",
    "Files",
    "the submission file, its full config, and its record: seeds, MLflow runs, "
    "environment and the re-runs that reproduced it",
)


def row_cells(group: Group, rank: int | None, item: Item) -> Row:
    """The columns of one row, shared by the Markdown and HTML tables. ``rank`` is None for
    an unverified entry, which gets no rank."""
    s = item.sub
    rank_text = str(rank) if rank is not None else "–"
    rank_sort = str(rank) if rank is not None else ""
    return [
        (Column("rank", "#", "rank among verified entries"), Cell(rank_text, rank_sort, True)),
        (Column("model", "Model"), Cell(s.model, s.model)),
        (Column("embedding", "Embedding"), Cell(s.embedding, s.embedding)),
        *metric_cells(group, item),
        *record_cells(group, item),
    ]


def metric_cells(group: Group, item: Item) -> Row:
    """The board's metrics for ``item``: mean ± 90% CI half-width, ``–`` where it has none."""
    cells = []
    for name in group.metrics:
        spec = group.spec(name)
        column = Column(
            name,
            metric_header(spec, name),
            f"{name}: {direction_text(spec)}; mean ± {LEVEL_TEXT} CI half-width over the seeds",
            name in group.shown,
        )
        summary = item.sub.metrics.get(name)
        if summary is None:
            cells.append((column, Cell("–", "", True)))
        else:
            text = metric_cell(spec, item.interval(name))
            cells.append((column, Cell(text, repr(summary.mean), True)))
    return cells


def record_cells(group: Group, item: Item) -> Row:
    """``item`` against #1, its status, seeds, who, when, where, and its files."""
    s = item.sub
    versus, versus_key = versus_best(group, item)
    status = item.status
    env = s.environment
    device = f"{env.device} ({env.device_name}, {env.threads} thr)"
    versus_column = Column(VERSUS.key, VERSUS.head, VERSUS.title.format(primary=group.primary))
    files = Cell(
        "",
        item.file,
        link=file_link(item.file),
        link_text="json",
        more=(("config", f"#config-{item.anchor}"), ("record", f"#record-{item.anchor}")),
    )
    return [
        (versus_column, Cell(versus, versus_key)),
        (STATUS, Cell(status, status)),
        (Column("seeds", "Seeds"), Cell(str(len(s.seeds)), str(len(s.seeds)), True)),
        (Column("submitter", "Submitter"), Cell(s.submitter, s.submitter.lower())),
        (Column("date", "Date", shown=False), Cell(s.date.isoformat(), s.date.isoformat())),
        (Column("device", "Device", shown=False), Cell(device, device.lower())),
        (Column("config", "Config", shown=False), Cell(s.config_hash, s.config_hash)),
        (Column("paper", "Paper"), Cell("", "", link=safe_url(s.paper), link_text="paper")),
        (FILES, files),
        (Column("notes", "Notes", shown=False), Cell(s.notes or "", (s.notes or "").lower())),
    ]


def board_rows(group: Group) -> list[Row]:
    """Every row of a board in rank order; verified entries are numbered, others not."""
    rows, rank = [], 0
    for item in group.items:
        rank += item.ranked
        rows.append(row_cells(group, rank if item.ranked else None, item))
    return rows


def count_text(n: int) -> str:
    """``400k``, ``1.5M``, ``12345``: a row count as people say it."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % (size // 10) == 0:
            return f"{n / size:g}{unit}"
    return str(n)


def data_text(fingerprint: str, per_seed_draws: bool) -> str:
    """The data in a title: ``data <fingerprint[:12]>``, or where each seed trained on its
    own draw, ``data: per-seed draws <digest[:12]>``."""
    if per_seed_draws:
        return f"data: per-seed draws {fingerprint[:12]}"
    return f"data {fingerprint[:12]}"


def data_title(group: Group) -> str:
    """What the board's data and task are: dataset, protocol (when not the default),
    training rows (else the data fingerprint; per-seed draws always name their digest) and
    task."""
    parts = [group.dataset]
    if group.protocol != "default":
        parts.append(f"{group.protocol} protocol")
    if group.train_rows is not None:
        parts.append(f"{count_text(group.train_rows)} train rows")
    if group.train_rows is None or group.per_seed_draws:
        parts.append(data_text(group.fingerprint, group.per_seed_draws))
    parts.append(group.task)
    return " · ".join(parts)


def base_title(group: Group) -> str:
    """:func:`data_title` and the board's budget, if it has one."""
    if group.budget is None:
        return data_title(group)
    return f"{data_title(group)} · budget {budget_text(group.budget)}"


def board_of_submission(sub: Submission) -> str:
    """The title of the board ``sub`` lands on, with its data fingerprint (short; per-seed
    draws' title names their digest already)."""
    group = groups([Item(sub.filename(), sub)])[0]
    if group.per_seed_draws:
        return base_title(group)
    return f"{base_title(group)} (data {sub.data_fingerprint[:12]})"


def group_titles(boards: list[Group]) -> dict[str, str]:
    """Board id -> title naming what it compares: dataset, protocol (when not the default),
    training rows (else the data fingerprint), task and budget, e.g. ``criteo-synth · 400k
    train rows · accuracy · budget 1/4``; where boards of one such data title hold more than
    one data fingerprint, each of them also names its fingerprint (a board of per-seed
    draws always names their digest: ``data: per-seed draws <digest>``)."""
    prints: dict[str, set[str]] = {}
    for g in boards:
        prints.setdefault(data_title(g), set()).add(g.fingerprint)
    return {
        g.gid: base_title(g)
        if len(prints[data_title(g)]) == 1 or g.train_rows is None
        else f"{base_title(g)} · {data_text(g.fingerprint, g.per_seed_draws)}"
        for g in boards
    }


def budget_meta(group: Group) -> str:
    """What the board's budget admits, or ``""`` for a board not split by budget."""
    if group.budget is None:
        return ""
    if group.budget == 0:
        admits = "more than 1/2 of its model's full tables' total embedding bytes"
    else:
        low, high = budget_text(group.budget + 1), budget_text(group.budget)
        admits = f"at most {high}, and more than {low}, of its model's full tables' total embedding bytes"
    return f"Budget {budget_text(group.budget)}: each entry takes {admits} on this data. "


def data_meta(group: Group) -> str:
    """The board's data in its description: its fingerprint, or what per-seed draws are."""
    if group.per_seed_draws:
        return (
            "data: per-seed draws (each seed trained on its own draw of the data, and seed s "
            "of every entry here on the same one; the seeds' fingerprints digest to "
            f"{group.fingerprint[:12]})"
        )
    return f"data fingerprint {group.fingerprint[:12]}"


def group_meta(group: Group) -> str:
    spec = group.spec(group.primary)
    rows = "" if group.train_rows is None else f"{group.train_rows:,} train rows, "
    return (
        f"Protocol {group.protocol}, {rows}{data_meta(group)}. "
        + budget_meta(group)
        + f"Ranked by {spec.label_for(group.primary)} ({direction_text(spec)}); verified entries "
        "rank first, stale ones (this suite can no longer re-run them as recorded) and "
        "unverified ones (no re-run has reproduced them yet) follow without a rank. Figures "
        f"are the mean ± the half-width of the {LEVEL_TEXT} Student-t confidence "
        "interval over the seeds (the level of the one-sided 5% tests). vs #1: the primary metric against the #1 entry, paired by "
        "seed (Welch's variance where the seeds differ), by the reproductions' rule: worse "
        "or better by more than the field's margin (0.001 for AUC and log loss) in a "
        "one-sided test at 5%, tie when TOST shows it within the margin, else undecided "
        "with the seeds that 80% power would need."
    )
