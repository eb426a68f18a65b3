"""``checkpoint``: what checkpoints of a run cost, full against Check-N-Run's incremental and
quantized ones (Eisenman et al., arXiv 2010.08679), and what restoring from each costs in
accuracy.

One training run writes every kind side by side at the same interval (each into its own
directory, all of them kept):

- ``full``: the whole training state, fp32 (the baseline);
- ``incremental``: the rows modified since the last checkpoint, a full one when the
  chain would make a restore read more than ``restore_budget`` full checkpoints;
- ``8-bit``, ``4-bit``, ``2-bit``: full checkpoints with the embedding weights quantized
  row-wise (uniform asymmetric);
- ``incremental-<b>-bit`` (``combined_bits``): both, as Check-N-Run deploys them.

Per kind: bytes per checkpoint and in total, of the embedding weights alone (what
quantization shrinks), of the embedding (weights, their row-wise optimizer state, which
every kind keeps exact as Check-N-Run quantizes embedding vectors only, and an
increment's row ids) and of everything (every data file of a checkpoint; its small
manifest, whose time stamps vary, left out); write time and bandwidth; restore time; the
fraction of rows modified per interval; the write-bandwidth reduction (total bytes
written, full / kind) and capacity reduction (largest storage a restore needs, full /
kind). Per bit width, the arithmetic bound of a quantized checkpoint's reduction (a row
of ``dim`` float32 values becomes ``dim * bits / 8`` bytes of codes plus a float16 scale
and minimum; the optimizer state stays) and, in the details, the dim it needs to reach
6x: at dim 16, 4 bits save at most 4.25x of the embedding bytes (5.3x of the weights). Then, per kind, a fresh model is
restored from the checkpoint nearest ``restore_at`` of training and trained to the end
down the same loop; its test AUC is compared with the uninterrupted run's (full and
incremental restores must match it bit for bit). The AUC cost per restore of each bit
width gives Check-N-Run's adaptive choice of bits for ``expected_restores``.

The run keeps the ``final`` model (``train.checkpoint`` is set to ``final``) so that the
restored runs are compared at the same step. Plots under ``results/checkpoint/``: bytes
per checkpoint over training per kind, and AUC cost against bytes saved.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from suite.config import RunConfig
from suite.embeddings.base import supports_checkpoints
from suite.engine.checkpoint import (
    Checkpointer,
    CheckpointEvery,
    CheckpointInfo,
    CheckpointPolicy,
    adaptive_bits,
    quantization_bound,
    quantized_row_bytes,
)
from suite.engine.train import evaluate, train
from suite.errors import ConfigError
from suite.registry import TASKS
from suite.results import MetricSpec
from suite.tasks.base import RunContext, Task, TaskOutput

PLOT_DIR = Path("results") / "checkpoint"


class CheckpointOptions(BaseModel):
    """The interval, the kinds compared and where the restore happens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_steps: int = Field(50, ge=1, description="steps between checkpoints")
    bits: list[int] = Field(
        default_factory=lambda: [8, 4, 2], description="quantized kinds' bit widths"
    )
    combined_bits: list[int] = Field(
        default_factory=lambda: [4], description="incremental + quantized kinds' bit widths"
    )
    restore_budget: float = Field(
        3.0, gt=0, description="incremental chain read on restore <= this x a full checkpoint"
    )
    restore_at: float = Field(
        0.5, gt=0, lt=1, description="restore from the checkpoint nearest this fraction of training"
    )
    expected_restores: list[float] = Field(
        default_factory=lambda: [1, 5, 20, 100],
        description="report the adaptive bit width for these expected numbers of restores",
    )
    auc_tolerance: float = Field(0.001, gt=0, description="AUC cost the adaptive choice accepts")
    plot: bool = Field(True, description="draw results/checkpoint/<dataset>-<confighash>-*.png")

    @field_validator("bits", "combined_bits")
    @classmethod
    def _bit_widths(cls, value: list[int]) -> list[int]:
        bad = [b for b in value if b not in (8, 4, 2)]
        if bad or len(set(value)) != len(value):
            raise ValueError(f"expected distinct bit widths among 8, 4, 2, got {value}")
        return value


def kinds(options: CheckpointOptions) -> dict[str, CheckpointPolicy]:
    """Kind name -> its checkpoint policy (all kept, for the restores)."""
    budget = options.restore_budget
    out = {
        "full": CheckpointPolicy(keep_all=True),
        "incremental": CheckpointPolicy(incremental=True, restore_budget=budget, keep_all=True),
    }
    for bits in options.bits:
        out[f"{bits}-bit"] = CheckpointPolicy(bits=bits, keep_all=True)
    for bits in options.combined_bits:
        out[f"incremental-{bits}-bit"] = CheckpointPolicy(
            incremental=True, bits=bits, restore_budget=budget, keep_all=True
        )
    return out


@TASKS.register("checkpoint")
class CheckpointTask(Task):
    """Bytes, bandwidth, restore time and restored accuracy of full, incremental and
    quantized checkpoints (Check-N-Run)."""

    Options = CheckpointOptions
    metrics = (
        MetricSpec(
            "incremental_embedding_bandwidth_reduction",
            True,
            "Incremental: embedding write reduction",
            "x",
            "ratio",
            primary=True,
            shown=True,
        ),
        MetricSpec("test_auc", True, "Test AUC (uninterrupted)", bounds=(0.0, 1.0), shown=True),
        MetricSpec("*_checkpoints", True, "{} checkpoints written", kind="count"),
        MetricSpec(
            "*_embedding_bytes_per_checkpoint",
            False,
            "{} embedding bytes per checkpoint",
            "bytes",
            "size",
        ),
        MetricSpec(
            "*_weight_bytes_per_checkpoint",
            False,
            "{} embedding weight bytes per checkpoint",
            "bytes",
            "size",
        ),
        MetricSpec("*_bytes_per_checkpoint", False, "{} bytes per checkpoint", "bytes", "size"),
        MetricSpec("*_bytes_total", False, "{} bytes written", "bytes", "size"),
        MetricSpec("*_write_seconds", False, "{} write time", "s", "measured"),
        MetricSpec("*_write_mb_per_s", True, "{} write bandwidth", "MB/s", "measured"),
        MetricSpec(
            "*_embedding_bandwidth_reduction",
            True,
            "{} embedding write reduction",
            "x",
            "ratio",
            shown=True,
        ),
        MetricSpec(
            "*_embedding_capacity_reduction", True, "{} embedding capacity reduction", "x", "ratio"
        ),
        MetricSpec(
            "*_weight_bandwidth_reduction",
            True,
            "{} embedding weight write reduction",
            "x",
            "ratio",
            shown=True,
        ),
        MetricSpec(
            "*_embedding_reduction_bound",
            True,
            "{} embedding write reduction, arithmetic bound",
            "x",
            "ratio",
        ),
        MetricSpec(
            "*_weight_reduction_bound",
            True,
            "{} embedding weight write reduction, arithmetic bound",
            "x",
            "ratio",
        ),
        MetricSpec("*_bandwidth_reduction", True, "{} write reduction", "x", "ratio"),
        MetricSpec("*_capacity_reduction", True, "{} capacity reduction", "x", "ratio"),
        MetricSpec("*_restore_seconds", False, "{} restore time", "s", "measured"),
        MetricSpec("*_restored_test_auc", True, "{} restored test AUC", bounds=(0.0, 1.0)),
        MetricSpec("*_auc_cost", False, "{} AUC cost of restoring", shown=True),
        MetricSpec(
            "modified_rows_fraction",
            False,
            "Rows modified per interval",
            kind="ratio",
            bounds=(0.0, 1.0),
        ),
        MetricSpec(
            "checkpoint_overhead", False, "Checkpoint share of training time", kind="measured"
        ),
        MetricSpec("adaptive_bits_r*", False, "Adaptive bit width at {} restores", "bits", "count"),
        MetricSpec("train_seconds", False, "Training time", "s", "measured"),
        MetricSpec("checkpoint_seconds", False, "Checkpoint writing time", "s", "measured"),
    )

    def check(self, config: RunConfig) -> None:
        if not supports_checkpoints(config.embedding.registry.get(config.embedding.name)):
            raise ConfigError(
                f"embedding.name: {config.embedding.name} cannot be checkpointed yet "
                "(its storage does not implement checkpoint_state())"
            )

    def run(self, ctx: RunContext) -> TaskOutput:
        options: CheckpointOptions = ctx.config.task.typed_options()
        train_cfg = ctx.config.train.model_copy(update={"checkpoint": "final"})
        identity = {
            "config_hash": ctx.config.config_hash(),
            "data_fingerprint": ctx.data.fingerprint,
        }
        policies = kinds(options)
        workdir = Path(tempfile.mkdtemp(prefix="recsuite-checkpoint-"))
        try:
            writers = {
                name: Checkpointer(
                    workdir / name, identity, CheckpointEvery(steps=options.interval_steps), policy
                )
                for name, policy in policies.items()
            }
            model = ctx.build_model()
            outcome = train(
                model,
                ctx.data,
                train_cfg,
                ctx.config.seed,
                ctx.device,
                on_train_metrics=ctx.log_metrics,
                on_validation=ctx.on_validation,
                checkpoints=list(writers.values()),
            )
            for writer in writers.values():
                writer.close()
            test = self._test_auc(ctx, model)
            bounds = {
                bits: quantization_bound(model.embedding, bits)
                for bits in sorted({*options.bits, *options.combined_bits}, reverse=True)
            }
            written = {name: writer.written for name, writer in writers.items()}
            if not written["full"]:
                raise ValueError("no checkpoint was written: interval_steps exceeds the run")
            target = options.restore_at * outcome.steps
            restore_seq = min(written["full"], key=lambda c: abs(c.step - target)).seq
            restores = {
                name: self._restore_and_finish(
                    ctx, train_cfg, workdir / name, identity, restore_seq
                )
                for name in policies
            }
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return self._report(ctx, options, outcome, test, written, restores, bounds)

    @staticmethod
    def _test_auc(ctx: RunContext, model) -> float:
        cfg = ctx.config.train
        return evaluate(model, ctx.data.split("test"), cfg.eval_batch_size, ctx.device)["auc"]

    def _restore_and_finish(
        self,
        ctx: RunContext,
        train_cfg,
        root: Path,
        identity: dict[str, str],
        seq: int,
    ) -> dict[str, float]:
        """A fresh model restored from checkpoint ``seq`` of ``root``, trained to the end."""
        model = ctx.build_model()
        with Checkpointer(root, identity, resume=seq) as restorer:
            train(model, ctx.data, train_cfg, ctx.config.seed, ctx.device, checkpoints=restorer)
        assert restorer.restore_seconds is not None
        return {
            "test_auc": self._test_auc(ctx, model),
            "restore_seconds": restorer.restore_seconds,
            "restored_step": float(restorer.restored_step),
        }

    def _report(
        self,
        ctx: RunContext,
        options: CheckpointOptions,
        outcome,
        test_auc: float,
        written: dict[str, list[CheckpointInfo]],
        restores: dict[str, dict[str, float]],
        bounds: dict[int, dict[str, float]],
    ) -> TaskOutput:
        metrics: dict[str, float] = {
            "test_auc": test_auc,
            "train_seconds": outcome.seconds,
            "checkpoint_seconds": outcome.checkpoint_seconds,
        }
        full = _full_figures(written["full"])
        per_checkpoint: list[dict[str, Any]] = []
        for name, infos in written.items():
            metrics |= _kind_metrics(name, infos, full, test_auc, restores[name])
            per_checkpoint += _checkpoint_rows(name, infos)
        metrics |= _run_metrics(options, outcome, written, bounds, metrics)
        details: dict[str, Any] = {
            "interval_steps": options.interval_steps,
            "steps": outcome.steps,
            "restored_from_step": {k: v["restored_step"] for k, v in restores.items()},
            "checkpoints": per_checkpoint,
            "checkpoint_rule": "final",
            "quantization_bound": {
                f"{bits}-bit": {**bound, "explained": explain_bound(bits, bound)}
                for bits, bound in bounds.items()
            },
        }
        if options.plot:
            name = f"{ctx.config.dataset.name}-{ctx.config.config_hash()}"
            details["plots"] = [
                str(p) for p in draw_plots(per_checkpoint, metrics, list(written), PLOT_DIR / name)
            ]
        return TaskOutput(metrics, details=details)


def _full_figures(infos: list[CheckpointInfo]) -> dict[str, int]:
    """The full checkpoints' totals and capacities, the baseline of every reduction."""
    return {
        "total": sum(c.bytes for c in infos),
        "emb_total": sum(c.embedding_bytes for c in infos),
        "capacity": max(c.bytes for c in infos),
        "emb_capacity": max(c.embedding_bytes for c in infos),
        "weight_total": sum(c.weight_bytes for c in infos),
    }


def _kind_metrics(
    name: str,
    infos: list[CheckpointInfo],
    full: dict[str, int],
    test_auc: float,
    restored: dict[str, float],
) -> dict[str, float]:
    """One kind's ``<name>_*`` metrics: bytes, write time and bandwidth, reductions
    against ``full`` (:func:`_full_figures`), restore time and the restored run's AUC."""
    total = sum(c.bytes for c in infos)
    emb_total = sum(c.embedding_bytes for c in infos)
    weight_total = sum(c.weight_bytes for c in infos)
    seconds = sum(c.seconds for c in infos)
    capacity, emb_capacity = _capacity(infos)
    figures = {
        f"{name}_checkpoints": len(infos),
        f"{name}_bytes_per_checkpoint": total / len(infos),
        f"{name}_bytes_total": total,
        f"{name}_embedding_bytes_per_checkpoint": emb_total / len(infos),
        f"{name}_weight_bytes_per_checkpoint": weight_total / len(infos),
        f"{name}_write_seconds": seconds / len(infos),
        f"{name}_write_mb_per_s": total / seconds / 1e6 if seconds else float("nan"),
        f"{name}_bandwidth_reduction": full["total"] / total,
        f"{name}_capacity_reduction": full["capacity"] / capacity,
        f"{name}_embedding_bandwidth_reduction": full["emb_total"] / emb_total,
        f"{name}_embedding_capacity_reduction": full["emb_capacity"] / emb_capacity,
        f"{name}_weight_bandwidth_reduction": (
            full["weight_total"] / weight_total if weight_total else float("nan")
        ),
        f"{name}_restore_seconds": restored["restore_seconds"],
        f"{name}_restored_test_auc": restored["test_auc"],
        f"{name}_auc_cost": test_auc - restored["test_auc"],
    }
    return {key: float(value) for key, value in figures.items()}


def _checkpoint_rows(name: str, infos: list[CheckpointInfo]) -> list[dict[str, Any]]:
    """One row per checkpoint of kind ``name``, for the details and the bytes plot."""
    return [
        {
            "kind": name,
            "seq": c.seq,
            "type": c.kind,
            "bits": c.bits,
            "step": c.step,
            "bytes": c.bytes,
            "embedding_bytes": c.embedding_bytes,
            "weight_bytes": c.weight_bytes,
            "seconds": c.seconds,
            "rows_fraction": c.rows_fraction,
        }
        for c in infos
    ]


def _run_metrics(
    options: CheckpointOptions,
    outcome,
    written: dict[str, list[CheckpointInfo]],
    bounds: dict[int, dict[str, float]],
    kind_metrics: dict[str, float],
) -> dict[str, float]:
    """The run's metrics beside the kinds': rows modified per interval, the checkpoints'
    share of training time, the arithmetic bounds per bit width and the adaptive bit width
    per expected number of restores (from ``kind_metrics``' AUC costs)."""
    metrics: dict[str, float] = {}
    fractions = [c.rows_fraction for c in written["incremental"][1:]]
    metrics["modified_rows_fraction"] = float(np.mean(fractions)) if fractions else float("nan")
    metrics["checkpoint_overhead"] = outcome.checkpoint_seconds / outcome.seconds
    for bits, bound in bounds.items():
        metrics[f"{bits}-bit_embedding_reduction_bound"] = bound["embedding_bound"]
        metrics[f"{bits}-bit_weight_reduction_bound"] = bound["weight_bound"]
    cost = {bits: kind_metrics[f"{bits}-bit_auc_cost"] for bits in options.bits}
    for restores_expected in options.expected_restores:
        key = f"adaptive_bits_r{restores_expected:g}"
        metrics[key] = float(adaptive_bits(restores_expected, cost, options.auc_tolerance))
    return metrics


def explain_bound(bits: int, bound: dict[str, float], target: float = 6.0) -> str:
    """One sentence: the per-row arithmetic of a ``bits``-bit checkpoint of the embedding
    and the smallest dim at which it reaches ``target`` x."""
    if not np.isfinite(bound["dim"]):
        return f"{bits}-bit: the method has no row-indexed weights to quantize"
    dim, other = bound["dim"], bound["other_bytes_per_row"]
    codes = quantized_row_bytes(round(dim), bits) - 4

    def needs(extra: float) -> int:
        return next(
            d
            for d in range(1, 1 << 16)
            if (4 * d + extra) / (quantized_row_bytes(d, bits) + extra) >= target
        )

    reach = (
        f"no dim reaches {target:g}x (the limit is 32 / {bits} = {32 / bits:g}x)"
        if 32 / bits <= target
        else f"{target:g}x needs dim >= {needs(other)} (>= {needs(0.0)} for the weights alone)"
    )
    return (
        f"{bits}-bit at dim {dim:g}: per row {4 * dim:g} B of float32 weights + {other:.3g} B "
        f"kept exact (row-wise optimizer state, index maps) -> {codes} B of codes + 4 B "
        f"float16 scale and minimum + {other:.3g} B: at most {bound['embedding_bound']:.3g}x "
        f"smaller embedding bytes ({bound['weight_bound']:.3g}x of the weights alone); {reach}"
    )


def _capacity(infos: list[CheckpointInfo]) -> tuple[int, int]:
    """The largest storage a restore needed along the run: the chain from the last full
    checkpoint to each checkpoint (bytes, embedding bytes)."""
    best = best_emb = chain = chain_emb = 0
    for info in infos:
        if info.kind == "full":
            chain, chain_emb = info.bytes, info.embedding_bytes
        else:
            chain, chain_emb = chain + info.bytes, chain_emb + info.embedding_bytes
        best, best_emb = max(best, chain), max(best_emb, chain_emb)
    return best, best_emb


def bytes_figure(per_checkpoint: list[dict[str, Any]], names: list[str]) -> Any:
    """Bytes written per checkpoint over training, one line per kind, in MiB (the unit of
    every memory figure the suite draws, :data:`suite.figures.MIB`)."""
    import pandas as pd
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from suite.figures import MIB, palette

    frame = pd.DataFrame(per_checkpoint)
    frame["MiB"] = frame["bytes"] / MIB
    fig = Figure(figsize=(7, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    sns.lineplot(
        data=frame, x="step", y="MiB", hue="kind", palette=palette(names), marker="o", ax=ax
    )
    ax.set_xlabel("training step")
    ax.set_ylabel("bytes written per checkpoint (MiB)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def draw_plots(
    per_checkpoint: list[dict[str, Any]], metrics: dict[str, float], names: list[str], base: Path
) -> list[Path]:
    """Bytes per checkpoint over training, per kind; AUC cost against bytes saved."""
    import pandas as pd
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from suite.figures import palette, save_figure

    colours = palette(names)
    written = save_figure(
        bytes_figure(per_checkpoint, names), base.with_name(base.name + "-bytes")
    )[:1]

    points = pd.DataFrame(
        {
            "kind": names,
            "reduction": [metrics[f"{n}_bandwidth_reduction"] for n in names],
            "auc_cost": [metrics[f"{n}_auc_cost"] for n in names],
        }
    )
    fig = Figure(figsize=(6, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    sns.scatterplot(
        data=points, x="reduction", y="auc_cost", hue="kind", palette=colours, s=60, ax=ax
    )
    ax.axhline(0.001, ls="--", lw=1, color="#949494", label="0.001 AUC")
    ax.set_xlabel("write bandwidth reduction against full checkpoints (x)")
    ax.set_ylabel("AUC cost of restoring (uninterrupted - restored)")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    written += save_figure(fig, base.with_name(base.name + "-auc-cost"))[:1]
    return written
