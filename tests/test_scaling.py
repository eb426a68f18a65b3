"""The scaling task: presets over the run's config, one training path, fits and a plot."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from suite.config import build_config
from suite.errors import ConfigError
from suite.presets import preset_path
from suite.runs.single import execute
from suite.tasks.scaling import DEFAULT_PRESETS, fit_power_law, preset_config
from tests.conftest import TINY_DATA, tiny_config, tracking_uri


def test_fit_recovers_a_saturating_power_law() -> None:
    compute = [1e9, 1e10, 1e11, 1e12, 1e13]
    fit = fit_power_law(compute, [0.4 + 2.0 * c**-0.05 for c in compute])
    assert fit["exponent"] == pytest.approx(0.05, rel=1e-3)
    assert fit["l_inf"] == pytest.approx(0.4, abs=1e-3)
    assert fit["r2"] == pytest.approx(1.0) and fit["usable"] == 1.0
    noisy = fit_power_law(compute, [0.50, 0.47, 0.46, 0.42, 0.43])
    assert 0 < noisy["r2"] < 1 and noisy["exponent"] > 0


def test_preset_config_keeps_data_budget_seed_and_embedding_method() -> None:
    base = tiny_config(embedding="hash", task="scaling", overrides=["seed=7", "train.max_steps=5"])
    config = preset_config(base, "wukong-s")
    assert config.model.name == "wukong" and config.model.options["num_fm"] == 8
    assert config.task.name == "accuracy"
    assert config.dataset == base.dataset and config.train == base.train and config.seed == 7
    assert config.embedding.name == "hash"
    assert {k: v for k, v in config.embedding.options.items() if k != "dim"} == {
        k: v for k, v in base.embedding.options.items() if k != "dim"
    }
    # the same config as an accuracy run given the preset file on the command line (the
    # method's name set as a value keeps the preset's embedding.options.dim)
    data = [f"dataset.options.{k}={v}" for k, v in TINY_DATA.items()]
    direct = build_config(
        [preset_path("wukong-s")],
        components={"task": "accuracy"},
        values={
            "seed": 7,
            "train.max_steps": 5,
            "train.batch_size": 128,
            "train.progress": False,
            "tracking.enabled": False,
            "train.threads": 1,
            "embedding.name": "hash",
        },
        overrides=data,
    )
    assert direct.config_hash() == config.config_hash()


def test_unknown_preset_fails_before_any_work() -> None:
    with pytest.raises(ConfigError, match=r"task\.options\.presets.*Did you mean 'dlrm-xs'"):
        tiny_config(task="scaling", overrides=["task.options.presets=[dlrm-xx]"])


def test_scaling_run_writes_plot_fits_and_mlflow_points(tmp_path: Path) -> None:
    steps = 10  # the machinery, not the quality, is under test: a short budget
    config = tiny_config(
        task="scaling",
        tracking=True,
        overrides=[f"tracking.uri={tracking_uri(tmp_path)}", f"train.max_steps={steps}"],
    )
    assert config.task.options["presets"] == DEFAULT_PRESETS
    result = execute(config)

    points = result.details["points"]
    assert [p["preset"] for p in points] == DEFAULT_PRESETS
    for point in points:
        assert point["examples"] == steps * config.train.batch_size
        assert point["training_flops"] == 3 * point["flops_per_example"] * point["examples"]
        assert 0 < point["test_logloss"] < 1 and 0 < point["test_auc"] < 1
    flops = [p["flops_per_example"] for p in points]
    assert max(flops) >= 100 * min(flops)

    for backbone in ("dlrm", "wukong"):
        fit = result.details["fits"][backbone]
        assert fit["points"] == 3 and math.isfinite(fit["exponent"]) and fit["r2"] <= 1
        assert fit["usable"] == 0.0  # three points cannot pass the gate of a 3-parameter fit
        assert result.metrics[f"{backbone}_exponent"] == fit["exponent"]
        assert result.higher_is_better[f"{backbone}_exponent"] is True

    plot = Path(result.details["plot"])
    assert plot == Path("results/scaling") / f"criteo-synth-{config.config_hash()}.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    client = MlflowClient(tracking_uri=tracking_uri(tmp_path))
    history = client.get_metric_history(result.mlflow_run_id, "points/test_logloss")
    assert sorted(m.step for m in history) == list(range(len(DEFAULT_PRESETS)))
    run = client.get_run(result.mlflow_run_id)
    assert run.data.metrics["wukong_exponent"] == pytest.approx(result.metrics["wukong_exponent"])
