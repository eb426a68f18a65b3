"""The ``throughput`` task on every backbone x embedding method, and its timing pieces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

import suite.engine.train as train_module
from suite.cli import main
from suite.data.source import get_prepared
from suite.errors import ConfigError
from suite.registry import EMBEDDINGS, MODELS
from suite.runs.single import execute
from suite.tasks.throughput import Window, timed_window
from tests.conftest import TINY_DATA, tiny_config, tracking_uri

SIZES = [32, 256]
WINDOW = ["task.options.warmup_steps=1", "task.options.measure_steps=2"]


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One prepared tiny dataset for the whole module."""
    return str(tmp_path_factory.mktemp("throughput-cache"))


def _flags(cache: str) -> list[str]:
    sets = [f"dataset.options.{k}={v}" for k, v in TINY_DATA.items()]
    sets += ["train.threads=1", f"dataset.cache_dir={cache}", f"task.options.batch_sizes={SIZES}"]
    sets += WINDOW
    return [arg for s in sets for arg in ("--set", s)] + ["--quiet", "--no-tracking"]


@pytest.mark.parametrize("embedding", EMBEDDINGS.names())
@pytest.mark.parametrize("model", MODELS.names())
def test_throughput_runs_for_every_model_and_embedding(
    tmp_path: Path, shared_cache: str, model: str, embedding: str
) -> None:
    out = tmp_path / "throughput.json"
    argv = [
        "run",
        "--task",
        "throughput",
        "--model",
        model,
        "--embedding",
        embedding,
        "--dataset",
        "criteo-synth",
        "--out",
        str(out),
        *_flags(shared_cache),
    ]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    metrics = result["metrics"]
    for size in SIZES:
        for name in ("train_samples_per_s", "infer_samples_per_s", "loader_samples_per_s"):
            value = metrics[f"{name}_b{size}"]
            assert math.isfinite(value) and value > 0
            assert result["higher_is_better"][f"{name}_b{size}"] is True
        p50, p95, p99 = (metrics[f"infer_latency_ms_p{q}_b{size}"] for q in (50, 95, 99))
        assert 0 < p50 <= p95 <= p99
        assert result["higher_is_better"][f"infer_latency_ms_p99_b{size}"] is False
        per = result["details"]["per_batch_size"][str(size)]
        assert per["train"]["steps"] == 2 and per["inference"]["steps"] == 2
        assert math.isfinite(per["train"]["last_loss"])
    assert result["details"]["threads"] == 1
    assert result["details"]["device"] == "cpu"


def test_throughput_figures_are_the_same_in_json_and_mlflow(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    config = tiny_config(
        task="throughput",
        tracking=True,
        overrides=[
            f"tracking.uri={uri}",
            "task.options.batch_sizes=[64]",
            *WINDOW,
        ],
    )
    result = execute(config)
    run = MlflowClient(tracking_uri=uri).get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert set(run.data.metrics) == set(result.metrics)
    for name, value in result.metrics.items():
        assert run.data.metrics[name] == pytest.approx(value)


def test_measure_seconds_window(tmp_path: Path) -> None:
    config = tiny_config(
        task="throughput",
        overrides=[
            "task.options.batch_sizes=[128]",
            "task.options.warmup_steps=0",
            "task.options.measure_steps=null",
            "task.options.measure_seconds=0.05",
        ],
    )
    result = execute(config, out=tmp_path / "r.json")
    train = result.details["per_batch_size"]["128"]["train"]
    assert train["seconds"] >= 0.05 and train["steps"] >= 1
    assert result.details["window"] == {"seconds": 0.05}


def test_options_need_a_window() -> None:
    with pytest.raises(ConfigError, match="measure_steps"):
        tiny_config(
            task="throughput",
            overrides=[
                "task.options.measure_steps=null",
                "task.options.measure_seconds=null",
            ],
        )
    with pytest.raises(ConfigError, match="batch_sizes"):
        tiny_config(task="throughput", overrides=["task.options.batch_sizes=[0]"])


def test_timed_window_counts_steps_after_warmup() -> None:
    calls: list[int] = []

    def step() -> int:
        calls.append(1)
        return 10

    window = timed_window(step, torch.device("cpu"), warmup_steps=3, measure_steps=4)
    assert len(calls) == 7
    assert window == Window(4, 40, window.seconds, window.cpu_seconds)
    assert window.cpu_seconds >= 0
    assert window.samples_per_second == pytest.approx(40 / window.seconds)
    assert window.mean_batch == 10


def test_train_uses_the_shared_train_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """``train()`` runs every step through ``train_step``: one training step, two users."""
    calls = []
    real = train_module.train_step

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "train_step", counting)
    config = tiny_config(overrides=["train.max_steps=5"])
    data = get_prepared(config.dataset, progress=False)
    from suite.engine.build import build_model

    model = build_model(config, data)
    outcome = train_module.train(model, data, config.train, config.seed, torch.device("cpu"))
    assert outcome.steps == 5 and len(calls) == 5
