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


def note_killed_run(exc: BaseException, run_id: str, uri: str, resumable: bool | None) -> None:
    """Remember on ``exc`` that it ended MLflow run ``run_id`` KILLED (innermost run first:
    a multi-seed run's seed, then its parent), for :func:`interrupted_message`.
    ``resumable``: it holds a checkpoint; ``None`` for a run ``suite resume`` does not take."""
    runs = getattr(exc, "killed_runs", [])
    exc.killed_runs = [*runs, (run_id, uri, resumable)]  # type: ignore[attr-defined]


def interrupted_message(exc: BaseException, default_uri: str | None = None) -> str:
    """``interrupted by SIGINT: MLflow run <id> ended KILLED; resume it ...: suite resume <id>``.

    The resume command names ``--tracking-uri`` unless the run's store is ``default_uri``;
    a run that wrote no checkpoint says so instead of offering a resume that would fail."""
    text = f"interrupted by {interruption(exc) or 'SIGINT'}"
    runs = getattr(exc, "killed_runs", [])
    if not runs:
        return text
    run_id, uri, resumable = runs[0]
    text += f": MLflow run {run_id} ended KILLED"
    if len(runs) > 1:
        text += f" (a seed of multi-seed run {runs[-1][0]}, also KILLED)"
    if resumable is None:
        return text
    if not resumable:
        return text + "; it wrote no checkpoint to resume from (set train.checkpoint_every)"
    store = "" if uri == default_uri else f" --tracking-uri {uri}"
    return text + f"; resume it from its last checkpoint with: suite resume {run_id}{store}"


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
