"""Figures in human units: bytes as KiB/MiB/GiB, counts and rates with separators."""

from __future__ import annotations

import math

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(value: float) -> str:
    """``1417430`` -> ``1.35 MiB`` (powers of 1024; three significant digits)."""
    if not math.isfinite(value):
        return str(value)
    size, unit = abs(float(value)), 0
    while size >= 1024 and unit < len(_BYTE_UNITS) - 1:
        size /= 1024
        unit += 1
    sign = "-" if value < 0 else ""
    if unit == 0:
        return f"{sign}{size:.0f} B"
    return f"{sign}{size:.3g} {_BYTE_UNITS[unit]}"


def is_bytes_metric(name: str) -> bool:
    return name.endswith("_bytes") or name.endswith("bytes_mean") or "_bytes_" in name


def format_metric(name: str, value: float) -> str:
    """A metric value as a reader wants it: bytes in binary units, large counts and
    rates with thousands separators, other figures to six significant digits."""
    if not math.isfinite(value):
        return str(value)
    if is_bytes_metric(name):
        return human_bytes(value)
    if abs(value) >= 1e4 and (float(value).is_integer() or name.endswith(("_per_s", "_s"))):
        return f"{value:,.0f}" if abs(value) < 1e15 else f"{value:.4g}"
    return f"{value:.6g}"
