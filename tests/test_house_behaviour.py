"""Behaviour is a contract across refactors: config hashes of every registry entry and preset,
and the metrics of short CPU runs of every backbone with the main embedding methods, equal
the values recorded before the house was rebuilt (issue 35, recorded at 9ab7432).

Regenerate only on purpose, with a reason in the commit:
``python tests/test_house_behaviour.py > tests/golden/house_behaviour.json``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).parent / "golden" / "house_behaviour.json"
TINY = {
    "dataset.options.train_rows": 2000,
    "dataset.options.val_rows": 500,
    "dataset.options.test_rows": 500,
    "train.max_steps": 12,
    "train.batch_size": 128,
    "train.progress": False,
    "train.threads": 1,
    "tracking.enabled": False,
}
RUNS = [
    ("dlrm", "full"),
    ("dlrm", "hash"),
    ("dlrm", "qr"),
    ("dlrm", "mixed_dim"),
    ("wukong", "full"),
    ("dcnv2", "hash"),
]
# Runs are bit-identical on one CPU; another CPU's kernels may sum in another order.
METRIC_TOLERANCE = 1e-4


def config_hashes() -> dict[str, str]:
    """The stable hash of the default config with each registry entry, and of each preset."""
    from suite.api import resolve
    from suite.config import stable_hash
    from suite.registry import DATASETS, EMBEDDINGS, MODELS, TASKS

    hashes = {"default": stable_hash(resolve().model_dump(mode="json"))}
    for kind, registry in (
        ("model", MODELS),
        ("embedding", EMBEDDINGS),
        ("dataset", DATASETS),
        ("task", TASKS),
    ):
        for name in sorted(registry.names()):
            config = resolve(None, {kind: name})
            hashes[f"{kind}:{name}"] = stable_hash(config.model_dump(mode="json"))
    presets = Path(__file__).resolve().parent.parent / "suite" / "presets" / "models"
    for path in sorted(presets.glob("*.yaml")):
        hashes[f"preset:{path.stem}"] = stable_hash(resolve(path.stem).model_dump(mode="json"))
    return hashes


def run_metrics(model: str, embedding: str, out: Path) -> dict[str, float]:
    """The metrics of one tiny accuracy run on criteo-synth."""
    from suite.api import run

    overrides = {"model": model, "embedding": embedding, **TINY}
    result = run(None, overrides, out=out / f"{model}-{embedding}.json")
    return {k: float(v) for k, v in sorted(result.metrics.items()) if not k.endswith("_s")}


def snapshot(out: Path) -> dict[str, Any]:
    return {
        "hashes": config_hashes(),
        "metrics": {f"{m}+{e}": run_metrics(m, e, out) for m, e in RUNS},
    }


def test_config_hashes_are_unchanged() -> None:
    golden = json.loads(GOLDEN.read_text())["hashes"]
    assert config_hashes() == golden


@pytest.mark.parametrize("model,embedding", RUNS)
def test_run_metrics_are_unchanged(model: str, embedding: str, tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text())["metrics"][f"{model}+{embedding}"]
    got = run_metrics(model, embedding, tmp_path)
    assert sorted(got) == sorted(golden)
    for name, value in golden.items():
        assert math.isclose(got[name], value, abs_tol=METRIC_TOLERANCE), (name, got[name], value)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        json.dump(snapshot(Path(tmp)), sys.stdout, indent=1, sort_keys=True)
        print()
