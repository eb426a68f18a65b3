"""``accuracy``: train, then exact AUC and log loss on validation and test.

The test predictions (logits ``[N]``, labels ``[N]``) are kept beside the result JSON
(``details["arrays"]``), so two runs' AUCs on the same test set can be compared per seed.
Whether training converged is in the details too: ``stopped_early`` (``train.patience``
ended it), ``still_improving`` (the budget ran out while validation AUC still rose),
``best_step`` and ``validations`` (see :class:`suite.engine.train.TrainOutcome`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from suite.engine.train import evaluate, predict, train, val_curve
from suite.metrics import binary_metrics
from suite.models.base import RecModel
from suite.registry import TASKS
from suite.results import MetricSpec
from suite.tasks.base import RunContext, Task, TaskOutput

ACCURACY_METRICS = (
    MetricSpec("test_auc", True, "Test AUC", primary=True, bounds=(0.0, 1.0), shown=True),
    MetricSpec("test_logloss", False, "Test log loss", bounds=(0.0, math.inf), shown=True),
    MetricSpec("val_auc", True, "Val AUC", bounds=(0.0, 1.0)),
    MetricSpec("val_logloss", False, "Val log loss", bounds=(0.0, math.inf)),
    MetricSpec(
        "train_samples_per_s", True, "Training speed", "samples/s", "measured", bounds=(0, math.inf)
    ),
    MetricSpec(
        "embedding_bytes",
        False,
        "Embedding memory",
        "bytes",
        "size",
        bounds=(0, math.inf),
        shown=True,
    ),
    MetricSpec(
        "embedding_parameter_bytes",
        False,
        "Embedding parameters",
        "bytes",
        "size",
        bounds=(0, math.inf),
    ),
    MetricSpec(
        "embedding_auxiliary_bytes",
        False,
        "Embedding auxiliary",
        "bytes",
        "size",
        bounds=(0, math.inf),
    ),
    MetricSpec(
        "embedding_optimizer_bytes",
        False,
        "Embedding optimizer state",
        "bytes",
        "size",
        bounds=(0, math.inf),
    ),
    MetricSpec(
        "embedding_total_bytes",
        False,
        "Embedding memory with optimizer state",
        "bytes",
        "size",
        bounds=(0, math.inf),
    ),
    MetricSpec(
        "flops_per_example", False, "Forward FLOPs", "per example", "count", bounds=(0, math.inf)
    ),
    # with an all-to-all payload codec (comm.codec)
    MetricSpec("comm_raw_bytes", False, "All-to-all payload, raw", "bytes", "size"),
    MetricSpec("comm_wire_bytes", False, "All-to-all payload, sent", "bytes", "size"),
    MetricSpec("comm_compression_ratio", True, "Payload compression", "x", "ratio"),
    MetricSpec("comm_codec_seconds", False, "Codec time", "s", "measured"),
    MetricSpec("comm_max_bound_excess", False, "Codec error-bound excess", kind="ratio"),
)


@TASKS.register("accuracy")
class AccuracyTask(Task):
    """Train for the budget; report val/test AUC and log loss of the chosen checkpoint."""

    metrics = ACCURACY_METRICS
    distributed = True

    def run(self, ctx: RunContext) -> TaskOutput:
        model, output = train_and_evaluate(ctx)
        if model.ranks.leader:
            output.details["plots"] = [str(p) for p in draw_plots(ctx, output)]
        return output


def draw_plots(ctx: RunContext, output: TaskOutput) -> list[Path]:
    """The run's validation curve and test ROC under ``results_dir/plots/accuracy/``
    (logged to its MLflow run under ``plots/``). A disk without room for them skips them
    with a warning: the figures of the run go on to MLflow first."""
    import sys

    from suite.errors import DiskFullError
    from suite.fileio import disk_full_error, is_disk_full
    from suite.results import RESULTS_OPTION
    from suite.tasks.accuracy_plots import draw_accuracy

    cfg = ctx.config
    name = f"{cfg.model.name}-{cfg.embedding.name}-{cfg.config_hash()}-seed{cfg.seed}"
    out = Path(cfg.tracking.results_dir) / "plots" / "accuracy" / cfg.dataset.name / name
    try:
        return draw_accuracy(
            output.details.get("validation_history") or [],
            output.arrays["test_labels"],
            output.arrays["test_logits"],
            output.metrics["test_auc"],
            cfg.embedding.name,
            out,
            RESULTS_OPTION,
        )
    except (DiskFullError, OSError) as exc:
        if not isinstance(exc, DiskFullError) and not is_disk_full(exc, out):
            raise
        print(f"warning: no plots: {disk_full_error(out, None, RESULTS_OPTION)}", file=sys.stderr)
        return []


def train_and_evaluate(ctx: RunContext) -> tuple[RecModel, TaskOutput]:
    """Train the run's model; return it (holding the chosen checkpoint) and the figures
    of the accuracy task, which other tasks extend."""
    cfg = ctx.config
    model = ctx.build_model()
    outcome = train(
        model,
        ctx.data,
        cfg.train,
        cfg.seed,
        ctx.device,
        on_train_metrics=ctx.log_metrics,
        on_validation=ctx.on_validation,
        checkpoints=ctx.checkpoints,
        curve=val_curve(cfg.tracking, cfg.train, ctx.log_metrics, model.ranks.distributed),
    )
    progress = cfg.train.progress and model.ranks.leader
    batch = cfg.train.eval_batch_size
    val = evaluate(model, ctx.data.split("val"), batch, ctx.device, progress, "val")
    test_split = ctx.data.split("test")
    test_logits = predict(model, test_split, batch, ctx.device, progress, "test")
    test_labels = np.asarray(test_split.label)
    test = binary_metrics(test_labels, test_logits)
    memory = model.embedding.memory()
    metrics = {
        "val_auc": val["auc"],
        "val_logloss": val["logloss"],
        "test_auc": test["auc"],
        "test_logloss": test["logloss"],
        "train_samples_per_s": outcome.samples_per_second,
        "embedding_bytes": float(memory.parameters + memory.auxiliary),
        "embedding_parameter_bytes": float(memory.parameters),
        "embedding_auxiliary_bytes": float(memory.auxiliary),
        "embedding_optimizer_bytes": float(memory.optimizer),
        "embedding_total_bytes": float(memory.parameters + memory.auxiliary + memory.optimizer),
        "flops_per_example": float(model.flops_per_example()),
    }
    if model.payload is not None:
        metrics |= model.payload.figures()
    metrics |= model.wire_figures()  # TorchRec's quantized all-to-all, counted on the wire
    details = {
        "checkpoint": outcome.checkpoint,
        "checkpoint_step": outcome.checkpoint_step,
        "steps": outcome.steps,
        "examples": outcome.examples,
        "train_seconds": outcome.seconds,
        "validation_history": outcome.history,
        **outcome.convergence(),  # stopped_early, still_improving, best_step, validations
        "embedding_memory": {
            "parameters": memory.parameters,
            "auxiliary": memory.auxiliary,
            "optimizer": memory.optimizer,
        },
        "embedding_layout": model.embedding.layout(),
        "test_pred_ctr": test["pred_ctr"],
        "test_ctr": test["ctr"],
    }
    details |= model.placement()  # a sharded model's world_size and sharding_plan
    # kept for tests of two AUCs on the same test set (DeLong's, in reproductions)
    arrays = {"test_logits": test_logits, "test_labels": test_labels.astype(np.uint8)}
    return model, TaskOutput(metrics, details=details, arrays=arrays)
