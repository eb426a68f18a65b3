"""Run an iterator on a thread of its own, a few items ahead of its consumer."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

_END = object()


def prefetch(
    make: Callable[[], Iterator[Any]], depth: int = 2, name: str = "raw-reader"
) -> Iterator[Any]:
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
