"""Run an iterator on a thread of its own, a few items ahead of its consumer."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_END = object()


def prefetch(
    make: Callable[[], Iterator[Any]], depth: int = 2, name: str = "raw-reader"
) -> Generator[Any, None, None]:
    """Run the iterator ``make()`` on a thread named ``name``, ``depth`` items ahead of
    the consumer. Its exceptions reach the consumer; when the consumer stops early, the
    iterator is closed on its thread (its own clean-up runs) before this returns."""
    items: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        iterator: Iterator[Any] | None = None
        try:
            iterator = make()
            for item in iterator:
                if not put(item):
                    return
            put(_END)
        except BaseException as exc:  # handed to the consumer
            put(_Raised(exc))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join()


@dataclass
class _Raised:
    exc: BaseException


def batches_ahead(
    batches: Iterator[Any], device: torch.device, depth: int = 2
) -> Generator[Any, None, None]:
    """``batches`` (of :class:`~suite.data.batch.Batch`) for a step on ``device``: for a
    GPU, read ``depth`` batches ahead on a thread of their own and put in pinned host
    memory there, so that the step's non-blocking copy to the device makes the host wait
    for nothing; on a CPU, ``batches`` itself, read in the step's own thread as before.
    Close it (``contextlib.closing``) when stopping early: the thread ends then."""
    if device.type != "cuda":
        yield from batches
        return
    yield from prefetch(
        lambda: (batch.pin_memory() for batch in batches), depth, name="batches-ahead"
    )
