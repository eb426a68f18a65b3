"""What every executor shares: a job's resource needs, and the executor's one call.

An executor runs ``work(job)`` for each job somewhere (this process, a worker process, a
Ray task) and yields ``(job, value)`` as each finishes, in this (the driver's) process,
where the caller stores it. Stopping the iteration early, an error, or Ctrl-C stops every
job still running; what was yielded before stays the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from suite.config import RunConfig


@dataclass(frozen=True)
class Needs:
    """What one job asks of the machine it runs on."""

    cpus: int = 1
    gpus: int = 0

    def describe(self) -> str:
        gpus = f" and {self.gpus} GPU{'s' if self.gpus != 1 else ''}" if self.gpus else ""
        return f"{self.cpus} CPU{'s' if self.cpus != 1 else ''}{gpus}"


def needs_of(config: RunConfig) -> Needs:
    """A run's needs: CPUs = its torch threads (1 where the config leaves them to torch,
    as the reproductions' and studies' configs set them), one GPU when it trains on CUDA."""
    return Needs(cpus=config.train.threads or 1, gpus=1 if config.device == "cuda" else 0)


class HasConfig(Protocol):
    @property
    def config(self) -> RunConfig: ...

    @property
    def label(self) -> str: ...


J = TypeVar("J")


class Executor(Protocol):
    """Runs jobs and yields each ``(job, work(job))`` as it finishes."""

    name: str

    def run(
        self, jobs: Sequence[J], work: Callable[[J], Any], needs: Callable[[J], Needs]
    ) -> Iterator[tuple[J, Any]]: ...
