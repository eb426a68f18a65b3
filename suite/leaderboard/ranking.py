"""A leaderboard's boards: entries grouped by what they compare, and ranked.

One board per dataset x task x protocol x data fingerprint x memory budget, so a board only
ever compares runs on the same data at the same budget (the tightest 1/2^k of its model's
full tables' total embedding bytes that an entry fits; one board for all where the data has
no full-table entry); verified entries rank first by the task's primary metric, and each
entry is compared with the board's #1 by the reproductions' rule (:mod:`suite.decisions`,
through :func:`suite.decisions.seed_comparison`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from suite.decisions import INTERVAL_LEVEL, seed_comparison
from suite.leaderboard.metrics import primary_metric, spec_for
from suite.leaderboard.schema import FILENAME_PATTERN, Submission, slug
from suite.leaderboard.verified import Verification
from suite.results import MetricSpec
from suite.stats import Interval, format_p, mean_ci

MEMORY_METRIC = "embedding_bytes"
LEVEL = INTERVAL_LEVEL
LEVEL_TEXT = f"{LEVEL:.0%}"
BUDGET_METRICS = ("embedding_total_bytes", MEMORY_METRIC)
"""What a budget counts: an entry's total embedding bytes (tables, optimizer state and
auxiliary buffers, as the curve's budgets do), its table bytes where it has no total."""


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
        """Mean and 90% Student-t CI (:data:`LEVEL`, the level of every comparison the
        suite makes: two one-sided 5% tests) of ``metric`` over the submission's seeds."""
        return mean_ci(self.values(metric), LEVEL)


@dataclass(frozen=True)
class Group:
    """The entries of one board: same dataset, protocol, data fingerprint and task.
    ``train_rows`` is the data's training rows where the dataset's options say it;
    ``per_seed_draws``: each seed trained on its own draw, and ``fingerprint`` is the digest
    of the seeds' (:func:`~suite.leaderboard.schema.draws_digest`)."""

    gid: str
    dataset: str
    protocol: str
    fingerprint: str
    task: str
    train_rows: int | None
    budget: int | None  # k of the budget 1/2^k of full tables' bytes; None: not split
    primary: str
    metrics: list[str]
    shown: frozenset[str]
    items: list[Item]
    per_seed_draws: bool = False

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
        """What the board compares: ``dataset/protocol/task/fingerprint-short[/budget-k]``."""
        parts = [self.dataset, self.protocol, self.task, self.fingerprint[:12]]
        if self.budget is not None:
            parts.append(f"budget-{self.budget}")
        return "/".join(parts)

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


def budget_exponent(total: float, reference: float) -> int:
    """``k`` of the tightest budget 1/2^k of ``reference`` bytes that ``total`` bytes fit:
    the largest k with 2^-k >= total/reference (0 at or above the reference)."""
    return max(0, math.floor(math.log2(reference / total) + 1e-3))


def budget_text(k: int) -> str:
    """``1``, ``1/2``, ``1/4``, ...: the budget 1/2^k as a fraction."""
    return "1" if k == 0 else f"1/{2**k}"


def budget_bytes(sub: Submission) -> float | None:
    """The bytes a budget counts for ``sub`` (:data:`BUDGET_METRICS`), None without them."""
    for name in BUDGET_METRICS:
        if name in sub.metrics:
            return float(sub.metrics[name].mean)
    return None


def budgets(members: list[Item]) -> dict[str, int | None]:
    """Each member's budget exponent (by file) against the largest full-table entry of its
    model among ``members``; None for a member without such a reference or without bytes.
    All None when no member is a full-table entry."""
    references: dict[str, float] = {}
    for item in members:
        total = budget_bytes(item.sub)
        if item.sub.embedding == "full" and total:
            references[item.sub.model] = max(references.get(item.sub.model, 0.0), total)
    out: dict[str, int | None] = {}
    for item in members:
        total, reference = budget_bytes(item.sub), references.get(item.sub.model)
        out[item.file] = budget_exponent(total, reference) if total and reference else None
    return out


BoardKey = tuple[str, str, str, str, int]


def groups(items: Iterable[Item]) -> list[Group]:
    """Boards in a fixed order (dataset, task, protocol, the most training rows first, then
    the largest budget first), keyed by dataset, task, protocol, data fingerprint and
    budget, each ranked: verified entries first, then stale and unverified ones, each by the
    primary metric's mean."""
    by_data: dict[tuple[str, str, str, str], list[Item]] = {}
    for item in sorted(items, key=lambda i: i.file):
        s = item.sub
        by_data.setdefault((s.dataset, s.task, s.protocol, s.data_fingerprint), []).append(item)
    by_key: dict[BoardKey, list[Item]] = {}
    unsplit = -1  # the budget key of a board that is not split (no full-table reference)
    for data, members in by_data.items():
        found = budgets(members)
        for item in members:
            k = found[item.file]
            by_key.setdefault((*data, unsplit if k is None else k), []).append(item)
    out = []

    def order(entry: tuple[BoardKey, list[Item]]) -> tuple:
        # by dataset, task and protocol; within them the most training rows first
        (dataset, task, protocol, fingerprint, k), members = entry
        rows = max(
            (train_rows(i.sub) or 0 for i in by_data[dataset, task, protocol, fingerprint]),
            default=0,
        )
        return (dataset, task, protocol, -rows, fingerprint, k == unsplit, k)

    for (dataset, task, protocol, fingerprint, k), members in sorted(by_key.items(), key=order):
        budget = None if k == unsplit else k
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
        tail = "" if budget is None else f"-budget-{budget}"
        out.append(
            Group(
                "board-" + slug(f"{dataset}-{protocol}-{task}-{fingerprint[:12]}{tail}"),
                dataset,
                protocol,
                fingerprint,
                task,
                rows.pop() if len(rows) == 1 else None,
                budget,
                primary,
                [primary, *ordered],
                shown,
                members,
                any(i.sub.per_seed_draws for i in members),
            )
        )
    return out


def group_direction(group: Group, name: str) -> bool:
    for item in group.items:
        if name in item.sub.metrics:
            return item.sub.metrics[name].higher_is_better
    return True


MARGINS = {"test_auc": 0.001, "val_auc": 0.001, "test_logloss": 0.001, "val_logloss": 0.001}
"""The field's practical margin per primary metric (0 for others)."""


def versus_best(group: Group, item: Item) -> tuple[str, str]:
    """(text, sort key) of how ``item`` compares with the board's #1 on the primary metric,
    by the reproductions' rule (``suite.decisions``): paired by seed where both ran the same
    seeds, else Welch's unpaired variance; ``worse`` / ``better`` by more than the field's
    margin (one-sided 5%), ``tie`` within it (TOST), else ``undecided`` with the seeds it
    would need."""
    best = group.best
    if item is best:
        return "best", "0"
    metric, margin = group.primary, MARGINS.get(group.primary, 0.0)
    found = seed_comparison(
        _by_seed(item, metric), _by_seed(best, metric), group.higher_is_better, margin
    )
    if found is None:
        return "–", "3"
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
