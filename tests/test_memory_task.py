"""The ``memory`` task on every backbone x embedding method; analytic bytes vs real tensors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from suite.cli import main
from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.engine.build import build_model
from suite.engine.train import make_dense_optimizer, train_step
from suite.registry import EMBEDDINGS, MODELS
from suite.runs.single import execute
from suite.tasks.memory import optimizer_state_tensors, peak_memory, tensor_bytes
from tests.conftest import TINY_DATA, tiny_config, tracking_uri


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One prepared tiny dataset for the whole module."""
    return str(tmp_path_factory.mktemp("memory-cache"))


def _flags(cache: str) -> list[str]:
    sets = [f"dataset.options.{k}={v}" for k, v in TINY_DATA.items()]
    sets += [
        "train.threads=1",
        f"dataset.cache_dir={cache}",
        "train.batch_size=128",
        "train.eval_batch_size=512",
    ]
    return [arg for s in sets for arg in ("--set", s)] + ["--quiet", "--no-tracking"]


FAST_FIITED = ["embedding.options.prune_every=8", "embedding.options.warmup_steps=32"]
FAST_FIITED_FLAGS = [arg for s in FAST_FIITED for arg in ("--set", s)]


def _has_backend(embedding: str) -> bool:
    options = getattr(EMBEDDINGS.get(embedding), "Options", None)
    return options is not None and "backend" in options.model_fields


@pytest.mark.parametrize("embedding", EMBEDDINGS.names())
@pytest.mark.parametrize("model", MODELS.names())
def test_memory_runs_for_every_model_and_embedding(
    tmp_path: Path, shared_cache: str, model: str, embedding: str
) -> None:
    out = tmp_path / "memory.json"
    argv = [
        "run",
        "--task",
        "memory",
        "--model",
        model,
        "--embedding",
        embedding,
        "--dataset",
        "criteo-synth",
        "--out",
        str(out),
        *_flags(shared_cache),
        *(FAST_FIITED_FLAGS if embedding == "fiited" else []),
    ]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    m, details = result["metrics"], result["details"]
    assert details["embedding"]["matches"], details["embedding"]
    assert m["analytic_mismatch_bytes"] == 0
    assert m["embedding_bytes"] == m["embedding_parameter_bytes"] + m["embedding_auxiliary_bytes"]
    assert m["embedding_bytes"] > 0 and m["dense_parameter_bytes"] > 0
    assert m["dense_optimizer_bytes"] > 0  # Adam state exists after the first step
    assert m["total_state_bytes"] == (
        m["embedding_bytes"]
        + m["sparse_optimizer_bytes"]
        + m["dense_parameter_bytes"]
        + m["dense_optimizer_bytes"]
    )
    for step in ("train_step", "inference_step"):
        assert m[f"{step}_peak_bytes"] >= m[f"{step}_extra_bytes"] >= 0
        assert m[f"{step}_peak_bytes"] > 0
    assert m["compression_ratio"] == pytest.approx(m["full_embedding_bytes"] / m["embedding_bytes"])
    if embedding == "full":
        assert m["compression_ratio"] == 1.0
    assert m["embedding_index_bytes"] + m["embedding_utility_bytes"] == pytest.approx(
        m["embedding_auxiliary_bytes"], abs=64
    )
    assert m["embedding_total_bytes"] == m["embedding_bytes"] + m["sparse_optimizer_bytes"]
    assert details["batch_sizes"] == {"train": 128, "inference": 512}


@pytest.mark.parametrize("backend", ["fbgemm", "torch"])
@pytest.mark.parametrize("embedding", EMBEDDINGS.names())
def test_analytic_bytes_equal_real_tensors(embedding: str, backend: str) -> None:
    """``memory()`` equals the summed nbytes of ``storage_tensors()`` (optimizer state
    included: the embedding owns its sparse optimizer), and the task reports it."""
    overrides = []
    if backend != "fbgemm":
        if not _has_backend(embedding):
            pytest.skip(f"{embedding} has no backend option")
        overrides.append(f"embedding.options.backend={backend}")
    overrides.append("task.options.compress=false")  # compare with the model as built
    config = tiny_config(embedding=embedding, task="memory", overrides=overrides)
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
    batch = next(iter(BatchLoader(data.split("train"), 64)))
    train_step(model, batch, dense_opt, 1)

    analytic = model.embedding.memory()
    storage = model.embedding.storage_tensors()
    assert analytic.parameters == sum(t.nbytes for t in storage["parameters"])
    assert analytic.auxiliary == sum(t.nbytes for t in storage.get("auxiliary", []))
    assert analytic.optimizer == sum(t.nbytes for t in storage["optimizer"])

    result = execute(config)
    assert result.metrics["embedding_parameter_bytes"] == analytic.parameters
    assert result.metrics["embedding_auxiliary_bytes"] == analytic.auxiliary
    assert result.metrics["sparse_optimizer_bytes"] == analytic.optimizer
    dense = sum(p.nbytes for p in model.dense_parameters())
    assert result.metrics["dense_parameter_bytes"] <= dense
    assert result.metrics["dense_optimizer_bytes"] == tensor_bytes(
        optimizer_state_tensors(dense_opt)
    )


def test_memory_figures_are_the_same_in_json_and_mlflow(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    result = execute(tiny_config(task="memory", tracking=True, overrides=[f"tracking.uri={uri}"]))
    run = MlflowClient(tracking_uri=uri).get_run(result.mlflow_run_id)
    assert set(run.data.metrics) == set(result.metrics)
    for name, value in result.metrics.items():
        assert run.data.metrics[name] == pytest.approx(value)


PEAK_PROBE = """
import json, torch
from suite.tasks.memory import peak_memory
size = 64 << 20
def allocate():
    block = torch.ones(size // 4)  # touched, so resident
    del block
print(json.dumps(peak_memory(allocate, torch.device("cpu"))))
"""


def test_peak_memory_sees_a_transient_allocation() -> None:
    """In a fresh process: one that has run many tests may hold freed pages resident, which
    a new allocation reuses without raising the high-water mark."""
    import json
    import subprocess
    import sys

    size = 64 << 20
    out = subprocess.run(
        [sys.executable, "-c", PEAK_PROBE], capture_output=True, text=True, check=True
    ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["extra"] >= 0.9 * size, figures
    assert figures["peak"] >= figures["extra"]
    assert peak_memory(lambda: None, torch.device("cpu"))["extra"] >= 0


def test_tensor_bytes_counts_a_tensor_once() -> None:
    a = torch.zeros(10)
    assert tensor_bytes([a, a, torch.zeros(3, dtype=torch.float64)]) == 40 + 24


def test_fiited_at_a_tenth_budget_holds_at_most_15_percent_of_full() -> None:
    """The memory task trains FIITED until its schedule has pruned to the 10% parameter
    budget, then counts parameters, index, utilities and optimizer state: together at
    most 15% of ``full``'s (parameters + optimizer state)."""
    overrides = ["embedding.options.budget=0.1", *FAST_FIITED]
    result = execute(tiny_config(embedding="fiited", task="memory", overrides=overrides))
    m, details = result.metrics, result.details
    assert details["compression_steps"] == 32
    assert details["embedding"]["matches"]
    # parameters at the budget (10% of full's), plus what the store keeps beside them
    assert m["embedding_parameter_bytes"] == pytest.approx(
        0.1 * m["full_embedding_bytes"], rel=0.01
    )
    assert m["embedding_index_bytes"] > 0 and m["embedding_utility_bytes"] > 0
    assert m["embedding_total_bytes"] == (
        m["embedding_parameter_bytes"]
        + m["embedding_index_bytes"]
        + m["embedding_utility_bytes"]
        + m["sparse_optimizer_bytes"]
    )
    assert m["embedding_total_fraction_of_full"] <= 0.15, m
