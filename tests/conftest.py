"""Shared fixtures: an isolated cache and MLflow store per test, tiny synthetic configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from suite.config import RunConfig, build_config
from suite.results import TaskResult

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# Small enough that a full train + eval takes a second or two on 2 cores.
TINY_DATA = {
    "train_rows": 4000,
    "val_rows": 1000,
    "test_rows": 1000,
    "vocab_scale": 0.0002,
    "keep_below": 200,
}


# The checkpoint task at its smallest: 24 steps, a checkpoint every 6, one 4-bit kind.
SHORT_CHECKPOINT_TASK = [
    "train.max_steps=24",
    "task.options.interval_steps=6",
    "task.options.bits=[4]",
    "task.options.combined_bits=[4]",
]


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own prepared-data cache, MLflow store and working directory."""
    monkeypatch.setenv("RECSUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    return tmp_path


def tiny_config(
    dataset: str = "criteo-synth",
    model: str = "dlrm",
    embedding: str = "full",
    task: str = "accuracy",
    tracking: bool = False,
    overrides: list[str] | None = None,
) -> RunConfig:
    """A config on a tiny synthetic dataset, one epoch, no progress bars."""
    data_overrides = [f"dataset.options.{k}={v}" for k, v in TINY_DATA.items()]
    return build_config(
        components={"model": model, "embedding": embedding, "dataset": dataset, "task": task},
        values={
            "train.batch_size": 128,
            "train.progress": False,
            "tracking.enabled": tracking,
            "train.threads": 1,
        },
        overrides=data_overrides + (overrides or []),
    )


def tracking_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"


def accuracy_result(seed: int = 0, auc: float = 0.7, **fields: object) -> TaskResult:
    """A hand-made accuracy ``TaskResult`` (test AUC and log loss) for tests of what reads
    results; ``fields`` replace any of its attributes."""
    base: dict[str, object] = {
        "task": "accuracy",
        "model": "dlrm",
        "embedding": "full",
        "dataset": "criteo-synth",
        "protocol": "default",
        "seed": seed,
        "config": {"seed": seed},
        "config_hash": f"h{seed}",
        "data_fingerprint": "f",
        "metrics": {"test_auc": auc, "test_logloss": 1 - auc},
        "higher_is_better": {"test_auc": True, "test_logloss": False},
    }
    return TaskResult(**{**base, **fields})


def restored_at_step_12(
    tmp_path: Path, config: RunConfig, incremental: bool = False, dense: bool = False
) -> tuple:
    """``(reference, restored)``: a model trained 12 steps, and a fresh model restored from
    the step-12 checkpoint of ``config``'s run (``train.max_steps=14``, a checkpoint every 6
    steps; ``dense``: with its dense optimizer too), for checkpoint round-trip tests."""
    from suite.data.source import get_prepared
    from suite.engine.build import build_model
    from suite.engine.checkpoint import Checkpointer, CheckpointEvery, CheckpointPolicy
    from suite.engine.train import make_dense_optimizer, train

    cpu = torch.device("cpu")
    data = get_prepared(config.dataset, progress=False)
    identity = {"config_hash": config.config_hash(), "data_fingerprint": data.fingerprint}
    policy = CheckpointPolicy(incremental=incremental, restore_budget=5.0)
    with Checkpointer(tmp_path / "c", identity, CheckpointEvery(steps=6), policy) as c:
        train(build_model(config, data), data, config.train, config.seed, cpu, checkpoints=c)
    reference = build_model(config, data)
    train(reference, data, config.train.model_copy(update={"max_steps": 12}), config.seed, cpu)
    restored = build_model(config, data)
    optimizer = make_dense_optimizer(restored.dense_parameters(), config.train) if dense else None
    with Checkpointer(tmp_path / "c", identity, resume=True) as c:
        loop = c.restore(restored, optimizer)
    assert loop is not None and loop.step == 12
    return reference, restored
