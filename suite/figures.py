"""Paper-ready figures: one colour per method and backbone everywhere, vector and 300 dpi.

Every plot the suite draws (reports, tasks, studies, leaderboard) takes its colours from
:func:`color` and is written by :func:`save_figure`, so a method looks the same in every
figure and every figure exists as PDF, SVG and a 300 dpi PNG.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Fixed hues (colour-blind-safe "colorblind" palette order) for the names the suite
# registers; unknown names get a stable colour from the same palette by hash.
_COLORBLIND = [
    "#0173b2",
    "#de8f05",
    "#029e73",
    "#d55e00",
    "#cc78bc",
    "#ca9161",
    "#fbafe4",
    "#949494",
    "#ece133",
    "#56b4e9",
]
PALETTE: dict[str, str] = {
    # embedding methods
    "full": _COLORBLIND[0],
    "hash": _COLORBLIND[7],
    "qr": _COLORBLIND[1],
    "mixed_dim": _COLORBLIND[2],
    "fiited": _COLORBLIND[3],
    "robe": _COLORBLIND[6],
    "dhe": _COLORBLIND[8],
    "ttrec": "#7f3c8d",  # outside the 10-colour set, which the methods above use up
    "fp16": _COLORBLIND[9],
    "int8": _COLORBLIND[4],
    "int4": _COLORBLIND[5],
    # backbones
    "dlrm": _COLORBLIND[0],
    "dcnv2": _COLORBLIND[1],
    "wukong": _COLORBLIND[2],
}
FORMATS = ("pdf", "svg", "png")
PNG_DPI = 300


def color(name: str) -> str:
    """The colour of a method or backbone, the same in every figure."""
    if name in PALETTE:
        return PALETTE[name]
    import zlib

    return _COLORBLIND[zlib.crc32(name.encode()) % len(_COLORBLIND)]


def palette(names: list[str]) -> dict[str, str]:
    """``{name: colour}`` for seaborn's ``palette=`` argument."""
    return {name: color(name) for name in names}


def save_figure(fig: Any, path: str | Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Write ``fig`` as ``path`` with each suffix in ``formats`` (PNG at 300 dpi).

    ``path``'s own suffix is replaced; returns the files written, PNG first when present.
    """
    import matplotlib

    base = Path(path).with_suffix("")
    base.parent.mkdir(parents=True, exist_ok=True)
    written = []
    # the same figure gives the same bytes: no creation date, SVG ids from a fixed salt
    with matplotlib.rc_context({"svg.hashsalt": "recsuite"}):
        for fmt in sorted(formats, key=lambda f: f != "png"):
            out = base.with_suffix(f".{fmt}")
            metadata = {"CreationDate": None} if fmt == "pdf" else {"Date": None}
            fig.savefig(
                out,
                dpi=PNG_DPI if fmt == "png" else None,
                bbox_inches="tight",
                metadata=metadata if fmt in ("pdf", "svg") else None,
            )
            written.append(out)
    return written
