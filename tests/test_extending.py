"""The README's Extending section runs as written: each example is one file that defines
and registers a new backbone, embedding method, dataset or task, and the new entry then
works with the rest of the suite (every method feeds the backbone, the method gives
``[B, F, D]`` and trains, the dataset prepares and trains, the task returns its metrics).

Each example is imported as a module of its own from a temporary folder, as the file it
says to save; what it registers is removed again after the test, so no other test sees it.
"""

from __future__ import annotations

import copy
import importlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from suite.api import resolve, run
from suite.cli import main
from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.embeddings.base import ComposedEmbedding
from suite.engine.build import build_model
from suite.engine.train import make_dense_optimizer, train_step
from suite.registry import ALL_REGISTRIES, DATASETS, EMBEDDINGS, MODELS, TASKS
from tests.conftest import TINY_DATA, tiny_config

ROOT = Path(__file__).resolve().parents[1]
TINY_RUN = {
    **{f"dataset.options.{k}": v for k, v in TINY_DATA.items()},
    "train.max_steps": 10,
    "train.batch_size": 128,
    "train.progress": False,
    "train.threads": 1,
}


def extending_examples() -> dict[str, str]:
    """Heading -> the one ``python`` block under each ``###`` heading of "## Extending"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"\n## Extending\n(.*?)(?=\n## |\Z)", text, re.DOTALL)
    assert found, "README.md lost its Extending section"
    examples = {}
    for part in found.group(1).split("\n### ")[1:]:
        heading, body = part.split("\n", 1)
        blocks = re.findall(r"```python\n(.*?)```", body, re.DOTALL)
        assert len(blocks) == 1, f"{heading}: expected one python block, found {len(blocks)}"
        examples[heading.strip()] = blocks[0]
    return examples


def test_the_section_shows_a_backbone_a_method_a_dataset_and_a_task() -> None:
    assert list(extending_examples()) == [
        "A backbone",
        "An embedding method",
        "A dataset",
        "A task",
    ]


@pytest.fixture
def load_example(tmp_path: Path) -> Iterator[Callable[[str], ModuleType]]:
    """Imports a README example as its own module; afterwards the registries hold exactly
    what they held before (every package discovered first, so none is lost)."""
    saved = {}
    for registry in ALL_REGISTRIES.values():
        registry.names()  # discover the package's own entries before taking the snapshot
        saved[registry] = {k: copy.copy(v) for k, v in vars(registry).items()}
    folder = tmp_path / "examples"
    folder.mkdir()
    sys.path.insert(0, str(folder))
    loaded: list[str] = []

    def load(heading: str) -> ModuleType:
        name = "readme_" + re.sub(r"\W+", "_", heading.lower())
        (folder / f"{name}.py").write_text(extending_examples()[heading], encoding="utf-8")
        loaded.append(name)
        return importlib.import_module(name)

    yield load
    sys.path.remove(str(folder))
    for name in loaded:
        sys.modules.pop(name, None)
    for registry, state in saved.items():
        vars(registry).clear()
        vars(registry).update(state)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory):
    spec = tiny_config().dataset.model_copy(
        update={"cache_dir": str(tmp_path_factory.mktemp("prepared"))}
    )
    return get_prepared(spec, progress=False)


def one_step(config, data) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """Builds ``config``'s model and trains it one step, as the training loop does;
    returns the model, the first batch's embeddings before the step and the loss."""
    model = build_model(config, data)
    batch = next(iter(BatchLoader(data.split("train"), 64)))
    model.eval()
    with torch.no_grad():
        before = model.embedding(batch.sparse).clone()
    model.train()
    loss = train_step(model, batch, make_dense_optimizer(model.dense_parameters(), config.train), 1)
    return model, before, loss


def test_a_new_backbone_trains_with_every_embedding_method(load_example, tiny_data) -> None:
    module = load_example("A backbone")
    assert MODELS.get("mean-mlp") is module.MeanMLP
    for method in EMBEDDINGS.names():
        config = tiny_config(model="mean-mlp", embedding=method)
        model, _, loss = one_step(config, tiny_data)
        assert torch.isfinite(loss), method
        for p in model.backbone.parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), method
    result = run({"model": {"name": "mean-mlp", "options": {"hidden": 32}}}, TINY_RUN)
    assert result.model == "mean-mlp" and result.config["model"]["options"]["hidden"] == 32
    assert 0.0 < result.metrics["test_auc"] < 1.0


def test_a_new_embedding_method_gives_b_f_d_and_trains(load_example, tiny_data) -> None:
    module = load_example("An embedding method")
    assert EMBEDDINGS.get("low-rank") is module.LowRankEmbedding
    schema = tiny_data.schema
    for backbone in MODELS.names():
        for backend in ("fbgemm", "torch"):
            config = tiny_config(
                model=backbone,
                embedding="low-rank",
                overrides=[f"embedding.options.backend={backend}", "embedding.options.rank=8"],
            )
            model, before, loss = one_step(config, tiny_data)
            assert before.shape == (64, schema.num_sparse, 16) and before.dtype == torch.float32
            assert torch.isfinite(loss)
            model.eval()
            batch = next(iter(BatchLoader(tiny_data.split("train"), 64)))
            with torch.no_grad():
                moved = (model.embedding(batch.sparse) - before).abs().amax(dim=2) > 0
            assert moved.float().mean() > 0.9, f"{backbone}/{backend}: the tables did not train"
    emb = model.embedding
    assert isinstance(emb, ComposedEmbedding) and emb.tables.dims == [8] * schema.num_sparse
    projection = emb.combine.linear.weight
    assert any(p is projection for p in model.dense_parameters())
    tensors = emb.storage_tensors()
    assert emb.memory().parameters == sum(t.nbytes for t in tensors["parameters"])
    assert any(t is projection for t in tensors["parameters"])


def test_a_new_dataset_prepares_from_its_raw_file_and_trains(load_example, tmp_path: Path) -> None:
    module = load_example("A dataset")
    assert DATASETS.get("shop-clicks") is module.ShopClicks
    rng = np.random.default_rng(0)
    user, item, site = (
        rng.integers(0, 200, 3000),
        rng.integers(0, 100, 3000),
        rng.integers(0, 5, 3000),
    )
    label = rng.random(3000) < np.where((user + item) % 3 == 0, 0.7, 0.1)
    price = rng.random(3000) * 50
    raw = tmp_path / "shop"
    raw.mkdir()
    rows = zip(label.astype(int), price, user, item, site, strict=True)
    lines = [",".join(module.COLUMNS)] + [f"{y},{p:.2f},u{u},i{i},s{s}" for y, p, u, i, s in rows]
    (raw / "clicks.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")

    assert main(["prepare", "shop-clicks", "--raw", str(raw)]) == 0
    data = get_prepared(resolve({"dataset": {"name": "shop-clicks"}}).dataset, progress=False)
    assert data.schema.dense == ["price"] and data.schema.sparse == ["user", "item", "site"]
    assert [len(data.split(s)) for s in ("train", "val", "test")] == [2400, 300, 300]
    result = run(
        {"dataset": {"name": "shop-clicks"}}, {"train.max_steps": 20, "train.progress": False}
    )
    assert result.dataset == "shop-clicks" and result.protocol == "random-811"
    assert result.data_fingerprint == data.fingerprint and 0.0 < result.metrics["test_auc"] < 1.0


def test_a_new_task_returns_its_declared_metrics(load_example) -> None:
    module = load_example("A task")
    result = run({"task": {"name": "footprint"}, "embedding": {"name": "hash"}}, TINY_RUN)
    assert result.task == "footprint"
    assert set(result.metrics) == {"embedding_bytes", "backbone_params"}
    assert result.metrics["embedding_bytes"] > 0 and result.metrics["backbone_params"] > 0
    assert {spec.name for spec in module.Footprint.metrics} == set(result.metrics)
    assert not any(spec.higher_is_better for spec in module.Footprint.metrics)


def test_the_examples_leave_the_registries_as_they_were() -> None:
    """Runs after the tests above (file order): none of their entries is left behind."""
    assert "mean-mlp" not in MODELS and "low-rank" not in EMBEDDINGS
    assert "shop-clicks" not in DATASETS and "footprint" not in TASKS
    assert not any(name.startswith("readme_") for name in sys.modules)
