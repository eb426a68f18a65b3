"""Rendering validated submissions to ``leaderboard/README.md`` and ``leaderboard/index.html``.

One table per dataset x task (and protocol and data fingerprint, so a table only ever
compares runs on the same data), ranked by the task's primary metric. The output depends
only on the submissions (sorted; no clock), so re-rendering reproduces the checked-in
files byte for byte.

The HTML page is self-contained: inline CSS and JS, no external assets, and a
Content-Security-Policy that allows only that inline script and style (by hash). Every
string from a submission is escaped with ``html.escape``; the chart data sits in a
``<script type="application/json">`` block with ``<``, ``>``, ``&`` and U+2028/9 escaped,
and the script builds the chart with ``createElementNS``/``textContent`` only. A link to
``index.html#config-<entry>`` or ``#record-<entry>`` (the Markdown board's links) opens and
shows that entry's block; open blocks wrap inside the Files column.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from tabulate import tabulate

from suite.leaderboard.fingerprints import write_atomic
from suite.leaderboard.metrics import primary_metric, spec_for
from suite.leaderboard.schema import FILENAME_PATTERN, Submission, slug
from suite.leaderboard.verified import Verification
from suite.results import MetricSpec
from suite.stats import Interval, mean_ci
from suite.units import human_bytes

MEMORY_METRIC = "embedding_bytes"
README = "README.md"
INDEX = "index.html"


@dataclass(frozen=True)
class Item:
    """A submission, the name of its file under ``submissions/`` and whether a re-run has
    reproduced it (a record in ``verifications.yaml``)."""

    file: str
    sub: Submission
    verified: bool = False
    stale: str | None = None  # why this suite can no longer re-run it as recorded
    records: tuple[Verification, ...] = ()  # the re-runs that reproduced it

    @property
    def status(self) -> str:
        """``verified`` (ranked), ``stale`` or ``unverified`` (both listed without a rank)."""
        if self.stale:
            return "stale"
        return "verified" if self.verified else "unverified"

    @property
    def ranked(self) -> bool:
        return self.status == "verified"

    @property
    def anchor(self) -> str:
        """The file's stem: a safe HTML id (lower-case letters, digits, dots, dashes)."""
        return Path(self.file).stem if FILENAME_PATTERN.match(self.file) else "entry"

    def values(self, metric: str) -> list[float]:
        return [run.metrics[metric] for run in self.sub.seeds if metric in run.metrics]

    def interval(self, metric: str) -> Interval:
        """Mean and 95% Student-t CI of ``metric`` over the submission's seeds."""
        return mean_ci(self.values(metric))


@dataclass(frozen=True)
class Group:
    """The entries of one board: same dataset, protocol, data fingerprint and task.
    ``train_rows`` is the data's training rows where the dataset's options say it."""

    gid: str
    dataset: str
    protocol: str
    fingerprint: str
    task: str
    train_rows: int | None
    primary: str
    metrics: list[str]
    shown: frozenset[str]
    items: list[Item]

    def spec(self, metric: str) -> MetricSpec:
        return spec_for(self.task, metric, group_direction(self, metric))

    @property
    def higher_is_better(self) -> bool:
        return self.spec(self.primary).higher_is_better

    @property
    def has_chart(self) -> bool:
        """Two entries or more, each with the primary metric and the memory figure: one
        entry has nothing to be compared with."""
        return len(self.items) > 1 and all(
            MEMORY_METRIC in i.sub.metrics and self.primary in i.sub.metrics for i in self.items
        )

    @property
    def key(self) -> str:
        """What the board compares: ``dataset/protocol/task/fingerprint-short``."""
        return "/".join((self.dataset, self.protocol, self.task, self.fingerprint[:12]))

    @property
    def best(self) -> Item:
        """The entry ranked #1 (verified entries rank above unverified ones)."""
        return self.items[0]


def choose_primary(task: str, metrics: Iterable[str], subs: list[Submission]) -> str:
    """The task's declared primary metric; else the first declared-primary pattern match;
    else the first metric higher-is-better for every entry."""
    names = sorted(metrics)
    declared = primary_metric(task)
    if declared in names:
        return declared
    for name in names:
        spec = spec_for(task, name)
        if spec.primary:
            return name
    better = [n for n in names if all(s.metrics[n].higher_is_better for s in subs)]
    return (better or names)[0]


def train_rows(sub: Submission) -> int | None:
    """The training rows the submission's data has, where its dataset options say it."""
    options = sub.config.get("dataset", {}).get("options")
    rows = options.get("train_rows") if isinstance(options, dict) else None
    return rows if isinstance(rows, int) and not isinstance(rows, bool) else None


def groups(items: Iterable[Item]) -> list[Group]:
    """Boards in a fixed order, keyed by dataset, task, protocol and data fingerprint, each
    ranked: verified entries first, then stale and unverified ones, each by the primary
    metric's mean."""
    by_key: dict[tuple[str, str, str, str], list[Item]] = {}
    for item in sorted(items, key=lambda i: i.file):
        s = item.sub
        by_key.setdefault((s.dataset, s.task, s.protocol, s.data_fingerprint), []).append(item)
    out = []
    for (dataset, task, protocol, fingerprint), members in sorted(by_key.items()):
        shared = set.intersection(*(set(i.sub.metrics) for i in members))
        primary = choose_primary(task, shared, [i.sub for i in members])
        sign = -1.0 if members[0].sub.metrics[primary].higher_is_better else 1.0
        members.sort(
            key=lambda i: (
                not i.ranked,
                sign * i.sub.metrics[primary].mean,
                str(i.sub.date),
                i.file,
            )
        )
        names = set().union(*(set(i.sub.metrics) for i in members)) - {primary}
        shown = frozenset(m for m in names if spec_for(task, m).shown) | {primary}
        ordered = sorted(names, key=lambda m: (m not in shown, m))
        rows = {train_rows(i.sub) for i in members}
        out.append(
            Group(
                "board-" + slug(f"{dataset}-{protocol}-{task}-{fingerprint[:12]}"),
                dataset,
                protocol,
                fingerprint,
                task,
                rows.pop() if len(rows) == 1 else None,
                primary,
                [primary, *ordered],
                shown,
                members,
            )
        )
    return out


# -- statistics ---------------------------------------------------------------------------


MARGINS = {"test_auc": 0.001, "val_auc": 0.001, "test_logloss": 0.001, "val_logloss": 0.001}
"""The field's practical margin per primary metric (0 for others)."""


def versus_best(group: Group, item: Item) -> tuple[str, str]:
    """(text, sort key) of how ``item`` compares with the board's #1 on the primary metric,
    by the reproductions' rule (``suite.decisions``): paired by seed where both ran the same
    seeds, else Welch's unpaired variance; ``worse`` / ``better`` by more than the field's
    margin (one-sided 5%), ``tie`` within it (TOST), else ``undecided`` with the seeds it
    would need."""
    from suite.decisions import compare_noise, noise_of, unpaired_noise

    best = group.best
    if item is best:
        return "best", "0"
    metric, margin = group.primary, MARGINS.get(group.primary, 0.0)
    mine, theirs = _by_seed(item, metric), _by_seed(best, metric)
    if len(mine) < 2 or len(theirs) < 2:
        return "–", "3"
    if set(mine) == set(theirs):
        diffs = [mine[s] - theirs[s] for s in sorted(mine)]
        estimate, noise = sum(diffs) / len(diffs), noise_of(diffs)
    else:
        a, b = list(mine.values()), list(theirs.values())
        estimate, noise = sum(a) / len(a) - sum(b) / len(b), unpaired_noise(a, b)
    found = compare_noise(estimate, noise, group.higher_is_better, margin)
    p = format_p(found.test.p)
    if found.label == "B better":
        return f"worse ({p})", "2"
    if found.label == "A better":
        return f"better ({p})", "2"
    if found.label == "same within margin":
        return f"tie ({p}, within {margin:g})", "1"
    if found.label == "not measurable":
        return "–", "3"
    return found.label.replace("underpowered", "undecided"), "1"


def _by_seed(item: Item, metric: str) -> dict[int, float]:
    return {run.seed: run.metrics[metric] for run in item.sub.seeds if metric in run.metrics}


def format_p(p: float) -> str:
    """A p-value with its relation: ``p=0.032``; ``p<0.001`` and ``p>0.999`` where three
    decimals would round it to 0 or 1; ``p n/a`` for no value."""
    if not math.isfinite(p):
        return "p n/a"
    if p < 0.001:
        return "p<0.001"
    if p > 0.999:
        return "p>0.999"
    return f"p={p:.3f}"


# -- formatting ---------------------------------------------------------------------------


def human_count(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def decimals_for(half_width: float, digits: int = 2) -> int:
    """Decimal places that show ``half_width`` with ``digits`` significant digits."""
    if not math.isfinite(half_width) or half_width <= 0:
        return 4
    return max(0, digits - 1 - math.floor(math.log10(half_width)))


def format_interval(interval: Interval, thousands: bool = False) -> str:
    """``mean ± half-width`` with the half-width to two significant digits and the mean to
    the same decimal place (a CI of 4e-5 shows as ``0.71100 ± 0.000040``, never ``±
    0.0000``); a single value or a zero-width interval shows the mean alone."""
    sep = "," if thousands else ""
    if not math.isfinite(interval.low) or interval.half_width == 0:
        places = 0 if thousands else 4
        return f"{interval.mean:{sep}.{places}f}"
    places = min(decimals_for(interval.half_width), 10)
    return f"{interval.mean:{sep}.{places}f} ± {interval.half_width:{sep}.{places}f}"


def format_metric(spec: MetricSpec, interval: Interval) -> str:
    """A metric's cell: sizes and counts (the same on every seed) in human units, other
    figures as mean ± 95% CI half-width."""
    if spec.kind == "size" and spec.unit == "bytes":
        return human_bytes(interval.mean)
    if spec.kind == "count":
        return human_count(interval.mean)
    return format_interval(interval, thousands=spec.unit == "samples/s")


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


def row_cells(group: Group, rank: int | None, item: Item) -> list[tuple[Column, Cell]]:
    """The columns of one row, shared by the Markdown and HTML tables. ``rank`` is None for
    an unverified entry, which gets no rank."""
    s = item.sub
    rank_text = str(rank) if rank is not None else "–"
    rank_sort = str(rank) if rank is not None else ""
    cells = [
        (Column("rank", "#", "rank among verified entries"), Cell(rank_text, rank_sort, True)),
        (Column("model", "Model"), Cell(s.model, s.model)),
        (Column("embedding", "Embedding"), Cell(s.embedding, s.embedding)),
    ]
    for name in group.metrics:
        spec = group.spec(name)
        column = Column(
            name,
            metric_header(spec, name),
            f"{name}: {direction_text(spec)}; mean ± 95% CI half-width over the seeds",
            name in group.shown,
        )
        summary = s.metrics.get(name)
        if summary is None:
            cells.append((column, Cell("–", "", True)))
        else:
            text = format_metric(spec, item.interval(name))
            cells.append((column, Cell(text, repr(summary.mean), True)))
    versus, versus_key = versus_best(group, item)
    status = item.status
    env = s.environment
    device = f"{env.device} ({env.device_name}, {env.threads} thr)"
    cells += [
        (
            Column(
                "versus",
                "vs #1",
                f"{group.primary} against #1: one-sided tests at 5%, TOST for a tie",
            ),
            Cell(versus, versus_key),
        ),
        (
            Column(
                "status",
                "Status",
                "verified: a re-run reproduced a recorded seed; stale: this suite can no "
                "longer re-run it as recorded",
            ),
            Cell(status, status),
        ),
        (Column("seeds", "Seeds"), Cell(str(len(s.seeds)), str(len(s.seeds)), True)),
        (Column("submitter", "Submitter"), Cell(s.submitter, s.submitter.lower())),
        (Column("date", "Date", shown=False), Cell(s.date.isoformat(), s.date.isoformat())),
        (Column("device", "Device", shown=False), Cell(device, device.lower())),
        (Column("config", "Config", shown=False), Cell(s.config_hash, s.config_hash)),
        (Column("paper", "Paper"), Cell("", "", link=safe_url(s.paper), link_text="paper")),
        (
            Column(
                "file",
                "Files",
                "the submission file, its full config, and its record: seeds, MLflow runs, "
                "environment and the re-runs that reproduced it",
            ),
            Cell(
                "",
                item.file,
                link=file_link(item.file),
                link_text="json",
                more=(("config", f"#config-{item.anchor}"), ("record", f"#record-{item.anchor}")),
            ),
        ),
        (Column("notes", "Notes", shown=False), Cell(s.notes or "", (s.notes or "").lower())),
    ]
    return cells


def board_rows(group: Group) -> list[list[tuple[Column, Cell]]]:
    """Every row of a board in rank order; verified entries are numbered, others not."""
    rows, rank = [], 0
    for item in group.items:
        rank += item.ranked
        rows.append(row_cells(group, rank if item.ranked else None, item))
    return rows


def group_direction(group: Group, name: str) -> bool:
    for item in group.items:
        if name in item.sub.metrics:
            return item.sub.metrics[name].higher_is_better
    return True


def count_text(n: int) -> str:
    """``400k``, ``1.5M``, ``12345``: a row count as people say it."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % (size // 10) == 0:
            return f"{n / size:g}{unit}"
    return str(n)


def base_title(group: Group) -> str:
    parts = [group.dataset]
    if group.protocol != "default":
        parts.append(f"{group.protocol} protocol")
    if group.train_rows is not None:
        parts.append(f"{count_text(group.train_rows)} train rows")
    else:
        parts.append(f"data {group.fingerprint[:12]}")
    return " · ".join([*parts, group.task])


def board_of_submission(sub: Submission) -> str:
    """The title of the board ``sub`` lands on, with its data fingerprint (short)."""
    group = groups([Item(sub.filename(), sub)])[0]
    return f"{base_title(group)} (data {sub.data_fingerprint[:12]})"


def group_titles(boards: list[Group]) -> dict[str, str]:
    """Board id -> title naming what it compares: dataset, protocol (when not the default),
    training rows (else the data fingerprint) and task, e.g. ``criteo-synth · 400k train
    rows · accuracy``; boards that would share a title also name their data fingerprint."""
    base = {g.gid: base_title(g) for g in boards}
    seen: dict[str, int] = {}
    for title in base.values():
        seen[title] = seen.get(title, 0) + 1
    return {
        g.gid: base[g.gid]
        if seen[base[g.gid]] == 1 or g.train_rows is None
        else f"{base[g.gid]} · data {g.fingerprint[:12]}"
        for g in boards
    }


def group_meta(group: Group) -> str:
    spec = group.spec(group.primary)
    rows = "" if group.train_rows is None else f"{group.train_rows:,} train rows, "
    return (
        f"Protocol {group.protocol}, {rows}data fingerprint {group.fingerprint[:12]}. "
        f"Ranked by {spec.label_for(group.primary)} ({direction_text(spec)}); verified entries "
        "rank first, stale ones (this suite can no longer re-run them as recorded) and "
        "unverified ones (no re-run has reproduced them yet) follow without a rank. Figures "
        "are the mean ± the half-width of the 95% Student-t confidence "
        "interval over the seeds. vs #1: the primary metric against the #1 entry, paired by "
        "seed (Welch's variance where the seeds differ), by the reproductions' rule: worse "
        "or better by more than the field's margin (0.001 for AUC and log loss) in a "
        "one-sided test at 5%, tie when TOST shows it within the margin, else undecided "
        "with the seeds that 80% power would need."
    )


# -- Markdown -----------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~<>])")


def md_text(text: str) -> str:
    """Plain text for a Markdown table cell: one line, HTML and Markdown escaped."""
    flat = " ".join(text.split())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(flat, quote=False))


def md_url(url: str) -> str:
    """A link target that cannot end the link or the table cell: every character that
    Markdown or a GFM table reads is percent-encoded."""
    out = []
    for ch in url:
        if ch in "()<>|[]\\`* " or ord(ch) < 0x20 or ord(ch) >= 0x7F:
            out.append("".join(f"%{b:02X}" for b in ch.encode()))
        else:
            out.append(ch)
    return "".join(out)


def md_link(text: str, url: str) -> str:
    return f"[{md_text(text)}]({md_url(url)})"


def md_cell(cell: Cell) -> str:
    """A Markdown cell; an in-page link (``#config-...``) points into ``index.html``, where
    the full config and record are."""
    if not cell.link:
        return md_text(cell.text)
    pairs = [(cell.link_text, cell.link), *cell.more]
    return " ".join(
        md_link(text, f"{INDEX}{link}" if link.startswith("#") else link) for text, link in pairs
    )


def markdown_table(rows: list[list[tuple[Column, Cell]]]) -> str:
    """A GFM table of the columns shown by default, written by ``tabulate`` from cells
    escaped one by one (so no cell text can add or remove a column)."""
    keep = [n for n, (column, _) in enumerate(rows[0]) if column.shown]
    heads = [md_text(rows[0][n][0].head) for n in keep]
    body = [[md_cell(row[n][1]) for n in keep] for row in rows]
    align = ["right" if rows[0][n][1].numeric else "left" for n in keep]
    return tabulate(body, headers=heads, tablefmt="pipe", colalign=align, disable_numparse=True)


def render_markdown(items: list[Item]) -> str:
    boards = groups(items)
    lines = [
        "# recsuite leaderboard",
        "",
        f"Generated by `suite leaderboard render` from the {len(items)} submission file(s) in",
        "[`submissions/`](submissions/); do not edit by hand. An interactive version with",
        "every column (sort, filter, quality-vs-memory chart) is [`index.html`](index.html).",
        "",
        "To submit: run one config with at least three seeds, then `suite submit` (from a",
        "multi-seed MLflow parent run, MLflow run ids or result JSON files), check it with",
        "`suite leaderboard validate`, and re-render with `suite leaderboard render`. An entry",
        "is *verified* once `suite leaderboard verify FILE --record` has re-run a recorded seed",
        "and reproduced its metrics (sizes exactly; AUC and log loss exactly on the CPU model,",
        "threads and versions that made it, else within 3e-3 absolute, as x86 CPUs with other",
        "vector kernels round differently: up to 1.5e-3 AUC measured on the shipped 400k-row",
        "entries); until then it is listed below the verified entries,",
        "without a rank; *stale* entries (this suite can no longer re-run them as recorded)",
        "are listed there too. Each board holds entries on one dataset, protocol, data",
        "fingerprint and task only; its title says which.",
        "",
    ]
    if not boards:
        lines += ["No submissions yet.", ""]
    titles = group_titles(boards)
    for group in boards:
        lines += [f"## {md_text(titles[group.gid])}", "", md_text(group_meta(group)), ""]
        lines += [markdown_table(board_rows(group)), ""]
    return "\n".join(lines)


# -- HTML ---------------------------------------------------------------------------------


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
                "points": points,
            }
        )
    return {"charts": out}


def _options(values: Iterable[str]) -> str:
    return "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in sorted(set(values)))


def _html_table(group: Group) -> list[str]:
    rows = board_rows(group)
    order = "descending" if group.higher_is_better else "ascending"
    out = ['<div class="scroll"><table class="board-table">', "<thead><tr>"]
    for column, cell in rows[0]:
        kind = "num" if cell.numeric else "text"
        better = ""
        if column.key in group.metrics:
            better = (
                f' data-better="{"high" if group.spec(column.key).higher_is_better else "low"}"'
            )
        # the board arrives ranked by the primary metric: its header says so from the start
        sort = order if column.key == group.primary else "none"
        extra = "" if column.shown else ' class="extra"'
        title = f' title="{esc(column.title)}"' if column.title else ""
        out.append(
            f'<th scope="col"{extra} data-type="{kind}"{better} aria-sort="{sort}"{title}>'
            f'<button type="button">{esc(column.head)}</button></th>'
        )
    out.append("</tr></thead><tbody>")
    for n, (item, row) in enumerate(zip(group.items, rows, strict=True)):
        s = item.sub
        search = " ".join((s.model, s.embedding, s.submitter)).lower()
        status = item.status
        out.append(
            f'<tr id="{group.gid}-r{n}" class="{status}" data-rank="{n}" '
            f'data-method="{esc(s.embedding)}" data-search="{esc(search)}">'
        )
        for column, cell in row:
            if column.key == "file":
                body = f"{_link_html(cell)} " + " ".join(details_html(k, item) for k in DETAILS)
            elif cell.link:
                body = (
                    f'<a href="{esc(cell.link)}" rel="noopener noreferrer nofollow">'
                    f"{esc(cell.link_text)}</a>"
                )
            else:
                body = esc(cell.text)
            kinds = ("num" if cell.numeric else "", "" if column.shown else "extra")
            classes = " ".join(c for c in (*kinds, "files" if column.key == "file" else "") if c)
            cls = f' class="{classes}"' if classes else ""
            out.append(f'<td{cls} data-sort="{esc(cell.sort)}">{body}</td>')
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return out


DETAILS = ("config", "record")


def config_yaml(item: Item) -> str:
    """The submission's full recorded config as YAML (each seed ran it with its own
    ``seed``)."""
    seeds = ", ".join(str(run.seed) for run in item.sub.seeds)
    head = f"# config {item.sub.config_hash}; seed {seeds} (one run each)\n"
    return head + yaml.safe_dump(item.sub.config, sort_keys=False, allow_unicode=True)


def record_yaml(item: Item) -> str:
    """Where the entry's figures come from: its file, MLflow runs, seeds' config hashes,
    environment and the re-runs that reproduced it (``verifications.yaml``)."""
    s = item.sub
    data = {
        "file": f"submissions/{item.file}",
        "status": item.status,
        "mlflow_parent_run_id": s.mlflow_parent_run_id,
        "seeds": [
            {"seed": r.seed, "config_hash": r.config_hash, "mlflow_run_id": r.mlflow_run_id}
            for r in s.seeds
        ],
        "environment": s.environment.model_dump(mode="json", exclude_none=True),
        "verifications": [r.model_dump(mode="json") for r in item.records],
    }
    if item.stale:
        data["stale"] = item.stale
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def details_html(key: str, item: Item) -> str:
    """An entry's full config or record as an expandable block with a linkable id."""
    text = config_yaml(item) if key == "config" else record_yaml(item)
    return (
        f'<details id="{key}-{esc(item.anchor)}"><summary>{key}</summary>'
        f"<pre>{esc(text)}</pre></details>"
    )


def _link_html(cell: Cell) -> str:
    if not cell.link:
        return ""
    return (
        f'<a href="{esc(cell.link)}" rel="noopener noreferrer nofollow">{esc(cell.link_text)}</a>'
    )


def render_html(items: list[Item]) -> str:
    boards = groups(items)
    subs = [i.sub for i in items]
    body = [
        "<header>",
        "<h1>recsuite leaderboard</h1>",
        f"<p>Generated by <code>suite leaderboard render</code> from {len(items)} submission "
        "file(s) in <code>submissions/</code>; do not edit by hand. Click a column header to "
        "sort (the first click puts the best first; again to reverse); the filters apply to "
        "every table and chart. Hover a header for its metric and direction.</p>",
        "</header>",
        '<form id="filters" role="search">',
        '<label>Dataset <select id="filter-dataset"><option value="">all</option>'
        f"{_options(s.dataset for s in subs)}</select></label>",
        '<label>Task <select id="filter-task"><option value="">all</option>'
        f"{_options(s.task for s in subs)}</select></label>",
        '<label>Embedding method <select id="filter-method"><option value="">all</option>'
        f"{_options(s.embedding for s in subs)}</select></label>",
        '<label>Search <input id="filter-text" type="search" autocomplete="off" '
        'placeholder="model, method or submitter"></label>',
        '<label><input id="all-columns" type="checkbox"> all columns</label>',
        "</form>",
    ]
    if not boards:
        body.append("<p>No submissions yet.</p>")
    titles = group_titles(boards)
    for group in boards:
        body += [
            f'<section class="board" id="{group.gid}" data-dataset="{esc(group.dataset)}" '
            f'data-task="{esc(group.task)}" data-key="{esc(group.key)}">',
            f"<h2>{esc(titles[group.gid])}</h2>",
            f'<p class="meta">{esc(group_meta(group))}</p>',
        ]
        if group.has_chart:
            direction = "higher" if group.higher_is_better else "lower"
            quality = group.spec(group.primary).label_for(group.primary)
            memory = group.spec(MEMORY_METRIC).label_for(MEMORY_METRIC)
            body += [
                '<figure class="chart">',
                f'<svg id="chart-{group.gid}" role="img" viewBox="0 0 640 320" '
                f'aria-label="{esc(quality)} against {esc(memory)}"></svg>',
                f"<figcaption>{esc(quality)} ({direction} is better) against "
                f"{esc(memory.lower())} (log scale); the line joins the entries no other entry "
                "beats with less memory; bars are the 95% confidence intervals over the seeds; "
                "hollow points are not verified.</figcaption>",
                "</figure>",
            ]
        body += _html_table(group)
        body.append("</section>")
    body.append('<p id="no-match" hidden>No entries match the filters.</p>')
    data = json_for_script(chart_data(boards))
    csp = (
        f"default-src 'none'; script-src {csp_hash(SCRIPT)}; style-src {csp_hash(STYLE)}; "
        "img-src 'none'; base-uri 'none'; form-action 'none'"
    )
    page = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">',
        '<meta name="referrer" content="no-referrer">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>recsuite leaderboard</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        *body,
        f'<script type="application/json" id="leaderboard-data">{data}</script>',
        f"<script>{SCRIPT}</script>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(page)


def write_leaderboard(items: list[Item], out_dir: Path, option: str | None = None) -> list[Path]:
    """Write README.md and index.html into ``out_dir`` (atomically); returns the paths. A
    full disk is one line naming ``option``, the setting that moves them."""
    readme, index = out_dir / README, out_dir / INDEX
    write_atomic(readme, render_markdown(items), option)
    write_atomic(index, render_html(items), option)
    return [readme, index]


STYLE = """
:root { --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --accent: #0969da; --bg: #fff; }
[hidden] { display: none !important; }
body { font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg);
  margin: 0 auto; max-width: 1400px; padding: 1rem 1.5rem 3rem; }
h1 { font-size: 1.6rem; margin: 0.5rem 0; }
h2 { font-size: 1.2rem; margin: 2rem 0 0.25rem; }
.meta, figcaption, header p { color: var(--muted); }
#filters { display: flex; flex-wrap: wrap; gap: 0.75rem 1.25rem; margin: 1rem 0;
  padding: 0.75rem; border: 1px solid var(--line); border-radius: 6px; }
#filters label { display: flex; gap: 0.4rem; align-items: center; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: max-content; min-width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: 0.3rem 0.5rem; text-align: left;
  vertical-align: top; white-space: nowrap; }
td:last-child { white-space: normal; min-width: 16rem; max-width: 48rem;
  overflow-wrap: anywhere; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th button { font: inherit; font-weight: 600; background: none; border: 0; padding: 0;
  cursor: pointer; color: inherit; }
th[aria-sort="ascending"] button::after { content: " \\25B2"; }
th[aria-sort="descending"] button::after { content: " \\25BC"; }
.extra { display: none; }
body.all-columns .extra { display: table-cell; }
tr.unverified td { color: var(--muted); }
svg .point.unverified { fill: var(--bg); stroke: var(--accent); stroke-width: 1.5; }
a { color: var(--accent); }
figure.chart { margin: 0.75rem 0; max-width: 720px; }
svg { width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; }
svg .axis { stroke: var(--muted); stroke-width: 1; }
svg .grid { stroke: var(--line); stroke-width: 1; }
svg .front { fill: none; stroke: var(--accent); stroke-width: 1.5; stroke-dasharray: 4 3; }
svg .point { fill: var(--accent); fill-opacity: 0.8; }
svg .errorbar { stroke: var(--accent); stroke-width: 1.2; }
tr.stale td { color: var(--muted); }
td.files { white-space: normal; width: 100%; min-width: 12rem; }
details pre { font-size: 12px; text-align: left; white-space: pre-wrap;
  overflow-wrap: anywhere; width: 0; min-width: 100%; margin: 0.4rem 0; }
svg text { font: 11px system-ui, sans-serif; fill: var(--muted); }
svg text.label { fill: var(--fg); }
"""

SCRIPT = """
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var data = JSON.parse(document.getElementById("leaderboard-data").textContent);
  var sections = Array.prototype.slice.call(document.querySelectorAll("section.board"));

  function node(name, attrs, text) {
    var el = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (key) { el.setAttribute(key, String(attrs[key])); });
    if (text !== undefined) { el.textContent = String(text); }
    return el;
  }

  function humanBytes(v) {
    var units = [["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
    for (var i = 0; i < units.length; i++) {
      if (v >= units[i][1]) { return (v / units[i][1]).toFixed(1) + " " + units[i][0]; }
    }
    return v.toFixed(0) + " B";
  }

  function niceStep(span, count) {
    // the 1, 2 or 5 x 10^k step that cuts span into about count intervals
    var raw = span / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }

  var BYTE_UNITS = [["B", 1], ["KiB", 1024], ["MiB", 1048576], ["GiB", 1073741824]];

  function byteTicks(x0, x1) {
    // the round sizes whose log10 lies in [x0, x1] (1, 2, 5, 10 ... 500 B, KiB, MiB, GiB;
    // every integer mantissa where those give fewer than two; only 1, 10, 100 past eight)
    var ticks = [];
    [[1, 2, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9]].some(function (mantissas) {
      ticks = [];
      BYTE_UNITS.forEach(function (unit) {
        [1, 10, 100].forEach(function (decade) {
          mantissas.forEach(function (m) {
            var t = Math.log10(m * decade * unit[1]);
            if (t >= x0 && t <= x1) { ticks.push({t: t, text: m * decade + " " + unit[0]}); }
          });
        });
      });
      return ticks.length >= 2;
    });
    if (ticks.length > 8) {
      ticks = ticks.filter(function (k) { return /^10* /.test(k.text); });
    }
    return ticks;
  }

  function sortTable(table, index, th) {
    // the first click puts the best first (a metric's own direction; A-Z for text), a
    // second click on the same column reverses; the arrow always shows the order shown
    var current = th.getAttribute("aria-sort");
    var ascending;
    if (current === "ascending") { ascending = false; }
    else if (current === "descending") { ascending = true; }
    else { ascending = th.getAttribute("data-better") !== "high"; }
    table.querySelectorAll("thead th").forEach(function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var numeric = th.getAttribute("data-type") === "num";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[index].getAttribute("data-sort");
      var y = b.cells[index].getAttribute("data-sort");
      var order;
      if (x === "" || y === "") {
        order = (x === "") - (y === "");  // missing values last, either way
      } else {
        if (numeric) {
          var fx = parseFloat(x), fy = parseFloat(y);
          order = fx < fy ? -1 : fx > fy ? 1 : 0;
        } else {
          order = x < y ? -1 : x > y ? 1 : 0;
        }
        if (!ascending) { order = -order; }
      }
      return order || (Number(a.getAttribute("data-rank")) - Number(b.getAttribute("data-rank")));
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  document.querySelectorAll("table.board-table").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th, index) {
      th.querySelector("button").addEventListener("click", function () {
        sortTable(table, index, th);
      });
    });
  });

  function drawChart(chart) {
    var svg = document.getElementById("chart-" + chart.id);
    if (!svg) { return; }
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var points = chart.points.filter(function (p) {
      var row = document.getElementById(p.row);
      return row && !row.hidden && p.memory > 0;
    });
    var W = 640, H = 320, L = 72, R = 24, T = 16, B = 44;
    svg.appendChild(node("line", {"class": "axis", x1: L, y1: H - B, x2: W - R, y2: H - B}));
    svg.appendChild(node("line", {"class": "axis", x1: L, y1: T, x2: L, y2: H - B}));
    svg.appendChild(node("text", {x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle"},
                         chart.memory + " (log scale)"));
    svg.appendChild(node("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle",
                                  transform: "rotate(-90 14 " + ((T + H - B) / 2) + ")"},
                         chart.quality));
    if (!points.length) {
      svg.appendChild(node("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no entries"));
      return;
    }
    var lx = points.map(function (p) { return Math.log10(p.memory); });
    var lows = points.map(function (p) { return Math.min(p.quality, p.ci_low); });
    var highs = points.map(function (p) { return Math.max(p.quality, p.ci_high); });
    var x0 = Math.min.apply(null, lx), x1 = Math.max.apply(null, lx);
    var y0 = Math.min.apply(null, lows), y1 = Math.max.apply(null, highs);
    if (x1 - x0 < 0.2) { x0 -= 0.1; x1 += 0.1; }
    if (y1 - y0 < 1e-3) { y0 -= 5e-4; y1 += 5e-4; }
    var padX = (x1 - x0) * 0.08, padY = (y1 - y0) * 0.05;
    x0 -= padX; x1 += padX; y0 -= padY; y1 += padY;
    // round y ticks (1, 2 or 5 x 10^k apart), the axis widened to the ticks around the data
    var step = niceStep(y1 - y0, 4);
    var first = Math.floor(y0 / step), last = Math.ceil(y1 / step);
    y0 = first * step; y1 = last * step;
    var places = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    function sx(v) { return L + (v - x0) / (x1 - x0) * (W - L - R); }
    function sy(v) { return H - B - (v - y0) / (y1 - y0) * (H - B - T); }
    byteTicks(x0, x1).forEach(function (k) {
      svg.appendChild(node("line", {"class": "grid", x1: sx(k.t), y1: T, x2: sx(k.t), y2: H - B}));
      svg.appendChild(node("text", {"class": "tick x", x: sx(k.t), y: H - B + 14,
                                    "text-anchor": "middle"}, k.text));
    });
    for (var k = first; k <= last; k++) {
      var v = k * step;
      svg.appendChild(node("line", {"class": "grid", x1: L, y1: sy(v), x2: W - R, y2: sy(v)}));
      svg.appendChild(node("text", {"class": "tick y", x: L - 6, y: sy(v) + 4,
                                    "text-anchor": "end"}, v.toFixed(places)));
    }
    var sign = chart.higher_is_better ? 1 : -1;
    var byMemory = points.slice().sort(function (a, b) {
      return a.memory - b.memory || sign * (b.quality - a.quality);
    });
    var front = [], best = -Infinity;
    byMemory.forEach(function (p) {
      if (sign * p.quality > best) { best = sign * p.quality; front.push(p); }
    });
    var path = front.map(function (p) {
      return sx(Math.log10(p.memory)).toFixed(1) + "," + sy(p.quality).toFixed(1);
    }).join(" ");
    svg.appendChild(node("polyline", {"class": "front", points: path}));
    points.forEach(function (p) {
      var g = node("g", {"class": "entry", "data-row": p.row});
      var cx = sx(Math.log10(p.memory)), cy = sy(p.quality);
      // the 95% CI over the seeds: a vertical bar with caps
      var lo = sy(p.ci_low), hi = sy(p.ci_high);
      [[cx, lo, cx, hi], [cx - 4, lo, cx + 4, lo], [cx - 4, hi, cx + 4, hi]].forEach(function (s) {
        g.appendChild(node("line", {"class": "errorbar", x1: s[0].toFixed(1), y1: s[1].toFixed(1),
                                    x2: s[2].toFixed(1), y2: s[3].toFixed(1)}));
      });
      var dot = node("circle", {"class": p.verified ? "point" : "point unverified",
                                cx: cx.toFixed(1), cy: cy.toFixed(1), r: 5});
      dot.appendChild(node("title", {}, p.label + " by " + p.submitter +
                           (p.verified ? "" : " (" + p.status + ")") + ": " + chart.quality +
                           " " + p.quality.toFixed(4) + " (95% CI " + p.ci_low.toFixed(4) +
                           " to " + p.ci_high.toFixed(4) + "), " + humanBytes(p.memory)));
      g.appendChild(dot);
      var right = cx > W * 0.7;
      g.appendChild(node("text", {"class": "label", x: (right ? cx - 8 : cx + 8).toFixed(1),
                                  y: (cy - 8).toFixed(1),
                                  "text-anchor": right ? "end" : "start"}, p.label));
      svg.appendChild(g);
    });
  }

  var filters = {
    dataset: document.getElementById("filter-dataset"),
    task: document.getElementById("filter-task"),
    method: document.getElementById("filter-method"),
    text: document.getElementById("filter-text")
  };

  function applyFilters() {
    var dataset = filters.dataset.value, task = filters.task.value;
    var method = filters.method.value, text = filters.text.value.trim().toLowerCase();
    var shown = 0;
    sections.forEach(function (section) {
      var sectionOk = (!dataset || section.getAttribute("data-dataset") === dataset) &&
                      (!task || section.getAttribute("data-task") === task);
      var visible = 0;
      section.querySelectorAll("tbody tr").forEach(function (row) {
        var ok = sectionOk && (!method || row.getAttribute("data-method") === method) &&
                 (!text || row.getAttribute("data-search").indexOf(text) !== -1);
        row.hidden = !ok;
        if (ok) { visible++; }
      });
      section.hidden = visible === 0;
      shown += visible;
    });
    document.getElementById("no-match").hidden = shown !== 0;
    data.charts.forEach(drawChart);
  }

  var allColumns = document.getElementById("all-columns");
  allColumns.addEventListener("change", function () {
    document.body.classList.toggle("all-columns", allColumns.checked);
  });

  ["dataset", "task", "method"].forEach(function (key) {
    filters[key].addEventListener("change", applyFilters);
  });
  filters.text.addEventListener("input", applyFilters);
  document.getElementById("filters").addEventListener("submit", function (event) {
    event.preventDefault();
  });
  applyFilters();

  function openFromHash() {
    // a link to #config-<entry> or #record-<entry> (the Markdown board's links) opens that
    // block and scrolls to it, clearing the filters first if they hide its row
    var id;
    try { id = decodeURIComponent(window.location.hash.slice(1)); } catch (e) { return; }
    var block = id ? document.getElementById(id) : null;
    if (!block || block.tagName !== "DETAILS") { return; }
    var row = block.closest("tr");
    if (row && row.hidden) {
      Object.keys(filters).forEach(function (key) { filters[key].value = ""; });
      applyFilters();
    }
    block.open = true;
    block.scrollIntoView({block: "start"});
  }

  window.addEventListener("hashchange", openFromHash);
  openFromHash();
})();
"""
