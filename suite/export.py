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
from suite.units import format_metric, is_bytes_metric

if TYPE_CHECKING:
    import pandas as pd

GROUP_BY = ("task", "dataset", "model", "embedding")


def _cell(name: str, mean: float, std: float | None, n: int | None = None) -> str:
    """``0.7193 ± 0.0029``: the std to two significant digits and the mean to the same
    decimal place; bytes in binary units; no ``±`` for one value or no spread."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    spread = std is not None and math.isfinite(std) and std > 0 and (n is None or n > 1)
    if is_bytes_metric(name) or not spread:
        text = format_metric(name, float(mean))
        return f"{text} ± {format_metric(name, float(std))}" if spread else text
    decimals = min(8, max(0, 1 - math.floor(math.log10(std))))
    return f"{mean:.{decimals}f} ± {std:.{decimals}f}"


def runs_tables(
    frame: pd.DataFrame, metrics: Sequence[str] | None = None, by: Sequence[str] = GROUP_BY
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs (``suite.api.load_results``'s frame) grouped by ``by`` over seeds: numeric
    (``<metric>_mean``, ``<metric>_std``, ``seeds``) and display frames."""
    import pandas as pd

    from suite.api import IDENTITY_COLUMNS

    if frame.empty:
        raise ConfigError("no runs to export (check the results directory and filters)")
    names = list(metrics) if metrics else [c for c in frame.columns if c not in IDENTITY_COLUMNS]
    missing = [m for m in names if m not in frame.columns]
    if missing:
        raise ConfigError(f"no metric(s) {', '.join(missing)} in these runs")
    numeric_rows, display_rows = [], []
    for key, group in frame.groupby(list(by), sort=True, dropna=False):
        ident = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        numeric = {**ident, "seeds": int(group["seed"].nunique())}
        display = {**ident, "seeds": numeric["seeds"]}
        for name in names:
            values = group[name].dropna()
            mean = float(values.mean()) if len(values) else math.nan
            std = float(values.std(ddof=1)) if len(values) > 1 else math.nan
            numeric[f"{name}_mean"], numeric[f"{name}_std"] = mean, std
            display[name] = _cell(name, mean, std, len(values))
        numeric_rows.append(numeric)
        display_rows.append(display)
    return pd.DataFrame(numeric_rows), pd.DataFrame(display_rows)


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
    display = done.copy()
    for column in display.columns:
        if display[column].dtype.kind == "f" and column not in ("number",):
            display[column] = [_cell(column, v, None) for v in display[column]]
    return done.reset_index(drop=True), display.reset_index(drop=True)


def leaderboard_tables(
    submissions_dir: str | Path, metrics: Sequence[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The leaderboard's submissions: one row each, ``mean ± std`` over its seeds."""
    import pandas as pd

    files = sorted(Path(submissions_dir).glob("*.json"))
    if not files:
        raise ConfigError(f"{submissions_dir}: no submission files")
    numeric_rows, display_rows = [], []
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        ident = {k: data.get(k) for k in ("task", "dataset", "model", "embedding", "submitter")}
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


def write_tables(
    numeric: pd.DataFrame, display: pd.DataFrame, out_dir: str | Path, stem: str, caption: str
) -> list[Path]:
    """``<stem>.csv`` (numbers) and ``<stem>.tex`` (a LaTeX table of the display frame)."""
    out = Path(out_dir)
    csv = write_text_atomic(out / f"{stem}.csv", numeric.to_csv(index=False))
    try:
        latex = display.rename(columns=lambda c: str(c).replace("_", " ")).to_latex(
            index=False, escape=True, caption=caption, label=f"tab:{stem}", position="t"
        )
        latex = latex.replace("±", r"$\pm$")
    except ImportError as exc:  # pandas' LaTeX writer needs jinja2
        raise ConfigError(f"LaTeX export needs jinja2 (pip install jinja2): {exc}") from None
    tex = write_text_atomic(out / f"{stem}.tex", latex)
    return [csv, tex]


def table_text(display: pd.DataFrame) -> str:
    """The display frame as a plain text table for the terminal."""
    return display.to_string(index=False)
