"""Training and evaluation: the one loop every task, study and reproduction uses."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from suite.config import TrackingConfig, TrainConfig
from suite.data.batch import Batch
from suite.data.loader import BatchLoader
from suite.data.prefetch import batches_ahead
from suite.data.prepared import PreparedDataset, SplitArrays
from suite.engine.checkpoint import Checkpointer, LoopState
from suite.errors import ConfigError
from suite.metrics import binary_metrics
from suite.models.base import RecModel
from suite.progress import progress_bar

MetricsCallback = Callable[[dict[str, float], int], None]


CURVE_METRICS = {"auc": "val_auc_curve", "logloss": "val_logloss_curve"}
"""What the validation curve logs: its own names, as its points are on part of the split
(``val_auc`` stays the whole split's)."""


@dataclass(frozen=True)
class ValCurve:
    """Validation AUC and log loss along training, for the run's record only.

    ``points`` evaluations per run at steps ``total * i / points`` (the last at the end of
    training), each on the same first ``rows`` rows of the validation split, logged by
    ``log(metrics, step)`` as :data:`CURVE_METRICS`. They use no random stream, leave the
    model in train mode and touch no training state (no best checkpoint, no early
    stopping, not in the history), so a run trains to the same numbers with the curve or
    without it."""

    points: int
    rows: int
    log: MetricsCallback

    def steps(self, total: int) -> set[int]:
        """The steps of the curve's evaluations in a run of ``total`` steps: evenly spaced,
        the last at ``total``, none at step 0 (one a step when ``total < points``)."""
        return {s for i in range(1, self.points + 1) if (s := round(total * i / self.points))}

    def split(self, val: SplitArrays) -> SplitArrays:
        """The first ``rows`` rows of ``val`` (all of them when it has fewer)."""
        if len(val) <= self.rows:
            return val
        return SplitArrays(val.dense[: self.rows], val.sparse[: self.rows], val.label[: self.rows])

    def evaluate(
        self, model: RecModel, split: SplitArrays, batch_size: int, device: torch.device, step: int
    ) -> None:
        """Evaluate ``model`` on ``split`` (the curve's part) and log it at ``step``."""
        metrics = evaluate(model, split, batch_size, device)
        self.log({name: metrics[key] for key, name in CURVE_METRICS.items()}, step)


def val_curve(
    tracking: TrackingConfig, train_config: TrainConfig, log: MetricsCallback, distributed: bool
) -> ValCurve | None:
    """The curve a run logs (``tracking.val_curve`` points on ``tracking.val_curve_rows``
    rows), or ``None``: tracking off, the curve off, a distributed run, or a run that
    validates on its own schedule (``train.eval_every_steps``: its whole-split
    ``val_auc`` at those steps is its curve)."""
    if (
        not tracking.enabled
        or not tracking.val_curve
        or distributed
        or train_config.eval_every_steps
    ):
        return None
    return ValCurve(tracking.val_curve, tracking.val_curve_rows, log)


@dataclass
class TrainOutcome:
    """What training produced: validation history and which checkpoint was kept."""

    steps: int
    examples: int
    seconds: float
    checkpoint: str
    checkpoint_step: int
    history: list[dict[str, float]] = field(default_factory=list)
    checkpoint_seconds: float = 0.0
    """Wall time spent writing checkpoints (outside ``seconds``)."""
    stopped_early: bool = False
    """``train.patience`` ended training before ``epochs`` / ``max_steps`` ran out."""
    still_improving: bool = False
    """Training ran out of budget while validation AUC was still rising
    (see :func:`still_rising`)."""
    best_step: int = 0
    """The step of the best validation AUC (its first occurrence; 0 without one)."""

    def convergence(self) -> dict[str, Any]:
        """The figures of whether training converged, as a task's ``details`` hold them."""
        return {
            "stopped_early": self.stopped_early,
            "still_improving": self.still_improving,
            "best_step": self.best_step,
            "validations": len(self.history),
        }

    @property
    def samples_per_second(self) -> float:
        return self.examples / self.seconds if self.seconds > 0 else float("nan")


def _best_index(history: list[dict[str, float]]) -> int | None:
    """Index of the first validation with the highest AUC (NaN never counts); ``None``
    when there is none."""
    best, index = -math.inf, None
    for i, record in enumerate(history):
        if record["val_auc"] > best:
            best, index = record["val_auc"], i
    return index


def validations_since_best(history: list[dict[str, float]], min_delta: float) -> int:
    """How many validations in a row, at the end of ``history``, brought no new best AUC.

    A validation is a new best when its AUC beats the best so far by more than
    ``min_delta`` (the first one beats nothing); a NaN AUC is never a new best."""
    best, since = -math.inf, 0
    for record in history:
        if record["val_auc"] - best > min_delta:  # the first finite AUC beats -inf
            best, since = record["val_auc"], 0
        else:
            since += 1
    return since


def patience_spent(history: list[dict[str, float]], cfg: TrainConfig) -> bool:
    """Whether early stopping (``cfg.patience``) ends training after ``history``."""
    return cfg.patience is not None and validations_since_best(history, cfg.min_delta) >= (
        cfg.patience
    )


def still_rising(history: list[dict[str, float]], min_delta: float) -> bool:
    """Whether validation AUC was still rising at the end of ``history``: its best AUC is
    at one of the last two validations (one dip at the very end is noise, not a plateau)
    and beats every validation before it by more than ``min_delta``. A lone validation is
    rising (nothing shows a plateau); a history without a finite AUC is not."""
    index = _best_index(history)
    if index is None or index < len(history) - 2:
        return False
    earlier = [r["val_auc"] for r in history[:index] if not math.isnan(r["val_auc"])]
    return not earlier or history[index]["val_auc"] - max(earlier) > min_delta


def make_dense_optimizer(
    params: list[nn.Parameter],
    train: TrainConfig,
    decayed: list[nn.Parameter] | None = None,
) -> torch.optim.Optimizer | None:
    """The dense optimizer in its fastest form with the same math: fused Adam (CPU and
    CUDA) and Adagrad (CPU only) cost ~0.27x and ~0.36x of the per-tensor loop per step
    on 2 CPU cores; SGD keeps the loop (foreach was no faster, fused slower; see
    ``benchmarks/bench_optimizers.py``).

    ``train.weight_decay`` (torch's coupled L2: ``weight_decay x p`` added to each
    gradient, the gradient of FuxiCTR's ``net_regularizer``) applies to the ``decayed``
    ones of ``params`` (default: all), in a param group of their own; at 0 the optimizer
    is the one built before the option."""
    if not params:
        return None
    on_cpu = all(p.device.type == "cpu" for p in params)
    groups: list[Any] = params
    if train.weight_decay:
        chosen = {id(p) for p in (params if decayed is None else decayed)}
        decay = [p for p in params if id(p) in chosen]
        rest = [p for p in params if id(p) not in chosen]
        groups = [{"params": decay, "weight_decay": train.weight_decay}]
        groups += [{"params": rest, "weight_decay": 0.0}] if rest else []
    if train.dense_optimizer == "adam":
        return torch.optim.Adam(groups, lr=train.dense_lr, fused=True)
    if train.dense_optimizer == "adagrad":
        return torch.optim.Adagrad(groups, lr=train.dense_lr, fused=on_cpu or None)
    return torch.optim.SGD(groups, lr=train.dense_lr)


def train_step(
    model: RecModel,
    batch: Batch,
    dense_opt: torch.optim.Optimizer | None,
    step: int,
    embedding_l2: float = 0.0,
) -> torch.Tensor:
    """Training step number ``step`` (from 1) on ``batch`` (already on the model's device):
    forward, BCE loss, backward, the dense optimizer's step, then the embedding's own
    sparse update and hooks (:meth:`EmbeddingMethod.after_step`). Returns the loss tensor
    (not synchronized): the BCE, without the regulariser.

    ``embedding_l2`` (``train.embedding_l2``) adds ``embedding_l2 / 2`` times the sum of
    squares of the embeddings ``[B, F, D]`` the batch looked up to what backward
    differentiates: FuxiCTR's ``(lambda / 2) ||W||^2`` restricted to the rows the batch
    reads (each occurrence once), so every method's lookup, fused fbgemm tables and
    self-updating methods included, gets ``embedding_l2 x e`` added to the gradient of
    each embedding it returned."""
    embedded = None
    if embedding_l2:
        logits, embedded = model.forward_embedded(batch.dense, batch.sparse)
    else:
        logits = model(batch.dense, batch.sparse)
    if batch.loss_norm is None:
        loss = nn.functional.binary_cross_entropy_with_logits(logits, batch.label)
    else:  # a rank's part: its share of the global batch's mean loss
        loss = (
            nn.functional.binary_cross_entropy_with_logits(
                logits, batch.label, weight=batch.weight, reduction="sum"
            )
            / batch.loss_norm
        )
    objective = loss
    if embedded is not None:
        objective = loss + embedding_l2 / 2 * embedded.float().square().sum()
    if dense_opt:
        dense_opt.zero_grad(set_to_none=True)
    objective.backward()  # fused fbgemm tables update themselves here
    if dense_opt:
        dense_opt.step()
    model.embedding.after_step(step)
    return loss


PREDICT_READ_EVERY = 64
"""Evaluation batches whose logits stay on the device before one read to the host."""


@torch.no_grad()
def predict(
    model: RecModel,
    split: SplitArrays,
    batch_size: int,
    device: torch.device,
    progress: bool = False,
    desc: str = "eval",
) -> np.ndarray:
    """Logits ``[N]`` for every row of ``split``, in order. Over the model's ranks, each
    predicts its part of every global batch (a sharded lookup is collective: every rank
    runs as many batches of one shape) and every rank gets all ``N`` logits."""
    was_training = model.training
    model.eval()
    ranks = model.ranks
    out = np.empty(len(split), dtype=np.float32)  # a rank's parts hold at most every row
    start = 0
    pending: list[torch.Tensor] = []  # logits still on the device, read back a chunk at a time

    def read_back() -> None:
        nonlocal start
        if pending:
            logits = torch.cat(pending).cpu().numpy()
            out[start : start + len(logits)] = logits
            start += len(logits)
            pending.clear()

    loader = BatchLoader(split, batch_size * ranks.world, part=ranks.part)
    batches = progress_bar(loader, desc=desc, enabled=progress, leave=False, unit="batch")
    with closing(batches_ahead(iter(batches), device)) as ahead:
        for batch in ahead:
            real = batch.rows  # on the host, before the copy
            batch = batch.to(device)
            pending.append(model(batch.dense, batch.sparse)[:real].float())
            if len(pending) >= PREDICT_READ_EVERY:
                read_back()
    read_back()
    model.train(was_training)
    return ranks.gather_parts(out[:start], len(split), batch_size * ranks.world)


def evaluate(
    model: RecModel,
    split: SplitArrays,
    batch_size: int,
    device: torch.device,
    progress: bool = False,
    desc: str = "eval",
) -> dict[str, float]:
    """Exact AUC and log loss over the whole split (gathered from every rank)."""
    logits = predict(model, split, batch_size, device, progress, desc)
    return binary_metrics(np.asarray(split.label), logits)


def train(
    model: RecModel,
    data: PreparedDataset,
    train_config: TrainConfig,
    seed: int,
    device: torch.device,
    *,
    on_train_metrics: MetricsCallback | None = None,
    on_validation: MetricsCallback | None = None,
    checkpoints: Checkpointer | list[Checkpointer] | None = None,
    curve: ValCurve | None = None,
) -> TrainOutcome:
    """Train on ``data``'s train split; validate at each epoch end (and every
    ``eval_every_steps``); leave ``model`` holding the checkpoint the config asks for.

    With ``checkpoints``, the training state is written at their intervals and, when the
    first one resumes, training continues from its checkpoint exactly where it stopped
    (same batches, same optimizer and RNG state, same metrics as an uninterrupted run).
    Several checkpointers write side by side (the ``checkpoint`` task compares kinds).

    ``on_validation(metrics, step)`` may raise to stop training (e.g. an Optuna prune).

    With ``train_config.patience``, training stops after the validation that makes it that
    many validations in a row without a new best AUC (:func:`validations_since_best`); the
    decision is a function of the validation history alone, so a resumed run (its history
    is in the checkpoint) stops at the same step as an uninterrupted one.

    Over the model's ranks (``model.ranks``: a sharded model's are the job's), each rank
    trains on its part of every global batch; losses and validation metrics are those of
    the whole batch and split, the same on every rank, and only the leader shows progress.

    With ``curve`` (see :func:`val_curve`), validation AUC is also logged along training on
    a part of the validation split (:class:`ValCurve`), changing nothing of the training.
    """
    loop = _Loop.start(model, data, train_config, seed, device, _as_list(checkpoints), curve)
    loop.on_train_metrics, loop.on_validation = on_train_metrics, on_validation
    model.train()
    loop.bar = progress_bar(
        total=loop.total,
        initial=loop.state.step,
        desc="train",
        unit="step",
        enabled=train_config.progress and model.ranks.leader,
    )
    stop = patience_spent(loop.state.history, train_config)  # resumed at the stopping step
    for epoch in range(loop.state.epoch, train_config.epochs):
        if stop:
            break
        stop = loop.epoch(epoch)
        if loop.state.step >= loop.total or stop:
            break
    loop.read_loss()
    loop.bar.close()
    return _outcome(model, train_config, loop.state, loop.total, loop.checkpoint_seconds)


def _as_list(checkpoints: Checkpointer | list[Checkpointer] | None) -> list[Checkpointer]:
    return [checkpoints] if isinstance(checkpoints, Checkpointer) else list(checkpoints or [])


@dataclass
class _Loop:
    """One training run under way: what it reads (model, loader, optimizer, budget) and
    where it is (:class:`LoopState`, restored from a checkpoint when one resumes)."""

    model: RecModel
    cfg: TrainConfig
    device: torch.device
    loader: BatchLoader
    dense_opt: torch.optim.Optimizer | None
    total: int
    """Steps in the whole run."""
    val_split: SplitArrays
    writers: list[Checkpointer]
    state: LoopState
    curve: ValCurve | None
    curve_steps: set[int]
    curve_split: SplitArrays | None
    on_train_metrics: MetricsCallback | None = None
    on_validation: MetricsCallback | None = None
    checkpoint_seconds: float = 0.0
    tick: float = 0.0
    """When the clock of training time (``state.seconds``) last started."""
    bar: Any = None
    loss_total: torch.Tensor | None = None
    """``state.loss_sum`` plus every step's loss since, summed on the device in float64 in
    step order: the very sum the host made adding each step's loss to ``state.loss_sum``,
    without reading a loss per step (:meth:`read_loss` reads it back)."""

    @classmethod
    def start(
        cls,
        model: RecModel,
        data: PreparedDataset,
        cfg: TrainConfig,
        seed: int,
        device: torch.device,
        writers: list[Checkpointer],
        curve: ValCurve | None,
    ) -> _Loop:
        """The run's loader (this rank's part of each batch), optimizer and budget; its
        checkpointers started and the first one's checkpoint restored, if any."""
        if cfg.embedding_l2 and model.ranks.distributed:
            raise ConfigError(
                "train.embedding_l2: not supported in a distributed run (a sharded lookup's "
                "embeddings stay inside TorchRec's forward); train in one process"
            )
        loader = BatchLoader(
            data.split("train"),
            cfg.batch_size,
            shuffle=cfg.shuffle,
            seed=seed,
            part=model.ranks.part,
        )
        dense_opt = make_dense_optimizer(model.dense_parameters(), cfg, model.net_parameters())
        total = min(cfg.max_steps or 10**18, cfg.epochs * len(loader))
        val_split = data.split("val")
        for writer in writers:
            writer.start(model)  # checks the writer's ranks are the model's
        state = (writers[0].restore(model, dense_opt) if writers else None) or LoopState()
        return cls(
            model,
            cfg,
            device,
            loader,
            dense_opt,
            total,
            val_split,
            writers,
            state,
            curve,
            curve.steps(total) if curve else set(),
            curve.split(val_split) if curve else None,
        )

    @property
    def log_every(self) -> int:
        """Steps between loss logs, each the one read of the device's loss sum (1 to 50:
        a 20th of the run)."""
        return max(1, min(50, self.total // 20))

    def epoch(self, epoch: int) -> bool:
        """Train epoch ``epoch`` (the rest of it, on resuming) up to the budget, then
        validate; whether early stopping ends training."""
        state = self.state
        if epoch != state.epoch:
            state.epoch, state.batch = epoch, 0
        self.loader.set_epoch(epoch)
        self.tick = time.perf_counter()
        stop = False
        batches = self.loader.batches(state.batch) if state.step < self.total else iter(())
        with closing(batches_ahead(batches, self.device)) as ahead:
            for batch in ahead:
                stop = self.step(batch)
                if state.step >= self.total or stop:
                    break
        state.seconds += time.perf_counter() - self.tick
        if not state.history or state.history[-1]["step"] != state.step:
            stop = self.validate()
        return stop

    def step(self, batch: Batch) -> bool:
        """One training step, then what falls due at it (loss log, validation, curve,
        checkpoints); whether early stopping ends training."""
        state, model = self.state, self.model
        state.step += 1
        state.batch += 1
        batch = batch.to(self.device)
        for writer in self.writers:
            writer.observe(model, batch.sparse)
        loss = train_step(model, batch, self.dense_opt, state.step, self.cfg.embedding_l2)
        state.examples += len(batch)
        self.add_loss(loss)
        state.loss_count += 1
        self.bar.update(1)
        if state.step % self.log_every == 0 or state.step == self.total:
            self.log_loss()
        return self.between_steps()

    def add_loss(self, loss: torch.Tensor) -> None:
        """Add a step's loss to :attr:`loss_total` on the device; no host read."""
        if self.loss_total is None:
            self.loss_total = loss.new_full((), self.state.loss_sum, dtype=torch.float64)
        self.loss_total.add_(loss.detach().to(torch.float64))

    def read_loss(self) -> None:
        """Read :attr:`loss_total` back into ``state.loss_sum``: the loop's one host read of
        a device value, at a loss log (every :attr:`log_every` steps) or a checkpoint. A
        NaN or infinite loss of any step since the last read is in it, so the logged loss
        shows it as it did when each step's loss was read."""
        if self.loss_total is not None:
            self.state.loss_sum = float(self.loss_total)
            self.loss_total = None

    def log_loss(self) -> None:
        """Show and report the mean training loss since the last report (summed over the
        ranks: each rank's loss is its share of the batch's mean loss)."""
        self.read_loss()
        state = self.state
        state.loss_sum = self.model.ranks.sum([state.loss_sum])[0]
        self.bar.set_postfix(loss=f"{state.loss_sum / state.loss_count:.4f}")
        if self.on_train_metrics:
            self.on_train_metrics({"train_logloss": state.loss_sum / state.loss_count}, state.step)
        state.loss_sum, state.loss_count = 0.0, 0

    def between_steps(self) -> bool:
        """Validation every ``eval_every_steps``, the curve's points and the checkpoints
        due after this step, off the training clock; whether early stopping ends training."""
        state, cfg = self.state, self.cfg
        stop = False
        every = cfg.eval_every_steps
        if every and state.step % every == 0 and state.step < self.total:
            with self.paused():
                stop = self.validate()
        if self.curve and self.curve_split is not None and state.step in self.curve_steps:
            with self.paused():
                self.curve.evaluate(
                    self.model, self.curve_split, cfg.eval_batch_size, self.device, state.step
                )
        due = [writer for writer in self.writers if writer.due(state.step)]
        if due:
            self.read_loss()  # the checkpoint holds the loss summed so far
            with self.paused():
                self.checkpoint_seconds += sum(
                    w.save(self.model, self.dense_opt, state).seconds for w in due
                )
        return stop

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The training clock stopped inside."""
        self.state.seconds += time.perf_counter() - self.tick
        yield
        self.tick = time.perf_counter()

    def validate(self) -> bool:
        """Validate, record, and say whether early stopping ends training here."""
        state, cfg, model = self.state, self.cfg, self.model
        metrics = evaluate(model, self.val_split, cfg.eval_batch_size, self.device)
        record = {"step": float(state.step), **{f"val_{k}": v for k, v in metrics.items()}}
        state.history.append(record)
        if self.on_validation:
            self.on_validation({f"val_{k}": v for k, v in metrics.items()}, state.step)
        if cfg.checkpoint == "best" and metrics["auc"] > state.best_auc:
            state.best_auc, state.best_step = metrics["auc"], state.step
            state.best = model.snapshot()
        return patience_spent(state.history, cfg)


def _outcome(
    model: RecModel,
    cfg: TrainConfig,
    state: LoopState,
    total: int,
    checkpoint_seconds: float,
) -> TrainOutcome:
    """Load the checkpoint the config keeps into ``model``; what training produced."""
    checkpoint_step = state.step
    if cfg.checkpoint == "best" and state.best is not None:
        model.restore(state.best)
        checkpoint_step = state.best_step
    spent = patience_spent(state.history, cfg)
    best = _best_index(state.history)
    return TrainOutcome(
        state.step,
        state.examples,
        state.seconds,
        cfg.checkpoint,
        checkpoint_step,
        state.history,
        checkpoint_seconds,
        stopped_early=spent and state.step < total,
        still_improving=not spent and still_rising(state.history, cfg.min_delta),
        best_step=int(state.history[best]["step"]) if best is not None else 0,
    )
