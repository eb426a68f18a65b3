"""Jobs on this machine: in this process (one worker), or in spawned worker processes.

With CUDA jobs each worker process sees one GPU of its own (``CUDA_VISIBLE_DEVICES`` set
before it touches CUDA), so ``--workers N`` on an N-GPU box trains N jobs at once, one a
GPU; the number of workers then defaults to the number of visible GPUs.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from suite.environment import DEVICE_ENV, listed_gpus
from suite.executors.base import Needs

J = TypeVar("J")


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries: that variable's
    list where it is set, else ``0 .. n-1`` for the n devices torch sees (none without CUDA)."""
    listed = listed_gpus()
    if listed is not None:
        return listed
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def worker_devices(workers: int, gpus: list[str]) -> list[str]:
    """Worker ``i``'s ``CUDA_VISIBLE_DEVICES``: GPU ``i mod len(gpus)``, so workers share a
    GPU only when there are more workers than GPUs."""
    if not gpus:
        raise ValueError("no GPU is visible to give the workers")
    return [gpus[i % len(gpus)] for i in range(workers)]


def default_workers(jobs: int, cuda: bool = False) -> int:
    """One worker per core (per visible GPU for CUDA jobs), at most one per job."""
    per = len(visible_gpus()) if cuda else (os.cpu_count() or 1)
    return max(1, min(per or 1, jobs))


def _take_device(queue: Any) -> None:
    """A worker's initializer: its own GPU, before anything in it initializes CUDA."""
    os.environ[DEVICE_ENV] = queue.get()


class LocalExecutor:
    """``workers`` processes on this machine (1: this process, jobs in order)."""

    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    def run(
        self, jobs: Sequence[J], work: Callable[[J], Any], needs: Callable[[J], Needs]
    ) -> Iterator[tuple[J, Any]]:
        if self.workers <= 1 or len(jobs) <= 1:
            for job in jobs:
                yield job, work(job)
            return
        yield from self._pool(jobs, work, any(needs(j).gpus for j in jobs))

    def _pool(
        self, jobs: Sequence[J], work: Callable[[J], Any], cuda: bool
    ) -> Iterator[tuple[J, Any]]:
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        from suite.runs.signals import interruptible

        context = multiprocessing.get_context("spawn")
        initializer, initargs = None, ()
        if cuda:
            devices = worker_devices(self.workers, visible_gpus())
            if self.workers > len(set(devices)):
                print(
                    f"note: {self.workers} workers share {len(set(devices))} GPU(s)",
                    file=sys.stderr,
                    flush=True,
                )
            queue = context.Queue()
            for device in devices:
                queue.put(device)
            initializer, initargs = _take_device, (queue,)
        pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=context,
            initializer=initializer,
            initargs=initargs,
        )
        try:
            with interruptible():  # SIGTERM here stops the workers too, never orphans them
                pending = {pool.submit(work, job): job for job in jobs}
                while pending:
                    finished, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                    for future in finished:
                        yield pending.pop(future), future.result()
        except BaseException:  # an error, Ctrl-C, or the caller closing the iteration
            stop(pool)
            raise
        pool.shutdown(wait=True)


def stop(pool: Any) -> None:
    """Stop a pool's workers now: queued jobs cancelled, running ones terminated (SIGTERM:
    each marks its MLflow run KILLED on its way out)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=10)  # a worker that caught SIGTERM may have taken a queued job
        if process.is_alive():
            process.kill()
            process.join()  # reaped: the dead-run sweep then sees its MLflow run's owner gone
