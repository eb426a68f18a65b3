"""What a checkpoint captures beside the embedding, and puts back: every RNG, the dense
layers' state and the dense optimizer's state, as named tensors plus JSON metadata."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from suite.models.base import RecModel


def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every RNG's state: tensors (``rng.*``) and the JSON rest of numpy's and Python's."""
    np_state = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    tensors = {
        "rng.torch": torch.get_rng_state(),
        "rng.numpy": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
        "rng.python": torch.tensor(py_state, dtype=torch.int64),
    }
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = state
    meta = {
        "numpy": [str(np_state[0]), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "python": [py_version, py_gauss],
    }
    return tensors, meta


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Inverse of :func:`rng_state`."""
    torch.set_rng_state(tensors["rng.torch"])
    name, pos, has_gauss, cached = meta["numpy"]
    keys = tensors["rng.numpy"].numpy().astype(np.uint32)
    np.random.set_state((name, keys, pos, has_gauss, cached))
    version, gauss = meta["python"]
    random.setstate((version, tuple(int(v) for v in tensors["rng.python"].tolist()), gauss))
    cuda = [tensors[f"rng.cuda.{i}"] for i in range(torch.cuda.device_count())]
    if cuda and all(f"rng.cuda.{i}" in tensors for i in range(len(cuda))):
        torch.cuda.set_rng_state_all(cuda)


def dense_state(model: RecModel) -> dict[str, torch.Tensor]:
    """The model's state but the embedding's, as ``model.<name>`` tensors."""
    return {f"model.{k}": v for k, v in model.dense_checkpoint_state().items()}


def optimizer_state(
    optimizer: torch.optim.Optimizer | None,
) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """The optimizer's state as ``optim.<param>.<key>`` tensors, and its param groups."""
    if optimizer is None:
        return {}, []
    state = optimizer.state_dict()
    tensors = {}
    for index, values in state["state"].items():
        for key, value in values.items():
            if not torch.is_tensor(value):
                value = torch.tensor(value)
            tensors[f"optim.{index}.{key}"] = value
    return tensors, state["param_groups"]


def load_optimizer(
    optimizer: torch.optim.Optimizer | None,
    tensors: dict[str, torch.Tensor],
    groups: list[dict[str, Any]],
) -> None:
    """Inverse of :func:`optimizer_state`."""
    if optimizer is None:
        return
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        if name.startswith("optim."):
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": groups})
