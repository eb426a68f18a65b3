"""The one progress-bar factory: tqdm with rate and ETA on a terminal, and in logs
(stderr not a terminal) one plain line now and then instead of a stream of ``\\r`` updates.

``RECSUITE_PROGRESS=0`` silences every bar; ``=1`` forces terminal bars.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from tqdm import tqdm

LOG_INTERVAL_S = 30.0
"""Seconds between progress lines when stderr is a file or a pipe."""


class _Lines:
    """A stream for tqdm that turns each ``\\r`` refresh into one line of a log."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        line = text.replace("\r", "").replace("\x1b[A", "").strip()
        if line:
            self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def is_terminal(stream: IO[str] | None = None) -> bool:
    stream = stream or sys.stderr
    forced = os.environ.get("RECSUITE_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    return bool(getattr(stream, "isatty", lambda: False)())


def progress_bar(
    iterable: Any = None,
    *,
    total: float | None = None,
    desc: str = "",
    unit: str = "it",
    enabled: bool = True,
    leave: bool = True,
    **kwargs: Any,
) -> tqdm:
    """A tqdm bar (rate and ETA). Disabled when ``enabled`` is false or
    ``RECSUITE_PROGRESS=0``; on a non-terminal stderr it writes a line every
    :data:`LOG_INTERVAL_S` seconds and at the end, never ``\\r`` updates."""
    disabled = not enabled or os.environ.get("RECSUITE_PROGRESS") == "0"
    options: dict[str, Any] = {"dynamic_ncols": True}
    if not disabled and not is_terminal():
        options = {
            "file": _Lines(sys.stderr),
            "mininterval": LOG_INTERVAL_S,
            "maxinterval": LOG_INTERVAL_S,
            "ncols": 100,
            "ascii": True,
            "leave": True,
        }
    options = {"leave": leave, **options, **kwargs}
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=disabled, **options)
