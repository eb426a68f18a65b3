"""Figures in human units: bytes as KiB/MiB/GiB, counts and rates with separators.

The one number format of the suite: :func:`format_cell` writes every figure's cell, in the
console (``suite run``, the multi-seed summary, ``suite compare``, through
:func:`format_metric` and :func:`format_spread`), in exported tables, in reproduction
reports and on the leaderboard. It takes the metric's unit and kind (from its
:class:`~suite.results.MetricSpec` where the caller has one); :func:`unit_of` reads them
from a bare metric name where it has not.
"""

from __future__ import annotations

import math

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(value: float, plus: bool = False) -> str:
    """``1417430`` -> ``1.35 MiB`` (powers of 1024; three significant digits); ``plus``
    writes ``+`` before a positive figure (a difference)."""
    if not math.isfinite(value):
        return str(value)
    size, unit = abs(float(value)), 0
    while size >= 1024 and unit < len(_BYTE_UNITS) - 1:
        size /= 1024
        unit += 1
    sign = "-" if value < 0 else ("+" if plus and value > 0 else "")
    if unit == 0:
        return f"{sign}{size:.0f} B"
    return f"{sign}{size:.3g} {_BYTE_UNITS[unit]}"


def human_count(value: float) -> str:
    """``1.5M``, ``12.0k``, ``42``: a count in G/M/k with one decimal."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def human_duration(seconds: float) -> str:
    """``12 s``, ``4.5 min``, ``3.20 h``: a planned or measured span of time."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds / 60:.1f} min"


def is_bytes_metric(name: str) -> bool:
    return name.endswith("_bytes") or name.endswith("bytes_mean") or "_bytes_" in name


RATE = "/s"
"""The unit :func:`unit_of` gives a rate or a time read from its name (``*_per_s``,
``*_s``): large ones show as whole numbers."""

SHARE = "share"
"""The unit of a fraction shown as a percent (``0.523`` -> ``52.3%``)."""

MIB = "MiB"
"""Bytes always shown in MiB to ``decimals`` places (3 by default; reports' columns)."""

KILO_RATE = "k samples/s"
"""A rate in samples/s shown in thousands to one decimal (``12.3 k samples/s``)."""


def unit_of(name: str) -> str:
    """The unit a bare metric name implies, for callers without its spec: ``bytes`` for
    ``*_bytes``, :data:`RATE` for ``*_per_s`` and ``*_s``, else none."""
    if is_bytes_metric(name):
        return "bytes"
    return RATE if name.endswith(("_per_s", "_s")) else ""


def decimals_for(spread: float | None, digits: int = 2) -> int | None:
    """Decimal places that show ``spread`` (a std or CI half-width) with ``digits``
    significant digits; ``None`` when there is no spread to size them by."""
    if spread is None or not math.isfinite(spread) or spread <= 0:
        return None
    return min(10, max(0, digits - 1 - math.floor(math.log10(spread))))


def format_cell(
    value: float | None,
    spread: float | None = None,
    *,
    unit: str = "",
    kind: str = "",
    decimals: int | None = None,
    plus: bool = False,
    thousands: bool | None = None,
    max_decimals: int = 10,
    missing: str = "n/a",
    scientific: bool = False,
) -> str:
    """One figure's cell: ``value``, with ``± spread`` (a std or CI half-width) when given.

    ``unit`` ``bytes``: binary units (``1.35 MiB``, the spread too); :data:`SHARE`: a percent
    (``decimals`` places, default 1); ``kind`` ``count``: G/M/k (:func:`human_count`). Else,
    with a spread, ``mean ± spread`` with the spread to two significant digits (at most
    ``max_decimals`` places) and the mean to the same place; without one, ``decimals``
    fixed places where given, else a large :data:`RATE` or whole number without decimals and
    other figures to six significant digits. ``thousands`` separates thousands always
    (True), never (False), or (None) on a figure shown alone from 10,000; ``plus`` signs a
    positive value (a difference); ``missing`` stands for None or NaN. :data:`MIB` and
    :data:`KILO_RATE` fix the scale; ``scientific`` writes a figure from 1e5 or below 1e-3
    (not 0) as ``1.234e+05``.
    """
    if value is None or not math.isfinite(value):
        return missing if value is None or math.isnan(value) else str(value)
    if unit == "bytes":
        text = human_bytes(value, plus)
        return text if spread is None else f"{text} ± {human_bytes(spread)}"
    if unit == MIB:
        return f"{value / 2**20:.{3 if decimals is None else decimals}f} MiB"
    if unit == KILO_RATE:
        return f"{value / 1000:.1f} k samples/s"
    if kind == "count":
        return human_count(value)
    if scientific and value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3e}"
    sign = "+" if plus else ""
    if unit == SHARE:
        return f"{value:{sign}.{1 if decimals is None else decimals}%}"
    large = spread is None and abs(value) >= 1e4 and abs(value) < 1e15
    sep = "," if (large if thousands is None else thousands) else ""
    if spread is not None:
        places = min(max_decimals, decimals_for(spread) or 0)
        return f"{value:{sign}{sep}.{places}f} ± {spread:{sep}.{places}f}"
    if decimals is not None:
        return f"{value:{sign}{sep}.{decimals}f}"
    if sep and (float(value).is_integer() or unit == RATE):
        return f"{value:{sign},.0f}"
    return f"{value:{sign}.6g}" if abs(value) < 1e15 else f"{value:{sign}.4g}"


def format_metric(name: str, value: float, decimals: int | None = None, plus: bool = False) -> str:
    """A metric value as a reader wants it (:func:`format_cell`, its unit read from its
    name): bytes in binary units; with ``decimals`` (from :func:`decimals_for`), fixed to
    that many places; else large counts and rates with thousands separators and other
    figures to six significant digits. ``plus``: sign a positive value (a difference)."""
    return format_cell(value, unit=unit_of(name), decimals=decimals, plus=plus)


def format_spread(name: str, spread: float | None, decimals: int | None = None) -> str:
    """``± 0.0052`` for a std or CI half-width: two significant digits (or ``decimals``
    places, to match the mean's), bytes in binary units; ``± n/a`` when there is none."""
    if spread is None or not math.isfinite(spread):
        return "± n/a"
    places = decimals if decimals is not None else decimals_for(spread)
    return f"± {format_metric(name, spread, 0 if places is None else places)}"
