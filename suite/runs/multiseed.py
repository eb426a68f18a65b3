"""One config over several seeds: a parent MLflow run, a child run per seed, mean and std.

Each seed goes down the one run path (:func:`suite.runs.single.execute`) with
``seed`` overridden and the parent's run id, so each child is an ordinary run (its own
result JSON, its parent-run tag). The parent carries ``suite.multiseed=true``,
the seed-free config hash, the data fingerprint, the params without ``seed``, the metrics
``<metric>_mean`` and ``<metric>_std`` over seeds, and the aggregate as ``multiseed.json``.

The std is the sample standard deviation (``ddof=1``: the seeds are a sample of the
seeds one could have run); with a single seed it is undefined and left out (``None``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from suite.config import RunConfig, stable_hash
from suite.data.prepared import PreparedDataset
from suite.environment import environment
from suite.errors import ConfigError
from suite.fileio import write_text_atomic
from suite.results import (
    OUT_OPTION,
    RESULT_SCHEMA_VERSION,
    RESULTS_OPTION,
    TaskResult,
    now_iso,
)
from suite.runs.names import parent_run_name, seed_run_name
from suite.runs.record import RunRecord, run_tags
from suite.runs.signals import interruptible
from suite.runs.single import FINGERPRINT_CHARS, execute, preflight
from suite.tracking import flatten

STD_DDOF = 1
MAX_REPEATS = 10_000


class MultiSeedResult(BaseModel):
    """The per-seed results of one config and their mean and sample std (ddof=1)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = RESULT_SCHEMA_VERSION
    kind: str = "multiseed"
    task: str
    model: str
    embedding: str
    dataset: str
    protocol: str | None
    seeds: list[int]
    config: dict[str, Any]
    config_hash: str
    """Hash of the config's identity without ``seed``."""
    data_fingerprint: str
    checkpoint: dict[str, Any]
    """The checkpoint rule (``final`` or ``best`` on validation) and each seed's step."""
    mean: dict[str, float]
    std: dict[str, float | None]
    std_ddof: int = STD_DDOF
    higher_is_better: dict[str, bool]
    per_seed: list[TaskResult]
    mlflow_run_id: str | None = None
    mlflow_tracking_uri: str | None = None
    created: str = ""
    duration_s: float = 0.0

    def write(self, path: str | Path, option: str | None = None) -> Path:
        """Write atomically; a full disk is one line naming ``path`` and ``option``."""
        return write_text_atomic(path, self.model_dump_json(indent=2), option)

    @classmethod
    def read(cls, path: str | Path) -> MultiSeedResult:
        return cls.model_validate_json(Path(path).read_text())


def seedless_identity(config: RunConfig) -> dict[str, Any]:
    data = config.identity()
    data.pop("seed", None)
    return data


def seedless_hash(config: RunConfig) -> str:
    """Stable hash of the config's identity without ``seed``: shared by all its seeds."""
    return stable_hash(seedless_identity(config))


def seeds_from(
    seeds: list[int] | None = None, repeats: int | None = None, offset: int = 0
) -> list[int]:
    """Explicit ``seeds``, or ``offset, offset+1, ..., offset+repeats-1``."""
    if seeds is not None and repeats is not None:
        raise ConfigError("give --seeds or --repeats, not both")
    if seeds is not None:
        if not seeds or len(set(seeds)) != len(seeds):
            raise ConfigError(f"--seeds must be distinct integers, got {seeds}")
        return list(seeds)
    if repeats is None or repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {repeats}")
    if repeats > MAX_REPEATS:
        raise ConfigError(f"--repeats must be <= {MAX_REPEATS}, got {repeats}")
    return [offset + i for i in range(repeats)]


def parse_seeds(text: str) -> list[int]:
    """``"1,2,3"`` -> ``[1, 2, 3]``."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--seeds expects comma-separated integers, got {text!r}") from None


def aggregate(results: list[TaskResult]) -> tuple[dict[str, float], dict[str, float | None]]:
    """Mean and sample std (ddof=1) of each metric every result has."""
    names = [n for n in results[0].metrics if all(n in r.metrics for r in results)]
    mean: dict[str, float] = {}
    std: dict[str, float | None] = {}
    for name in names:
        values = np.asarray([r.metrics[name] for r in results], dtype=np.float64)
        mean[name] = float(values.mean())
        std[name] = float(values.std(ddof=STD_DDOF)) if len(values) > STD_DDOF else None
    return mean, std


def multiseed_path(config: RunConfig, seeds: list[int], fingerprint: str) -> Path:
    """Default place of the aggregate JSON under ``tracking.results_dir``: named by the
    seedless config hash, the data fingerprint and the seeds."""
    tag = "-".join(str(s) for s in seeds) if len(seeds) <= 8 else f"{seeds[0]}-n{len(seeds)}"
    name = (
        f"{config.model.name}-{config.embedding.name}-{seedless_hash(config)}"
        f"-data{fingerprint[:FINGERPRINT_CHARS]}-seeds{tag}.json"
    )
    return (
        Path(config.tracking.results_dir)
        / config.task.name
        / config.dataset.name
        / "multiseed"
        / name
    )


def execute_seeds(
    config: RunConfig, seeds: list[int], out: str | Path | None = None
) -> MultiSeedResult:
    """Run ``config`` once per seed under one parent MLflow run; aggregate and record.

    A failing seed marks the parent run FAILED and re-raises; SIGINT/SIGTERM end the
    running child and the parent KILLED.
    """
    if not seeds:
        raise ConfigError("no seeds to run")
    for seed in seeds:  # every seed is checked before the first one trains
        config.with_overrides({"seed": seed})
    started = time.perf_counter()
    _, data, _ = preflight(config, {"--out": out})
    with interruptible():
        parent = _parent_record(config, seeds, data)
        with parent:  # ends the parent run FINISHED, FAILED or KILLED
            params = flatten(seedless_identity(config))
            params["seeds"] = ",".join(str(s) for s in seeds)
            parent.log_setup(params, config, data)
            results = [_execute_seed(config, seed, parent) for seed in seeds]
            result = _aggregate_result(config, seeds, data, results, parent, started)
            result.write(multiseed_path(config, seeds, data.fingerprint), RESULTS_OPTION)
            if out:
                result.write(out, OUT_OPTION)
            figures = {f"{k}_mean": v for k, v in result.mean.items()}
            figures |= {
                f"{k}_std": v for k, v in result.std.items() if v is not None and math.isfinite(v)
            }
            parent.log_metrics(figures)
            parent.set_tags({"suite.checkpoint": config.train.checkpoint})
            parent.log_text(result.model_dump_json(indent=2), "multiseed.json")
        return result


def _parent_record(config: RunConfig, seeds: list[int], data: PreparedDataset) -> RunRecord:
    """The parent run (off with tracking off): tagged as one run of the seedless config,
    its failure told by the failing seed's own run."""
    if not config.tracking.enabled:
        return RunRecord.off()
    group_hash = seedless_hash(config)
    tags = {
        **run_tags(config, data.fingerprint, environment(config.device)),
        "suite.config_hash": group_hash,
        "suite.seed": ",".join(str(s) for s in seeds),
        "suite.multiseed": "true",
        "suite.seeds": ",".join(str(s) for s in seeds),
    }
    name = parent_run_name(config, group_hash, seeds)
    return RunRecord.start(config, name, tags, what="multi-seed run", error_tag=False)


def _execute_seed(config: RunConfig, seed: int, parent: RunRecord) -> TaskResult:
    """One seed down the one run path, as a child of the parent run."""
    group_hash = seedless_hash(config)
    child = config.with_overrides(
        {"seed": seed, "tracking.run_name": seed_run_name(config, group_hash, seed)}
    )
    return execute(
        child,
        parent_run_id=parent.run_id,
        extra_tags={"suite.seedless_config_hash": group_hash},
    )


def _aggregate_result(
    config: RunConfig,
    seeds: list[int],
    data: PreparedDataset,
    results: list[TaskResult],
    parent: RunRecord,
    started: float,
) -> MultiSeedResult:
    """The seeds' results, their mean and std, and each seed's checkpoint."""
    mean, std = aggregate(results)
    higher = {k: v for k, v in results[0].higher_is_better.items() if k in mean}
    checkpoint = {
        "rule": config.train.checkpoint,
        "per_seed": [
            {
                "seed": r.seed,
                "checkpoint": r.details.get("checkpoint"),
                "step": r.details.get("checkpoint_step"),
            }
            for r in results
        ],
    }
    return MultiSeedResult(
        task=config.task.name,
        model=config.model.name,
        embedding=config.embedding.name,
        dataset=config.dataset.name,
        protocol=config.dataset.protocol,
        seeds=list(seeds),
        config=seedless_identity(config),
        config_hash=seedless_hash(config),
        data_fingerprint=data.fingerprint,
        checkpoint=checkpoint,
        mean=mean,
        std=std,
        higher_is_better=higher,
        per_seed=results,
        mlflow_run_id=parent.run_id,
        mlflow_tracking_uri=parent.uri,
        created=now_iso(),
        duration_s=round(time.perf_counter() - started, 3),
    )
