"""Figures in human units: bytes as KiB/MiB/GiB, counts and rates with separators.

The one number format of the console: ``suite run``, the multi-seed summary and ``suite
compare`` print every figure through :func:`format_metric` and :func:`format_spread`.
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


def is_bytes_metric(name: str) -> bool:
    return name.endswith("_bytes") or name.endswith("bytes_mean") or "_bytes_" in name


def decimals_for(spread: float | None, digits: int = 2) -> int | None:
    """Decimal places that show ``spread`` (a std or CI half-width) with ``digits``
    significant digits; ``None`` when there is no spread to size them by."""
    if spread is None or not math.isfinite(spread) or spread <= 0:
        return None
    return min(10, max(0, digits - 1 - math.floor(math.log10(spread))))


def format_metric(name: str, value: float, decimals: int | None = None, plus: bool = False) -> str:
    """A metric value as a reader wants it: bytes in binary units; with ``decimals`` (from
    :func:`decimals_for`), fixed to that many places; else large counts and rates with
    thousands separators and other figures to six significant digits. ``plus``: sign a
    positive value (a difference)."""
    if value is None or not math.isfinite(value):
        return "n/a" if value is None or math.isnan(value) else str(value)
    if is_bytes_metric(name):
        return human_bytes(value, plus)
    sign = "+" if plus else ""
    sep = "," if abs(value) >= 1e4 and abs(value) < 1e15 else ""
    if decimals is not None:
        return f"{value:{sign}{sep}.{decimals}f}"
    if sep and (float(value).is_integer() or name.endswith(("_per_s", "_s"))):
        return f"{value:{sign},.0f}"
    return f"{value:{sign}.6g}" if abs(value) < 1e15 else f"{value:{sign}.4g}"


def format_spread(name: str, spread: float | None, decimals: int | None = None) -> str:
    """``± 0.0052`` for a std or CI half-width: two significant digits (or ``decimals``
    places, to match the mean's), bytes in binary units; ``± n/a`` when there is none."""
    if spread is None or not math.isfinite(spread):
        return "± n/a"
    places = decimals if decimals is not None else decimals_for(spread)
    return f"± {format_metric(name, spread, 0 if places is None else places)}"
