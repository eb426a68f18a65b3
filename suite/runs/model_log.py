"""Log a run's trained model to MLflow as a logged model (MLflow 3's Models tab).

The model is saved with ``mlflow.pytorch`` (pickle format: it loads back with
``mlflow.pytorch.load_model("models:/<model_id>")`` where ``suite`` is importable) and
linked to the run as its output at the final step. ``tracking.log_model``: ``auto`` logs
it when its weights take at most :data:`AUTO_MAX_BYTES`, ``always`` or ``never``.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from pathlib import Path

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
    if not should_log(config, model):
        return None
    import mlflow.pytorch
    from mlflow.entities import LoggedModelOutput

    client = tracker.client
    name = f"{config.model.name}-{config.embedding.name}"

    def save() -> str:
        run = client.get_run(tracker.run_id)
        logged = client.create_logged_model(
            run.info.experiment_id,
            name=name,
            source_run_id=tracker.run_id,
            params={"config_hash": config.config_hash()},
            model_type="recsuite",
        )
        with tempfile.TemporaryDirectory() as tmp:
            quiet = logging.getLogger("mlflow.pytorch")
            level = quiet.level
            quiet.setLevel(logging.ERROR)  # its pickle warning: we choose pickle on purpose
            try:
                mlflow.pytorch.save_model(
                    model.cpu().eval(),
                    str(Path(tmp) / "model"),
                    pip_requirements=_requirements(),
                    serialization_format="pickle",
                )
            finally:
                quiet.setLevel(level)
            client.log_model_artifacts(logged.model_id, str(Path(tmp) / "model"))
        client.finalize_logged_model(logged.model_id, "READY")
        client.log_outputs(tracker.run_id, [LoggedModelOutput(logged.model_id, step)])
        return logged.model_id

    return tracker.call("log the model", save)
