"""Same config, same machine, same thread count: bit-identical metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.environment import cpu_model, environment
from suite.runs.single import execute
from tests.conftest import tiny_config

# figures of the machine's speed, which no seed fixes
TIMING = {"train_samples_per_s"}


def quality(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k not in TIMING}


@pytest.mark.parametrize(
    ("model", "embedding"),
    [("dlrm", "full"), ("dlrm", "qr"), ("dcnv2", "hash"), ("wukong", "fiited")],
)
def test_one_config_twice_gives_identical_metrics(model: str, embedding: str) -> None:
    config = tiny_config(
        model=model, embedding=embedding, overrides=["seed=3", "train.max_steps=25"]
    )
    first, second = execute(config), execute(config)
    assert quality(first.metrics) == quality(second.metrics)  # exact, not approx
    assert first.details["validation_history"] == second.details["validation_history"]


def test_a_fresh_process_gives_the_same_metrics(tmp_path: Path) -> None:
    overrides = ["seed=5", "train.max_steps=25"]
    here = execute(tiny_config(overrides=overrides))
    script = (
        "import json, sys; from tests.conftest import tiny_config; "
        "from suite.runs.single import execute; "
        f"r = execute(tiny_config(overrides={overrides!r})); print(json.dumps(r.metrics))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=tmp_path,
    ).stdout
    there = json.loads(out.strip().splitlines()[-1])
    assert quality(there) == quality(here.metrics)


def test_every_run_records_threads_and_the_cpu_model() -> None:
    result = execute(tiny_config(overrides=["train.max_steps=2"]))
    env = result.environment
    assert env["threads"] == 1  # the config's train.threads
    assert env["cpu_model"] == cpu_model() and env["cpu_model"]
    assert "gpu_model" in env
    if Path("/proc/cpuinfo").exists() and "model name" in Path("/proc/cpuinfo").read_text():
        # the model name, not the bare architecture platform.processor() often gives
        assert env["cpu_model"] not in ("x86_64", "aarch64", "")
    assert environment()["interop_threads"] >= 1
