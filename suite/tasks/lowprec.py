"""``lowprec``: train, then evaluate the tables in fp32 and in lower precisions."""

from __future__ import annotations

from typing import get_args

from pydantic import Field

from suite.config import Frozen, RunConfig
from suite.embeddings.base import ComposedEmbedding
from suite.embeddings.quantize import LowPrecision, quantizable_methods, quantize_embedding
from suite.engine.train import evaluate
from suite.errors import ConfigError
from suite.kernel_backend import require_fbgemm
from suite.models.base import RecModel
from suite.registry import TASKS
from suite.results import MetricSpec
from suite.tasks.accuracy import ACCURACY_METRICS, train_and_evaluate
from suite.tasks.base import RunContext, Task, TaskOutput


class LowPrecOptions(Frozen):
    """Which precisions to evaluate after training."""

    precisions: list[LowPrecision] = Field(
        default_factory=lambda: list(get_args(LowPrecision)),
        min_length=1,
        description="table precisions evaluated after training, besides fp32",
    )


@TASKS.register("lowprec")
class LowPrecTask(Task):
    """Train as ``accuracy``; report test AUC, log loss and table bytes per precision."""

    metrics = (
        *ACCURACY_METRICS,
        MetricSpec("test_auc_*", True, "Test AUC {}", bounds=(0.0, 1.0), shown=True),
        MetricSpec("test_logloss_*", False, "Test log loss {}", bounds=(0.0, float("inf"))),
        MetricSpec("auc_delta_*", True, "AUC change {}", shown=True),
        MetricSpec("logloss_delta_*", False, "Log loss change {}"),
        MetricSpec("embedding_bytes_*", False, "Embedding memory {}", "bytes", "size", shown=True),
    )

    Options = LowPrecOptions

    def check(self, config: RunConfig) -> None:
        if not issubclass(config.embedding.registry.get(config.embedding.name), ComposedEmbedding):
            raise ConfigError(
                f"task lowprec: embedding {config.embedding.name!r} has no plain tables to quantize "
                f"(allowed: {', '.join(quantizable_methods())})"
            )
        require_fbgemm("task lowprec (fbgemm's n-bit inference tables)")

    def run(self, ctx: RunContext) -> TaskOutput:
        cfg = ctx.config
        options: LowPrecOptions = cfg.task.typed_options()
        model, base = train_and_evaluate(ctx)
        test = {"auc": base.metrics["test_auc"], "logloss": base.metrics["test_logloss"]}
        metrics = dict(base.metrics)
        progress, batch = cfg.train.progress, cfg.train.eval_batch_size
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
            per_precision[precision] = {
                "parameters": low_memory.parameters,
                "auxiliary": low_memory.auxiliary,
            }
        details = dict(base.details)
        details["embedding_memory"] = {"fp32": base.details["embedding_memory"], **per_precision}
        return TaskOutput(metrics, details=details)
