"""``accuracy``: train, then exact AUC and log loss on validation and test."""

from __future__ import annotations

from suite.engine.train import evaluate, train
from suite.models.base import RecModel
from suite.registry import TASKS
from suite.tasks.base import RunContext, Task, TaskOutput


@TASKS.register("accuracy")
class AccuracyTask(Task):
    """Train for the budget; report val/test AUC and log loss of the chosen checkpoint."""

    def run(self, ctx: RunContext) -> TaskOutput:
        return train_and_evaluate(ctx)[1]


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
    )
    progress = cfg.train.progress
    val = evaluate(
        model, ctx.data.split("val"), cfg.train.eval_batch_size, ctx.device, progress, "val"
    )
    test = evaluate(
        model, ctx.data.split("test"), cfg.train.eval_batch_size, ctx.device, progress, "test"
    )
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
        "flops_per_example": float(model.flops_per_example()),
    }
    higher = {
        "val_auc": True,
        "val_logloss": False,
        "test_auc": True,
        "test_logloss": False,
        "train_samples_per_s": True,
        "embedding_bytes": False,
        "embedding_parameter_bytes": False,
        "embedding_auxiliary_bytes": False,
        "embedding_optimizer_bytes": False,
        "flops_per_example": False,
    }
    if model.payload is not None:
        comm = model.payload.figures()
        metrics |= comm
        higher |= {k: k == "comm_compression_ratio" for k in comm}
    details = {
        "checkpoint": outcome.checkpoint,
        "checkpoint_step": outcome.checkpoint_step,
        "steps": outcome.steps,
        "examples": outcome.examples,
        "train_seconds": outcome.seconds,
        "validation_history": outcome.history,
        "embedding_memory": {
            "parameters": memory.parameters,
            "auxiliary": memory.auxiliary,
            "optimizer": memory.optimizer,
        },
        "embedding_layout": model.embedding.layout(),
        "test_pred_ctr": test["pred_ctr"],
        "test_ctr": test["ctr"],
    }
    return model, TaskOutput(metrics, higher, details)
