"""Training and evaluation: the one loop every task, study and reproduction uses."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from suite.config import TrainConfig
from suite.data.batch import Batch
from suite.data.loader import BatchLoader
from suite.data.prepared import PreparedDataset, SplitArrays
from suite.embeddings.tables import make_sparse_optimizer
from suite.metrics import binary_metrics
from suite.models.base import RecModel
from suite.progress import progress_bar

MetricsCallback = Callable[[dict[str, float], int], None]


@dataclass
class TrainOutcome:
    """What training produced: validation history and which checkpoint was kept."""

    steps: int
    examples: int
    seconds: float
    checkpoint: str
    checkpoint_step: int
    history: list[dict[str, float]] = field(default_factory=list)

    @property
    def samples_per_second(self) -> float:
        return self.examples / self.seconds if self.seconds > 0 else float("nan")


def make_dense_optimizer(
    params: list[nn.Parameter], train: TrainConfig
) -> torch.optim.Optimizer | None:
    """The dense optimizer in its fastest form with the same math: fused Adam (CPU and
    CUDA) and Adagrad (CPU only) cost ~0.27x and ~0.36x of the per-tensor loop per step
    on 2 CPU cores; SGD keeps the loop (foreach was no faster, fused slower; see
    ``benchmarks/bench_optimizers.py``)."""
    if not params:
        return None
    on_cpu = all(p.device.type == "cpu" for p in params)
    if train.dense_optimizer == "adam":
        return torch.optim.Adam(params, lr=train.dense_lr, fused=True)
    if train.dense_optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=train.dense_lr, fused=on_cpu or None)
    return torch.optim.SGD(params, lr=train.dense_lr)


def make_optimizers(
    model: RecModel, train: TrainConfig
) -> tuple[torch.optim.Optimizer | None, torch.optim.Optimizer | None]:
    """The dense optimizer and, for embeddings with sparse gradients, the sparse one
    (either may be ``None``: fused tables update themselves)."""
    dense_opt = make_dense_optimizer(model.dense_parameters(), train)
    sparse_params = model.embedding.sparse_parameters()
    sparse_opt = (
        make_sparse_optimizer(sparse_params, train.sparse_optimizer, train.sparse_lr)
        if sparse_params
        else None
    )
    return dense_opt, sparse_opt


def train_step(
    model: RecModel,
    batch: Batch,
    dense_opt: torch.optim.Optimizer | None,
    sparse_opt: torch.optim.Optimizer | None,
) -> torch.Tensor:
    """One training step on ``batch`` (already on the model's device): forward, BCE loss,
    backward, optimizer steps. Returns the loss tensor (not synchronized)."""
    logits = model(batch.dense, batch.sparse)
    loss = nn.functional.binary_cross_entropy_with_logits(logits, batch.label)
    if dense_opt:
        dense_opt.zero_grad(set_to_none=True)
    if sparse_opt:
        sparse_opt.zero_grad(set_to_none=True)
    loss.backward()  # fused fbgemm tables update themselves here
    if dense_opt:
        dense_opt.step()
    if sparse_opt:
        sparse_opt.step()
    return loss


@torch.no_grad()
def predict(
    model: RecModel,
    split: SplitArrays,
    batch_size: int,
    device: torch.device,
    progress: bool = False,
    desc: str = "eval",
) -> np.ndarray:
    """Logits ``[N]`` for every row of ``split``, in order."""
    was_training = model.training
    model.eval()
    out = np.empty(len(split), dtype=np.float32)
    start = 0
    loader = BatchLoader(split, batch_size)
    for batch in progress_bar(loader, desc=desc, enabled=progress, leave=False, unit="batch"):
        batch = batch.to(device)
        logits = model(batch.dense, batch.sparse)
        out[start : start + len(batch)] = logits.float().cpu().numpy()
        start += len(batch)
    model.train(was_training)
    return out


def evaluate(
    model: RecModel,
    split: SplitArrays,
    batch_size: int,
    device: torch.device,
    progress: bool = False,
    desc: str = "eval",
) -> dict[str, float]:
    """Exact AUC and log loss over the whole split."""
    logits = predict(model, split, batch_size, device, progress, desc)
    return binary_metrics(np.asarray(split.label), logits)


def train(
    model: RecModel,
    data: PreparedDataset,
    train_config: TrainConfig,
    seed: int,
    device: torch.device,
    on_train_metrics: MetricsCallback | None = None,
    on_validation: MetricsCallback | None = None,
) -> TrainOutcome:
    """Train on ``data``'s train split; validate at each epoch end (and every
    ``eval_every_steps``); leave ``model`` holding the checkpoint the config asks for.

    ``on_validation(metrics, step)`` may raise to stop training (e.g. an Optuna prune).
    """
    cfg = train_config
    loader = BatchLoader(data.split("train"), cfg.batch_size, shuffle=cfg.shuffle, seed=seed)
    dense_opt, sparse_opt = make_optimizers(model, cfg)
    total = min(cfg.max_steps or 10**18, cfg.epochs * len(loader))
    val_split = data.split("val")
    log_every = max(1, min(50, total // 20))

    history: list[dict[str, float]] = []
    best: tuple[float, int, dict[str, Any] | None] = (-float("inf"), 0, None)
    step = examples = 0
    loss_sum, loss_count = 0.0, 0
    seconds = 0.0

    def validate() -> None:
        nonlocal best
        metrics = evaluate(model, val_split, cfg.eval_batch_size, device)
        record = {"step": float(step), **{f"val_{k}": v for k, v in metrics.items()}}
        history.append(record)
        if on_validation:
            on_validation({f"val_{k}": v for k, v in metrics.items()}, step)
        if cfg.checkpoint == "best" and metrics["auc"] > best[0]:
            best = (metrics["auc"], step, copy.deepcopy(model.state_dict()))

    model.train()
    bar = progress_bar(total=total, desc="train", unit="step", enabled=cfg.progress)
    for epoch in range(cfg.epochs):
        loader.set_epoch(epoch)
        tick = time.perf_counter()
        for batch in loader:
            loss = train_step(model, batch.to(device), dense_opt, sparse_opt)
            step += 1
            examples += len(batch)
            model.embedding.after_step(step)
            loss_sum += float(loss.detach())
            loss_count += 1
            bar.update(1)
            if step % log_every == 0 or step == total:
                bar.set_postfix(loss=f"{loss_sum / loss_count:.4f}")
                if on_train_metrics:
                    on_train_metrics({"train_logloss": loss_sum / loss_count}, step)
                loss_sum, loss_count = 0.0, 0
            if cfg.eval_every_steps and step % cfg.eval_every_steps == 0 and step < total:
                seconds += time.perf_counter() - tick
                validate()
                tick = time.perf_counter()
            if step >= total:
                break
        seconds += time.perf_counter() - tick
        if not history or history[-1]["step"] != step:
            validate()
        if step >= total:
            break
    bar.close()

    checkpoint_step = step
    if cfg.checkpoint == "best" and best[2] is not None:
        model.load_state_dict(best[2])
        checkpoint_step = best[1]
    return TrainOutcome(step, examples, seconds, cfg.checkpoint, checkpoint_step, history)
