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


class _LogBar(tqdm):
    """A tqdm bar for a log: a line when an update finds :data:`LOG_INTERVAL_S` gone since
    the last one, and one final line at close (with the rate and ETA tqdm computes). No line
    for the empty bar at the start, none forced by ``set_postfix``/``set_postfix_str`` (the
    next timed line shows the postfix), no monitor thread, and no final line repeating the
    last one."""

    monitor_interval = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._shown_n: float | None = None
        self._opened = False
        super().__init__(*args, **kwargs)
        self._opened = True

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        closing = self.disable  # tqdm.close() sets ``disable`` before its last display
        if not self._opened or (closing and self.n == self._shown_n):
            return True
        self._shown_n = self.n
        return bool(super().display(msg, pos))

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = False, **kwargs: Any) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)

    def set_postfix_str(self, s: str = "", refresh: bool = False) -> None:
        super().set_postfix_str(s, refresh=False)


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
    :data:`LOG_INTERVAL_S` seconds at most and one at the end, never ``\\r`` updates."""
    disabled = not enabled or os.environ.get("RECSUITE_PROGRESS") == "0"
    options: dict[str, Any] = {"dynamic_ncols": True}
    log = not disabled and not is_terminal()
    if log:
        options = {
            "file": _Lines(sys.stderr),
            "mininterval": LOG_INTERVAL_S,
            "maxinterval": LOG_INTERVAL_S,
            "ncols": 100,
            "ascii": True,
            "leave": True,
        }
    options = {"leave": leave, **options, **kwargs}
    return (_LogBar if log else tqdm)(
        iterable, total=total, desc=desc, unit=unit, disable=disabled, **options
    )
