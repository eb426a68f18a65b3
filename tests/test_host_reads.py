"""The training loop reads no device value back to the host per step (issue 70, item 4):
the loss accumulates on the device and is read every ``log_every`` steps, at the loss log.

Counted on CPU, where every tensor is a "device" tensor: a :class:`TorchFunctionMode`
sees each call that hands a tensor's value to Python (``item``, ``float()``, ``bool()``,
``tolist``, ``numpy`` ...) during a real tiny training run, outside validation (which reads
its logits once per evaluation, not per step). fbgemm's table-batched kernel keeps its step
counter on the host on every device (``iter_cpu``) and reads it each step: a host value,
not counted."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

import suite.engine.train as train_module
from suite.data.source import get_prepared
from suite.engine.build import build_model
from suite.engine.train import train
from tests.conftest import tiny_config

READS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.numpy,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.__index__,
    torch.Tensor.__array__,
}
STEPS = 200  # log_every = min(50, 200 // 20) = 10: the loss is read back 20 times
EVERY = 10


class _CountReads(TorchFunctionMode):
    """Counts the calls that read a tensor's value to the host, by name, while ``on``;
    not those of the host counters of ``model``'s fbgemm kernels."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()
        self.on = True
        self.kernels = [m for m in model.modules() if hasattr(m, "iter_cpu")]

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        if self.on and func in READS and not self._host_counter(args[0]):
            self.reads[func.__name__] += 1
        return func(*args, **(kwargs or {}))

    def _host_counter(self, tensor: object) -> bool:
        return any(tensor is kernel.iter_cpu for kernel in self.kernels)


@contextmanager
def _not_counted(mode: _CountReads) -> Iterator[None]:
    was, mode.on = mode.on, False
    try:
        yield
    finally:
        mode.on = was


def _count(overrides: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], Any]:
    """Train a tiny DLRM ``STEPS`` steps of batch 16, counting host reads outside
    validation; the reads and the logged training losses."""
    config = tiny_config(overrides=[f"train.max_steps={STEPS}", "train.batch_size=16", *overrides])
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    mode = _CountReads(model)
    validate = train_module._Loop.validate

    def quiet_validate(self: Any) -> bool:
        with _not_counted(mode):
            return validate(self)

    monkeypatch.setattr(train_module._Loop, "validate", quiet_validate)
    logged: list[tuple[int, float]] = []
    with mode:
        train(
            model,
            data,
            config.train,
            config.seed,
            torch.device("cpu"),
            on_train_metrics=lambda m, step: logged.append((step, m["train_logloss"])),
        )
    return mode.reads, logged


@pytest.mark.parametrize("backend", ["fbgemm", "torch"])
@pytest.mark.parametrize("dense_optimizer", ["adam", "sgd"])
def test_the_training_loop_reads_device_values_only_every_log_interval(
    backend: str, dense_optimizer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads, logged = _count(
        [f"embedding.options.backend={backend}", f"train.dense_optimizer={dense_optimizer}"],
        monkeypatch,
    )
    assert [step for step, _ in logged] == list(range(EVERY, STEPS + 1, EVERY))
    assert all(math.isfinite(loss) for _, loss in logged)
    # one read per loss log (20), and fbgemm's one at its first step (it syncs its host
    # counter with its device one, ``iter``, once); one a step would be 200 more
    assert sum(reads.values()) <= STEPS // EVERY + (backend == "fbgemm"), reads


def test_a_nan_loss_is_still_reported_at_the_next_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step whose loss is NaN makes the logged mean loss of its interval NaN, and only
    that one's: the accumulated loss restarts at each read-back."""
    step_fn = train_module.train_step

    def nan_at_step_23(model: Any, batch: Any, opt: Any, step: int, *args: Any) -> torch.Tensor:
        loss = step_fn(model, batch, opt, step, *args)
        return loss * float("nan") if step == 23 else loss

    monkeypatch.setattr(train_module, "train_step", nan_at_step_23)
    _, logged = _count([], monkeypatch)
    nan_steps = [step for step, loss in logged if math.isnan(loss)]
    assert nan_steps == [30]


def test_batches_for_a_gpu_are_read_ahead_on_a_thread_in_order_and_pinned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """For a CUDA device the batches come from a thread of their own, pinned, in the
    loader's order; closing the iterator early ends the thread (pinning is stubbed: this
    machine may have no CUDA)."""
    import threading
    from contextlib import closing

    from suite.data.batch import Batch
    from suite.data.loader import BatchLoader
    from suite.data.prefetch import batches_ahead

    config = tiny_config()
    data = get_prepared(config.dataset, progress=False)
    loader = BatchLoader(data.split("train"), 256, shuffle=True, seed=1)
    pinned_on: list[str] = []

    def pin(batch: Batch) -> Batch:
        pinned_on.append(threading.current_thread().name)
        return batch

    monkeypatch.setattr(Batch, "pin_memory", pin)
    expected = list(loader.batches())
    with closing(batches_ahead(loader.batches(), torch.device("cuda"))) as ahead:
        got = [next(ahead) for _ in range(5)]
    for mine, theirs in zip(got, expected, strict=False):
        assert torch.equal(mine.sparse, theirs.sparse) and torch.equal(mine.label, theirs.label)
    assert set(pinned_on) == {"batches-ahead"}
    assert not any(t.name == "batches-ahead" for t in threading.enumerate())
    pinned = len(pinned_on)  # 5, and the few read ahead
    on_cpu = list(batches_ahead(loader.batches(), torch.device("cpu")))
    assert len(on_cpu) == len(expected) and len(pinned_on) == pinned  # none pinned for a CPU
