"""``lowprec``: train, then evaluate the tables in fp32 and in lower precisions."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from suite.config import RunConfig
from suite.embeddings.base import ComposedEmbedding
from suite.embeddings.quantize import quantize_embedding
from suite.engine.train import evaluate, train
from suite.errors import ConfigError
from suite.models.base import RecModel
from suite.registry import TASKS
from suite.tasks.base import RunContext, Task, TaskOutput

LowPrecision = Literal["fp16", "int8", "int4"]


class LowPrecOptions(BaseModel):
    """Which precisions to evaluate after training."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    precisions: list[LowPrecision] = Field(
        default_factory=lambda: ["fp16", "int8", "int4"],
        min_length=1,
        description="table precisions evaluated after training, besides fp32",
    )


@TASKS.register("lowprec")
class LowPrecTask(Task):
    """Train as ``accuracy``; report test AUC, log loss and table bytes per precision."""

    Options = LowPrecOptions

    def check(self, config: RunConfig) -> None:
        if not issubclass(config.embedding.registry.get(config.embedding.name), ComposedEmbedding):
            raise ConfigError(
                f"task lowprec: embedding {config.embedding.name!r} has no plain tables to quantize "
                "(allowed: full, hash, qr, mixed_dim)"
            )

    def run(self, ctx: RunContext) -> TaskOutput:
        cfg = ctx.config
        options: LowPrecOptions = cfg.task.typed_options()
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
        progress, batch = cfg.train.progress, cfg.train.eval_batch_size
        val = evaluate(model, ctx.data.split("val"), batch, ctx.device, progress, "val")
        test = evaluate(model, ctx.data.split("test"), batch, ctx.device, progress, "test")
        memory = model.embedding.memory()
        metrics = {
            "val_auc": val["auc"],
            "val_logloss": val["logloss"],
            "test_auc": test["auc"],
            "test_logloss": test["logloss"],
            "embedding_bytes": float(memory.parameters + memory.auxiliary),
        }
        higher = {
            "val_auc": True,
            "val_logloss": False,
            "test_auc": True,
            "test_logloss": False,
            "embedding_bytes": False,
        }
        per_precision = {}
        for precision in dict.fromkeys(options.precisions):
            low = RecModel(quantize_embedding(model.embedding, precision), model.backbone)
            result = evaluate(low, ctx.data.split("test"), batch, ctx.device, progress, precision)
            low_memory = low.embedding.memory()
            figures = {
                f"test_auc_{precision}": result["auc"],
                f"test_logloss_{precision}": result["logloss"],
                f"auc_delta_{precision}": result["auc"] - test["auc"],
                f"logloss_delta_{precision}": result["logloss"] - test["logloss"],
                f"embedding_bytes_{precision}": float(low_memory.parameters + low_memory.auxiliary),
            }
            metrics.update(figures)
            higher.update(
                {
                    f"test_auc_{precision}": True,
                    f"test_logloss_{precision}": False,
                    f"auc_delta_{precision}": True,
                    f"logloss_delta_{precision}": False,
                    f"embedding_bytes_{precision}": False,
                }
            )
            per_precision[precision] = {
                "parameters": low_memory.parameters,
                "auxiliary": low_memory.auxiliary,
            }
        details = {
            "checkpoint": outcome.checkpoint,
            "checkpoint_step": outcome.checkpoint_step,
            "steps": outcome.steps,
            "train_seconds": outcome.seconds,
            "validation_history": outcome.history,
            "embedding_memory": {
                "fp32": {
                    "parameters": memory.parameters,
                    "auxiliary": memory.auxiliary,
                    "optimizer": memory.optimizer,
                },
                **per_precision,
            },
        }
        return TaskOutput(metrics, higher, details)
