"""SIGTERM and SIGINT as an exception, so a run ends KILLED with what it measured.

Inside :func:`interruptible`, SIGTERM (and SIGINT, SIGHUP) raise :class:`Interrupted`, a
``KeyboardInterrupt``, in the main thread; the run path catches it, ends its MLflow run
KILLED and re-raises, and the CLI exits ``128 + signal``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal (``signum``)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def interruption(exc: BaseException) -> str | None:
    """``"SIGTERM"`` etc. when ``exc`` is an interruption (Ctrl-C included), else ``None``."""
    if isinstance(exc, Interrupted):
        return exc.name
    if isinstance(exc, KeyboardInterrupt):
        return "SIGINT"
    return None


def _raise(signum: int, frame: object) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGTERM/SIGINT/SIGHUP into :class:`Interrupted` for the block (main thread
    only; elsewhere the block runs as it is). Earlier handlers are restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in SIGNALS:
        handler = signal.getsignal(signum)
        if signum == signal.SIGHUP and handler == signal.SIG_IGN:
            continue  # started under nohup: keep ignoring hang-ups
        previous[signum] = handler
        signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
