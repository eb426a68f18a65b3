"""The GPU check's per-method step: every registered embedding method on the device.

For each method of the registry, on criteo-synth:

1. built from the same config and seed on the device and on CPU, its storage tensors
   (parameters, auxiliary, optimizer) are equal bit for bit (every method draws its init
   from a CPU generator) and ``memory()`` counts the same bytes;
2. its pooled lookups ``[B, F, D]`` and one training step agree with CPU's up to float
   rounding (``STEP_TOLERANCE``). The step uses SGD for the dense part: Adam's first step
   moves every weight by about ``lr x sign(grad)``, so a gradient that rounds to the other
   sign of zero on one device moves a weight by ``2 x lr`` (seen on an H200: DHE's
   network, 1.8e-3 at Adam's 1e-3). A method with stochastic rounding draws from the
   device's generator (its CUDA and CPU codes differ by design), so it is compared with
   round-to-nearest (``stochastic: false``), and the check records that;
3. a checkpoint written on the device restores into a fresh model there bit for bit;
4. the accuracy task at the check's size gives its test AUC and train samples/s, and the
   samples/s as a ratio to ``full``'s in the same process: the method's train step cost
   on that device.

On CPU (the dry run) the same code runs at a tiny size, so it cannot rot where no GPU is.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from suite.errors import ConfigError
from suite.gpu_check.steps import DATA, StepOutcome, _run, kind, run_overrides

STEP_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
"""How far one training step on the device may move a method's storage from CPU's: the
same update in another order of float additions (CUDA's atomics, its GEMM tiling)."""
CHECKPOINT_STEPS = 6
TINY = DATA["cpu"]


def method_backend(name: str) -> str:
    """``fbgemm`` for table-backed methods where it loads, else ``torch`` (both are the
    suite's kernels; the check records which ran)."""
    from suite.embeddings.base import ComposedEmbedding
    from suite.kernel_backend import fbgemm_available
    from suite.registry import EMBEDDINGS

    composed = issubclass(EMBEDDINGS.get(name), ComposedEmbedding)
    return "fbgemm" if composed and fbgemm_available()[0] else "torch"


def rounds_stochastically(name: str) -> bool:
    """Whether method ``name`` has a ``stochastic`` rounding option."""
    from suite.registry import EMBEDDINGS

    options = getattr(EMBEDDINGS.get(name), "Options", None)
    return options is not None and "stochastic" in options.model_fields


def _config(name: str, device: torch.device, results: str, **values: Any):
    from suite.api import resolve

    if rounds_stochastically(name):
        values = {"embedding.options.stochastic": False, **values}
    overrides = run_overrides(device, "accuracy", results)
    overrides |= {f"dataset.options.{k}": v for k, v in TINY.items()}
    overrides |= {
        "embedding.name": name,
        "embedding.options.backend": method_backend(name),
        "train.batch_size": 128,
        "train.checkpoint": "final",
        **values,
    }
    return resolve(None, overrides)


def _storage(method: Any) -> list[torch.Tensor]:
    tensors = method.storage_tensors()
    return [
        t.detach().cpu() for key in ("parameters", "auxiliary", "optimizer") for t in tensors[key]
    ]


def _largest_gap(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    if len(a) != len(b):
        return float("inf")
    gaps = [
        (x.double() - y.double()).abs().max().item() for x, y in zip(a, b, strict=True) if x.numel()
    ]
    return max(gaps, default=0.0)


CODE_FLIPS = 1e-3
"""Share of integer codes (low-precision tables) one step may round to a neighbouring code
on the device: a value that lands within float rounding of a rounding boundary."""


def _close_tensor(x: torch.Tensor, y: torch.Tensor) -> bool:
    if x.shape != y.shape:
        return False
    if x.is_floating_point():
        return torch.allclose(x.double(), y.double(), **STEP_TOLERANCE)
    gap = (x.long() - y.long()).abs()
    return bool((gap <= 1).all()) and (gap > 0).double().mean().item() <= CODE_FLIPS


def _close(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(_close_tensor(x, y) for x, y in zip(a, b, strict=True))


def agreement(name: str, device: torch.device) -> tuple[dict[str, Any], list[str]]:
    """Steps 1-2 of the module docstring for method ``name``: figures and problems."""
    from suite.data.loader import BatchLoader
    from suite.data.source import get_prepared
    from suite.engine.build import build_model
    from suite.engine.train import make_dense_optimizer, train_step

    cpu = torch.device("cpu")
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as results:
        sgd = {"train.dense_optimizer": "sgd", "train.dense_lr": 0.1}
        on_device = _config(name, device, results, **sgd)
        on_cpu = _config(name, cpu, results, **sgd)
    data = get_prepared(on_cpu.dataset, progress=False)
    configs = {"device": on_device, "cpu": on_cpu}
    places = {"device": device, "cpu": cpu}
    models = {where: build_model(config, data) for where, config in configs.items()}
    problems = []
    figures: dict[str, Any] = {"backend": method_backend(name)}
    if not _same(models["device"], models["cpu"]):
        problems.append(f"{name}: initial storage differs between {device.type} and cpu")
    memory = {k: m.embedding.memory() for k, m in models.items()}
    figures["embedding_total_bytes"] = memory["device"].total
    if memory["device"] != memory["cpu"]:
        problems.append(
            f"{name}: memory() {memory['device']} on {device.type}, {memory['cpu']} on cpu"
        )
    batch = next(iter(BatchLoader(data.split("train"), 128)))
    looked_up = {}
    for where, model in models.items():
        model.eval()
        with torch.no_grad():
            looked_up[where] = model.embedding(batch.to(places[where]).sparse).cpu()
        model.train()
    figures["lookup_max_abs_gap"] = (looked_up["device"] - looked_up["cpu"]).abs().max().item()
    if not torch.allclose(looked_up["device"], looked_up["cpu"], **STEP_TOLERANCE):
        problems.append(f"{name}: lookups differ by {figures['lookup_max_abs_gap']:.2e}")
    after = {}
    for where, model in models.items():
        dense_opt = make_dense_optimizer(model.dense_parameters(), configs[where].train)
        loss = train_step(model, batch.to(places[where]), dense_opt, 1)
        if not torch.isfinite(loss):
            problems.append(f"{name}: non-finite loss on {where}")
        after[where] = _storage(model.embedding)
    figures["step_max_abs_gap"] = _largest_gap(after["device"], after["cpu"])
    figures["compared_with_nearest_rounding"] = rounds_stochastically(name)
    if not _close(after["device"], after["cpu"]):
        problems.append(f"{name}: one step differs from cpu's by {figures['step_max_abs_gap']:.2e}")
    return figures, problems


def _same(one: Any, other: Any) -> bool:
    """Whether two models' embedding storage is equal bit for bit."""
    a, b = _storage(one.embedding), _storage(other.embedding)
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def checkpoint_round_trip(name: str, device: torch.device) -> list[str]:
    """Step 3: train ``CHECKPOINT_STEPS`` steps on ``device`` writing a checkpoint at the
    last, restore it into a fresh model there; problems if its storage differs."""
    from suite.data.source import get_prepared
    from suite.engine.build import build_model
    from suite.engine.checkpoint import Checkpointer, CheckpointEvery
    from suite.engine.train import train

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as results:
        config = _config(name, device, results, **{"train.max_steps": CHECKPOINT_STEPS})
        data = get_prepared(config.dataset, progress=False)
        identity = {"config_hash": config.config_hash(), "data_fingerprint": data.fingerprint}
        root = Path(results) / "checkpoints"
        model = build_model(config, data)
        with Checkpointer(root, identity, CheckpointEvery(steps=CHECKPOINT_STEPS)) as c:
            train(model, data, config.train, config.seed, device, checkpoints=c)
        restored = build_model(config, data)
        with Checkpointer(root, identity, resume=True) as c:
            c.restore(restored, None)
    if _same(model, restored):
        return []
    return [f"{name}: checkpoint restored on {device.type} differs from the trained model"]


def methods_step(device: torch.device) -> StepOutcome:
    """Every registered embedding method on ``device`` (see the module docstring)."""
    from suite.registry import EMBEDDINGS

    figures: dict[str, Any] = {}
    problems: list[str] = []
    for name in EMBEDDINGS.names():
        try:
            found, trouble = agreement(name, device)
        except ConfigError as exc:  # a method that needs what this machine lacks says so
            figures[name] = {"refused": str(exc)}
            continue
        trouble += checkpoint_round_trip(name, device)
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as results:
            overrides = run_overrides(device, "accuracy", results)
            overrides |= {"embedding.name": name, "embedding.options.backend": found["backend"]}
            metrics = _run(overrides).metrics
        found["test_auc"] = metrics["test_auc"]
        found["train_samples_per_s"] = metrics["train_samples_per_s"]
        figures[name] = found
        problems += trouble
    full_rate = figures.get("full", {}).get("train_samples_per_s")
    for found in figures.values():
        if full_rate and "train_samples_per_s" in found:
            found["train_step_cost_vs_full"] = full_rate / found["train_samples_per_s"]
    ran = [n for n, f in figures.items() if "test_auc" in f]
    costs = ", ".join(
        f"{n} {figures[n]['train_step_cost_vs_full']:.1f}x"
        for n in ran
        if "train_step_cost_vs_full" in figures[n] and n != "full"
    )
    refused = [n for n in figures if n not in ran]
    summary = f"{len(ran)} methods agree with cpu and restore ({kind(device)}); step cost vs full: {costs}"
    if refused:
        summary += f"; refused: {', '.join(refused)}"
    return StepOutcome(figures, summary, problems)
