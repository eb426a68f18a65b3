"""Log a run's trained model to MLflow as a logged model (MLflow 3's Models tab).

The model is saved with MLflow's PyTorch flavour (pickle format: it loads back with its
``load_model("models:/<model_id>")`` where ``suite`` is importable) and
linked to the run as its output at the final step. ``tracking.log_model``: ``auto`` logs
it when its weights take at most :data:`AUTO_MAX_BYTES`, ``always`` or ``never``.
"""

from __future__ import annotations

import contextlib

from suite.config import RunConfig
from suite.models.base import RecModel
from suite.tracking import Tracker

AUTO_MAX_BYTES = 256 * 2**20


def model_bytes(model: RecModel) -> int:
    """Bytes of the model's parameters and buffers (what its state dict holds)."""
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def _requirements() -> list[str]:
    from importlib import metadata

    found = []
    for dist in ("torch", "fbgemm-gpu", "fbgemm-gpu-cpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found.append(f"{dist}=={metadata.version(dist)}")
    return found


def should_log(config: RunConfig, model: RecModel) -> bool:
    mode = config.tracking.log_model
    return mode == "always" or (mode == "auto" and model_bytes(model) <= AUTO_MAX_BYTES)


def log_model(tracker: Tracker, config: RunConfig, model: RecModel, step: int = 0) -> str | None:
    """Save ``model`` as an MLflow logged model of the tracker's run; its id, or ``None``
    when ``tracking.log_model`` says not to."""
    module = model.whole_module()
    if module is None or not should_log(config, model):
        return None
    return tracker.log_pytorch_model(
        module.cpu().eval(),
        name=f"{config.model.name}-{config.embedding.name}",
        params={"config_hash": config.config_hash()},
        requirements=_requirements(),
        step=step,
    )
