"""Compression methods at a memory budget: the options that fit a fraction of full's bytes.

A budget is a fraction of the ``full`` tables' **total** embedding bytes at the same dim,
as the accuracy task reports them (``embedding_total_bytes``: parameters, index and
utilities, and the sparse optimizer's state). Each compressed method chooses its own knob
in its own file, as a classmethod ``options_at_budget(fraction, dim, cardinalities, optimizer)``
returning the options (a dict) whose total bytes come as close as the knob allows to,
and never above, the budget; it raises :class:`BudgetUnreachable` (with the reason) where
even its smallest setting holds more.

Most methods size their storage when built, so their bytes are measured on the real
tensors of a method built here on the CPU (:func:`built_bytes`) and the knob is bisected
(:func:`fit_knob`); a method that shrinks while training (FIITED) gives its own bound.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from suite.embeddings.base import EmbeddingContext, EmbeddingMethod
from suite.embeddings.tables import SparseOptimizer
from suite.errors import ConfigError
from suite.registry import EMBEDDINGS


class BudgetUnreachable(ConfigError):
    """A method cannot come down to a budget (the message says how low it goes)."""


def sized_method(
    name: str,
    options: dict[str, Any],
    cardinalities: Sequence[int],
    optimizer: SparseOptimizer = "rowwise_adagrad",
) -> EmbeddingMethod:
    """Method ``name`` built with ``options`` for features of ``cardinalities [F]``, for
    its sizes: on the meta device (every tensor its real shape and dtype, no values, so a
    Criteo Kaggle-sized table costs nothing), or on the CPU where building reads values
    (TT-Rec's sampled initialisation)."""
    cls: type[EmbeddingMethod] = EMBEDDINGS.get(name)
    typed = cls.Options.model_validate(options)

    def on(device: torch.device) -> EmbeddingContext:
        return EmbeddingContext(list(cardinalities), device, seed=0, sparse_optimizer=optimizer)

    meta = torch.device("meta")
    try:
        with meta:  # tensors made without a device (initial values) are meta too
            return cls(typed, on(meta))
    except (RuntimeError, NotImplementedError):
        return cls(typed, on(torch.device("cpu")))


def built_bytes(
    name: str,
    options: dict[str, Any],
    cardinalities: Sequence[int],
    optimizer: SparseOptimizer = "rowwise_adagrad",
) -> int:
    """Total bytes (parameters + auxiliary + optimizer) of method ``name`` built with
    ``options`` for features of ``cardinalities [F]``: its real tensors' sizes
    (:func:`sized_method`)."""
    return sized_method(name, options, cardinalities, optimizer).memory().total


def full_bytes(
    dim: int, cardinalities: Sequence[int], optimizer: SparseOptimizer = "rowwise_adagrad"
) -> int:
    """``full``'s total bytes at ``dim`` under ``optimizer``: the budget's unit."""
    return built_bytes("full", {"dim": dim}, cardinalities, optimizer)


def budget_bytes(
    fraction: float,
    dim: int,
    cardinalities: Sequence[int],
    optimizer: SparseOptimizer = "rowwise_adagrad",
) -> int:
    """The bytes a method may hold at ``fraction`` of full (rounded down)."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"budget: a fraction of full's bytes in (0, 1], got {fraction}")
    return math.floor(fraction * full_bytes(dim, cardinalities, optimizer))


def fit_knob(
    bytes_of: Callable[[float], int],
    low: float,
    high: float,
    budget: int,
    *,
    increasing: bool = True,
    integer: bool = False,
    steps: int = 24,
) -> float:
    """The value of a knob in ``[low, high]`` whose bytes come closest to ``budget`` from
    below, ``bytes_of`` monotone in it (``increasing``: more bytes at larger values);
    bisection, on integers with ``integer``. Raises :class:`BudgetUnreachable` when the
    end with the fewest bytes is over the budget."""
    small, big = (low, high) if increasing else (high, low)
    fewest = bytes_of(small)
    if fewest > budget:
        raise BudgetUnreachable(
            f"holds {fewest:,} bytes at its smallest setting ({small:g}), over the budget "
            f"of {budget:,}"
        )
    if bytes_of(big) <= budget:
        return big
    good, bad = small, big
    for _ in range(steps if not integer else 64):
        if integer and abs(bad - good) <= 1:
            break
        mid = (good + bad) / 2
        if integer:
            mid = math.floor(mid) if good < bad else math.ceil(mid)
        if bytes_of(mid) <= budget:
            good = mid
        else:
            bad = mid
    return good


def fit_options(
    name: str,
    fraction: float,
    dim: int,
    cardinalities: Sequence[int],
    make: Callable[[float], dict[str, Any]],
    low: float,
    high: float,
    *,
    increasing: bool = True,
    integer: bool = False,
    optimizer: SparseOptimizer = "rowwise_adagrad",
    bytes_of: BytesOf | None = None,
) -> dict[str, Any]:
    """``make(value)``: method ``name``'s options at the knob value whose bytes
    (``bytes_of``, by default :func:`built_bytes`) come closest to ``fraction`` of full's
    from below (:func:`fit_knob` over ``[low, high]``)."""
    budget = budget_bytes(fraction, dim, cardinalities, optimizer)
    measure = bytes_of or functools.partial(built_bytes, name)

    def total(value: float) -> int:
        return measure(make(value), cardinalities, optimizer)

    try:
        value = fit_knob(total, low, high, budget, increasing=increasing, integer=integer)
    except BudgetUnreachable:
        smallest = make(low if increasing else high)
        shown = ", ".join(f"{k}={v}" for k, v in smallest.items() if k != "dim")
        raise BudgetUnreachable(
            f"holds {total(low if increasing else high):,} bytes at its smallest setting "
            f"({shown}), over the budget of {budget:,}"
        ) from None
    return make(value)


Bound = float | Callable[[list[int]], float]
BytesOf = Callable[[dict[str, Any], Sequence[int], SparseOptimizer], int]
"""``(options, cardinalities, optimizer) -> total bytes`` of a method."""


def knob_hook(
    name: str,
    make: Callable[[int, float], dict[str, Any]],
    low: Bound,
    high: Bound,
    *,
    increasing: bool = True,
    integer: bool = False,
    bytes_of: BytesOf | None = None,
) -> Any:
    """A method's ``options_at_budget(fraction, dim, cardinalities, optimizer)``
    classmethod for one monotone knob: ``make(dim, value)`` gives the options,
    ``low``/``high`` bound the knob (a number, or a function of the cardinalities),
    fitted by :func:`fit_options` (``bytes_of``: see there)."""

    def hook(
        cls: type,
        fraction: float,
        dim: int,
        cardinalities: list[int],
        optimizer: SparseOptimizer = "rowwise_adagrad",
    ) -> dict[str, Any]:
        ends = [b(cardinalities) if callable(b) else b for b in (low, high)]
        return fit_options(
            name,
            fraction,
            dim,
            cardinalities,
            lambda v: make(dim, v),
            *ends,
            increasing=increasing,
            integer=integer,
            optimizer=optimizer,
            bytes_of=bytes_of,
        )

    return classmethod(hook)


def options_at_budget(
    name: str,
    fraction: float,
    dim: int,
    cardinalities: Sequence[int],
    optimizer: SparseOptimizer = "rowwise_adagrad",
) -> dict[str, Any]:
    """Method ``name``'s options at ``fraction`` of full's total bytes under the sparse
    ``optimizer`` (its own hook)."""
    cls = EMBEDDINGS.get(name)
    hook = getattr(cls, "options_at_budget", None)
    if hook is None:
        raise ConfigError(f"embedding {name!r} has no options_at_budget: it takes no budget")
    try:
        return hook(fraction, dim, list(cardinalities), optimizer)
    except BudgetUnreachable as exc:
        raise BudgetUnreachable(f"{name} at {fraction:g} of full: {exc}") from None
