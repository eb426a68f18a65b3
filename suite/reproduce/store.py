"""A reproduction's run results on disk, beside its report: resumable and regenerable.

``<report dir>/runs/<config hash>/seed-<n>.json`` (the run's hash, as the report names
it; the result inside carries the hash of its config with the seed) holds one finished job: the run's
:class:`~suite.results.TaskResult` (resolved config, seed, metrics, the task's details,
the data fingerprint, duration, MLflow run id) with the sha256 of its test logits
(float32 bytes) in ``details`` instead of the logits themselves. ``runs/noise.json`` holds
the DeLong noise of every AUC pair the claims use, keyed by the two runs' config hashes and
the seed, with the covariances of each seed's figure with the seeds judged together with
it, so the report regenerates, and a reproduction resumes seed by seed, without the
predictions. ``runs/reproduction.json``
names the MLflow parent run and the wall time of the reproduction that trained them.
Every file is written atomically; a file that does not parse, or that holds another
config, is ignored with a warning and its job rerun.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from suite.config import DatasetSpec, RunConfig
from suite.errors import ConfigError
from suite.fileio import write_text_atomic
from suite.reproduce.claims import PairNoise
from suite.results import TaskResult, read_arrays

RUNS_DIR = "runs"
NOISE_FILE = "noise.json"
MANIFEST_FILE = "reproduction.json"
LOGITS_DIGEST = "test_logits_sha256"
"""``details`` key of a stored result: sha256 of its test logits as float32 bytes."""

NOISE_VERSION = 2
"""1: each entry's ``shared`` from all seeds judged at once; 2: each entry's ``covariances``
with the seeds judged together with it (``shared`` kept in entries written as version 1)."""

NoiseKey = tuple[str, str, int]
"""``(left config hash, right config hash or "", seed)``."""


def runs_dir(report_dir: str | Path) -> Path:
    return Path(report_dir) / RUNS_DIR


def result_file(report_dir: str | Path, config_hash: str, seed: int) -> Path:
    """Where the job ``(config_hash, seed)`` is stored."""
    return runs_dir(report_dir) / config_hash / f"seed-{seed}.json"


def logits_digest(logits: np.ndarray) -> str:
    """sha256 of ``logits [N]`` as little-endian float32 bytes."""
    return hashlib.sha256(np.ascontiguousarray(logits, dtype="<f4").tobytes()).hexdigest()


def with_digest(result: TaskResult) -> TaskResult:
    """``result`` as stored: its test logits' digest added to ``details`` (when it kept
    them) and the tracking store's URI (a path of this machine) left out."""
    details = dict(result.details)
    arrays = read_arrays(result)
    if arrays and "test_logits" in arrays:
        details[LOGITS_DIGEST] = logits_digest(arrays["test_logits"])
    return result.model_copy(update={"details": details, "mlflow_tracking_uri": None})


def write_result(report_dir: str | Path, key: str, result: TaskResult) -> Path:
    """Store a finished job of the run ``key`` (its config hash over seeds; pass the result
    through :func:`with_digest` first), atomically."""
    return result.write(result_file(report_dir, key, result.seed))


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def read_result(report_dir: str | Path, key: str, config: RunConfig) -> TaskResult | None:
    """The stored job of run ``key`` whose resolved config (seed included) is ``config``, or
    None where there is none; a file that does not parse or holds another config is None
    with a one-line warning (the job is run again)."""
    config_hash, seed = config.config_hash(), config.seed
    path = result_file(report_dir, key, seed)
    if not path.is_file():
        return None
    try:
        result = TaskResult.read(path)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        warn(f"{path}: not a stored run result ({first}); running it again")
        return None
    if result.config_hash != config_hash or result.seed != seed:
        warn(
            f"{path}: holds config {result.config_hash} seed {result.seed}, expected "
            f"{config_hash} seed {seed}; running it again"
        )
        return None
    return result


def predictions(result: TaskResult) -> tuple[np.ndarray, np.ndarray] | None:
    """A result's test ``(labels [N], logits [N])`` where its arrays file is still here
    and (for a stored result) its logits match the stored digest; else None."""
    arrays = read_arrays(result)
    if not arrays or not {"test_labels", "test_logits"} <= set(arrays):
        return None
    digest = result.details.get(LOGITS_DIGEST)
    if digest is not None and digest != logits_digest(arrays["test_logits"]):
        return None
    return arrays["test_labels"], arrays["test_logits"]


def read_noise(report_dir: str | Path) -> dict[NoiseKey, PairNoise]:
    """The stored noise entries (empty if the file is missing or unreadable, with a
    warning for the latter)."""
    path = runs_dir(report_dir) / NOISE_FILE
    if not path.is_file():
        return {}
    try:
        entries = json.loads(path.read_text())["pairs"]
        out = {}
        for e in entries:
            noise = PairNoise.from_dict(e)
            out[(str(e["left"]), str(e["right"]), int(e["seed"]))] = noise
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        warn(f"{path}: not a noise file ({type(exc).__name__}: {exc}); ignored")
        return {}


def write_noise(report_dir: str | Path, entries: dict[NoiseKey, PairNoise]) -> Path:
    """Write the noise entries, sorted, one line each, atomically (NaN figures as null)."""
    pairs = []
    for (left, right, seed), noise in sorted(entries.items()):
        figures = {
            k: None if isinstance(v, float) and math.isnan(v) else v
            for k, v in noise.to_dict().items()
        }
        pairs.append({"left": left, "right": right, "seed": seed, **figures})
    lines = ",\n".join(f"    {json.dumps(p, sort_keys=True)}" for p in pairs)
    text = f'{{\n  "pairs": [\n{lines}\n  ],\n  "version": {NOISE_VERSION}\n}}\n'
    return write_text_atomic(runs_dir(report_dir) / NOISE_FILE, text)


def read_manifest(report_dir: str | Path) -> dict[str, Any]:
    """``{"mlflow_run_id", "duration_s"}`` of the reproduction that last trained here."""
    path = runs_dir(report_dir) / MANIFEST_FILE
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def write_manifest(report_dir: str | Path, mlflow_run_id: str | None, duration_s: float) -> Path:
    text = json.dumps({"mlflow_run_id": mlflow_run_id, "duration_s": duration_s}, indent=2)
    return write_text_atomic(runs_dir(report_dir) / MANIFEST_FILE, text + "\n")


def _data_identity(dataset: DatasetSpec) -> dict[str, Any]:
    return dataset.model_dump(mode="json", exclude={"raw", "cache_dir"})


def stored_cardinalities(directories: list[Path]) -> Callable[[DatasetSpec], tuple[int, ...]]:
    """A dataset's cardinalities read off a ``full`` run stored under ``directories`` on
    that dataset (its tables' rows are the data's cardinalities), so that a report
    regenerated from stored results plans its curve without opening the data cache."""
    found: dict[str, tuple[int, ...]] = {}

    def of(dataset: DatasetSpec) -> tuple[int, ...]:
        want = json.dumps(_data_identity(dataset), sort_keys=True)
        if want in found:
            return found[want]
        for directory in directories:
            for path in sorted(runs_dir(directory).glob("*/seed-*.json")):
                try:
                    stored = json.loads(path.read_text(encoding="utf-8"))
                    config = stored["config"]
                    rows = stored["details"]["embedding_layout"]["table_rows"]
                    if config["embedding"]["name"] != "full":
                        continue
                    data = DatasetSpec.model_validate(config["dataset"])
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                if json.dumps(_data_identity(data), sort_keys=True) == want:
                    found[want] = tuple(int(r) for r in rows)
                    return found[want]
        where = ", ".join(str(runs_dir(d)) for d in directories)
        raise ConfigError(
            f"--from-results: no stored `full` run on dataset {dataset.name} under {where} "
            "to read the curve's cardinalities from"
        )

    return of
