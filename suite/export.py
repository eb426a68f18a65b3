"""Tables for papers: runs, a study's trials or the leaderboard as CSV and LaTeX.

Each source becomes two frames: a numeric one (means, sample stds with ddof=1, counts;
written as CSV for further analysis) and a display one (``mean ± std`` in the metric's
human unit; written as a LaTeX ``tabular`` by pandas' ``to_latex``, which needs jinja2).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from suite.errors import ConfigError
from suite.fileio import write_text_atomic
from suite.units import format_cell, unit_of

if TYPE_CHECKING:
    import pandas as pd

GROUP_BY = ("task", "dataset", "model", "embedding", "group", "data_fingerprint")
"""Default grouping of runs: one row per config (``group``: its hash without the seed)
and data (``data_fingerprint``), so a row only ever pools seeds of one experiment."""
SAME_EXPERIMENT = ("group", "data_fingerprint")
SHORT = 8  # hex digits of a hash shown in the display table


def _cell(name: str, mean: float, std: float | None, n: int | None = None) -> str:
    """``0.7193 ± 0.0029`` (:func:`suite.units.format_cell`): the std to two significant
    digits and the mean to the same decimal place; bytes in binary units; no ``±`` for one
    value or no spread; empty for no value."""
    spread = std is not None and math.isfinite(std) and std > 0 and (n is None or n > 1)
    value = None if mean is None else float(mean)
    return format_cell(
        value,
        float(std) if spread and std is not None else None,
        unit=unit_of(name),
        max_decimals=8,
        missing="",
    )


def differing_fields(group: pd.DataFrame) -> list[str]:
    """The config columns (``config.*``, without ``config.seed``) and ``data_fingerprint``
    that take more than one value among ``group``'s runs (rows of ``load_results``)."""
    from suite.api import CONFIG_PREFIX

    candidates = [
        c for c in group.columns if c.startswith(CONFIG_PREFIX) and c != f"{CONFIG_PREFIX}seed"
    ] + ["data_fingerprint"]
    found = [
        c.removeprefix(CONFIG_PREFIX)
        for c in candidates
        if c in group and group[c].astype(str).nunique(dropna=False) > 1
    ]
    if not found and group["group"].nunique() > 1:
        found = ["group"]  # configs differ in fields these results do not record
    return found


def check_pooling(frame: pd.DataFrame, by: Sequence[str]) -> None:
    """Refuse a grouping ``by`` under which one row would pool runs of different configs
    (other than their seeds) or data: a ``ConfigError`` naming the fields that differ."""
    for key, group in frame.groupby(list(by), sort=True, dropna=False):
        fields = differing_fields(group)
        if fields:
            where = ", ".join(f"{k}={v}" for k, v in _keyed(by, key).items())
            raise ConfigError(
                f"--by {','.join(by)} pools different experiments in one row ({where}): "
                f"{', '.join(fields)} differ; add group,data_fingerprint to --by, filter "
                "with --where, or pass --pool to average them anyway"
            )


def runs_tables(
    frame: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    by: Sequence[str] = GROUP_BY,
    pool: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs (``suite.api.load_results``'s frame) grouped by ``by`` over seeds: numeric
    (``<metric>_mean``, ``<metric>_std``, ``seeds``, ``runs``) and display frames (hashes
    shortened). A ``by`` that would pool runs of different configs or data is refused
    (see :func:`check_pooling`) unless ``pool``."""
    import pandas as pd

    from suite.api import CONFIG_PREFIX, IDENTITY_COLUMNS

    if frame.empty:
        raise ConfigError("no runs to export (check the results directory and filters)")
    unknown = [c for c in by if c not in frame.columns]
    if unknown:
        raise ConfigError(f"--by: no column(s) {', '.join(unknown)} in these runs")
    names = list(metrics) if metrics else _metric_columns(frame, IDENTITY_COLUMNS, CONFIG_PREFIX)
    missing = [m for m in names if m not in frame.columns]
    if missing:
        raise ConfigError(f"no metric(s) {', '.join(missing)} in these runs")
    if not pool:
        check_pooling(frame, by)
    numeric_rows, display_rows = [], []
    for key, group in frame.groupby(list(by), sort=True, dropna=False):
        ident = _keyed(by, key)
        counts = {"seeds": int(group["seed"].nunique()), "runs": len(group)}
        numeric = {**ident, **counts}
        display = {**_short(ident), **counts}
        for name in names:
            values = group[name].dropna()
            mean = float(values.mean()) if len(values) else math.nan
            std = float(values.std(ddof=1)) if len(values) > 1 else math.nan
            numeric[f"{name}_mean"], numeric[f"{name}_std"] = mean, std
            display[name] = _cell(name, mean, std, len(values))
        numeric_rows.append(numeric)
        display_rows.append(display)
    return pd.DataFrame(numeric_rows), pd.DataFrame(display_rows)


def _keyed(by: Sequence[str], key: object) -> dict:
    """A groupby key as ``{column: value}``."""
    return dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))


def _metric_columns(frame: pd.DataFrame, identity: Sequence[str], prefix: str) -> list[str]:
    return [c for c in frame.columns if c not in identity and not c.startswith(prefix)]


def _short(ident: dict) -> dict:
    """Hash columns cut to their first ``SHORT`` digits for the display table."""
    hashes = ("group", "data_fingerprint", "config_hash")
    return {
        k: str(v)[:SHORT] if k in hashes and isinstance(v, str) else v for k, v in ident.items()
    }


def study_tables(study_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A study's ``trials.csv`` (complete trials, Pareto-optimal first): as it is, and
    with metrics in human units."""
    import pandas as pd

    path = Path(study_dir) / "trials.csv"
    if not path.is_file():
        raise ConfigError(f"{path}: no trials table (run `suite study` first)")
    table = pd.read_csv(path)
    done = table[table["state"] == "COMPLETE"] if "state" in table else table
    if "pareto" in done:
        done = done.sort_values(["pareto", "number"], ascending=[False, True])
    bookkeeping = [c for c in done.columns if c.endswith(("hash", "run_id", "error", "retry_of"))]
    display = done.drop(columns=bookkeeping)
    for column in display.columns:
        if display[column].dtype.kind == "f" and column not in ("number",):
            display[column] = [_cell(column, v, None) for v in display[column]]
    return done.reset_index(drop=True), display.reset_index(drop=True)


def leaderboard_tables(
    submissions_dir: str | Path, metrics: Sequence[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The leaderboard's submissions: one row each, ``mean ± std`` over its seeds.

    Each row names the board it belongs to (dataset, protocol, task, training rows and
    data fingerprint), so rows that ran on different data are never read as one board;
    rows come sorted by board."""
    import pandas as pd

    files = sorted(Path(submissions_dir).glob("*.json"))
    if not files:
        raise ConfigError(f"{submissions_dir}: no submission files")
    numeric_rows, display_rows = [], []
    for path in sorted(files, key=lambda p: (_board_key(p), p.name)):
        data = json.loads(path.read_text(encoding="utf-8"))
        ident = {k: data.get(k) for k in ("task", "dataset", "protocol")}
        ident["train_rows"] = _train_rows(data)
        ident["data_fingerprint"] = str(data.get("data_fingerprint") or "")[:12]
        ident.update({k: data.get(k) for k in ("model", "embedding", "submitter")})
        seeds = len(data.get("seeds") or [])
        numeric = {**ident, "seeds": seeds}
        display = {**ident, "seeds": seeds}
        for name, figures in (data.get("metrics") or {}).items():
            if metrics and name not in metrics:
                continue
            numeric[f"{name}_mean"], numeric[f"{name}_std"] = figures["mean"], figures.get("std")
            display[name] = _cell(name, figures["mean"], figures.get("std"), seeds)
        numeric_rows.append(numeric)
        display_rows.append(display)
    return pd.DataFrame(numeric_rows), pd.DataFrame(display_rows)


def _train_rows(data: dict) -> int | None:
    """A submission's training rows, where its dataset options say them."""
    options = ((data.get("config") or {}).get("dataset") or {}).get("options") or {}
    rows = options.get("train_rows") if isinstance(options, dict) else None
    return rows if isinstance(rows, int) and not isinstance(rows, bool) else None


def _board_key(path: Path) -> tuple[str, ...]:
    data = json.loads(path.read_text(encoding="utf-8"))
    keys = ("dataset", "protocol", "task", "data_fingerprint")
    return tuple(str(data.get(k) or "") for k in keys)


# --- a table for a page ------------------------------------------------------------------

PAPER_METRICS = ("test_auc", "test_logloss", "embedding_bytes")
"""The metrics a paper table shows when ``--metric`` names none (those the runs have; else
the first :data:`MAX_PAPER_METRICS` of theirs): few columns, so it fits a column."""
MAX_PAPER_METRICS = 3
LABELS = {
    "test_auc": "Test AUC",
    "test_logloss": "Test log loss",
    "val_auc": "Val. AUC",
    "val_logloss": "Val. log loss",
    "embedding_bytes": "Embedding size",
    "train_samples_per_s": "Training throughput",
}
"""How a paper names a metric; others are spelt from their names (:func:`paper_label`)."""
IDENTITY_LABELS = {"dataset": "Dataset", "model": "Model", "embedding": "Embedding"}
_WORDS = {"auc": "AUC", "logloss": "log loss", "val": "val.", "s": "s", "per": "per"}
_BYTE_SCALES = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def paper_label(name: str, unit: str = "") -> str:
    """``test_auc`` -> ``Test AUC``, ``test_logloss`` -> ``Test log loss``; ``unit``, where
    the figures have one, in parentheses after it (``Embedding size (MiB)``)."""
    label = LABELS.get(name)
    if label is None:
        words = [_WORDS.get(w, w) for w in name.split("_") if w]
        label = " ".join(words)
        label = label[:1].upper() + label[1:]
    return f"{label} ({unit})" if unit else label


def paper_metrics(frame_metrics: Sequence[str], chosen: Sequence[str] | None) -> list[str]:
    """The metrics of a paper table: ``chosen`` (``--metric``), else :data:`PAPER_METRICS`
    the runs have, else their first :data:`MAX_PAPER_METRICS`."""
    if chosen:
        return list(chosen)
    found = [m for m in PAPER_METRICS if m in frame_metrics]
    return found or list(frame_metrics)[:MAX_PAPER_METRICS]


def ci_half_width(std: float, n: int, level: float | None = None) -> float:
    """The Student-t half-width of a mean of ``n`` values with sample std ``std`` at
    ``level`` (default :data:`suite.decisions.INTERVAL_LEVEL`, the comparisons' 90%);
    NaN for fewer than two values."""
    from suite.decisions import INTERVAL_LEVEL, t_quantile

    if n < 2 or std is None or not math.isfinite(std):
        return math.nan
    q = t_quantile(0.5 + (INTERVAL_LEVEL if level is None else level) / 2, n - 1)
    return q * std / math.sqrt(n)


def paper_table(
    numeric: pd.DataFrame, metrics: Sequence[str], count: str = "seeds"
) -> pd.DataFrame:
    """A table for a page from a numeric frame (``<metric>_mean``, ``<metric>_std``, and
    ``count`` per row): the identity columns that tell its rows apart (dataset, model,
    embedding; the config's short hash where those do not), then one column per metric
    labelled as a paper would with its unit in the header, each cell ``mean ± half-width``
    of the 90% t interval over the row's seeds (:func:`ci_half_width`)."""
    import pandas as pd

    shown = [c for c in IDENTITY_LABELS if c in numeric and numeric[c].nunique(dropna=False) > 1]
    if not shown:
        shown = [c for c in ("model", "embedding") if c in numeric]
    if "group" in numeric and numeric.duplicated(subset=shown).any():
        shown.append("group")
    table = pd.DataFrame(
        {IDENTITY_LABELS.get(c, "Config"): [_short({c: v})[c] for v in numeric[c]] for c in shown}
    )
    counts = numeric[count] if count in numeric else pd.Series([1] * len(numeric))
    for name in metrics:
        means = numeric.get(f"{name}_mean", pd.Series([math.nan] * len(numeric)))
        stds = numeric.get(f"{name}_std", pd.Series([math.nan] * len(numeric)))
        halves = [ci_half_width(s, int(n)) for s, n in zip(stds, counts, strict=True)]
        unit, scale = _column_unit(name, means)
        table[paper_label(name, unit)] = [
            _paper_cell(m / scale, h / scale) for m, h in zip(means, halves, strict=True)
        ]
    return table


def _column_unit(name: str, means: pd.Series) -> tuple[str, float]:
    """The unit a metric's column states in its header and the scale its cells are
    divided by: bytes in the binary unit of the column's largest figure."""
    kind = unit_of(name)
    if kind == "bytes":
        largest = max((abs(float(v)) for v in means if math.isfinite(float(v))), default=0.0)
        for unit, scale in _BYTE_SCALES:
            if largest >= scale:
                return unit, float(scale)
        return "B", 1.0
    if name.endswith("_per_s"):
        return "samples/s", 1.0
    return ("s" if name.endswith("_s") else ""), 1.0


def _paper_cell(mean: float, half: float) -> str:
    """``0.7193 ± 0.0012`` (the half-width to two significant digits, the mean to its
    place); the mean alone, to four significant digits, without an interval; empty
    without a value."""
    if not math.isfinite(mean):
        return ""
    if math.isfinite(half) and half > 0:
        return format_cell(mean, half, max_decimals=8, missing="", thousands=False)
    return f"{mean:.4g}" if abs(mean) < 1e4 else f"{mean:.0f}"


def paper_latex(table: pd.DataFrame, caption: str, label: str) -> str:
    """A booktabs ``table`` that fits a column: ``\\small``, identity columns left and
    figures right aligned, ``±`` as ``$\\pm$`` (needs ``\\usepackage{booktabs}``)."""
    identity = sum(1 for c in table.columns if c in (*IDENTITY_LABELS.values(), "Config"))
    columns = "l" * identity + "r" * (len(table.columns) - identity)
    body = table.to_latex(index=False, escape=True, column_format=columns)
    body = body.replace("±", r"$\pm$")
    return (
        "% needs \\usepackage{booktabs}\n"
        "\\begin{table}[t]\n\\centering\n\\small\n"
        f"\\caption{{{caption}}}\n\\label{{{label}}}\n{body}\\end{{table}}\n"
    )


def write_tables(
    numeric: pd.DataFrame,
    display: pd.DataFrame,
    out_dir: str | Path,
    stem: str,
    caption: str,
    paper: pd.DataFrame | None = None,
) -> list[Path]:
    """``<stem>.csv`` (numbers) and ``<stem>.tex``: the ``paper`` table where given
    (:func:`paper_table`, written by :func:`paper_latex`), else the display frame."""
    out = Path(out_dir)
    csv = write_text_atomic(out / f"{stem}.csv", numeric.to_csv(index=False), "--out")
    try:
        if paper is not None:
            tex = write_text_atomic(
                out / f"{stem}.tex", paper_latex(paper, caption, f"tab:{stem}"), "--out"
            )
            return [csv, tex]
        latex = display.rename(columns=lambda c: str(c).replace("_", " ")).to_latex(
            index=False, escape=True, caption=caption, label=f"tab:{stem}", position="t"
        )
        latex = latex.replace("±", r"$\pm$")
    except ImportError as exc:  # pandas' LaTeX writer needs jinja2
        raise ConfigError(f"LaTeX export needs jinja2 (pip install jinja2): {exc}") from None
    tex = write_text_atomic(out / f"{stem}.tex", latex, "--out")
    return [csv, tex]


def table_text(display: pd.DataFrame) -> str:
    """The display frame as a plain text table for the terminal."""
    return display.to_string(index=False)
