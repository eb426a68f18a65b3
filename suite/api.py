"""The suite from Python: ``run``, ``load_results`` and ``compare``.

``run`` resolves the same ``RunConfig`` the CLI does and goes down the one run path
(``suite.runs.single.execute`` or ``suite.runs.multiseed.execute_seeds``);
``load_results`` reads the result JSON files every run writes into a pandas DataFrame;
``compare`` pairs two configs' runs by seed and reports each metric's difference with a
90% paired interval and a verdict (``suite.decisions``); with one seed a side, test AUC
and log loss are compared on the test rows the two runs share (DeLong's paired test, a
paired test of the per-row losses), and other metrics say what they need.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.config import (
    RunConfig,
    build_config,
    set_component,
    set_dotted,
    stable_hash,
    validate_config,
)
from suite.errors import ConfigError
from suite.results import TaskResult

if TYPE_CHECKING:
    import pandas as pd

    from suite.runs.multiseed import MultiSeedResult

DEFAULT_RESULTS_DIR = "results/runs"
COMPONENTS = ("model", "embedding", "dataset", "task")
ConfigLike = RunConfig | Mapping[str, Any] | str | Path | None


def resolve(config: ConfigLike = None, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """A ``RunConfig`` from a config object, a nested dict, a YAML path or a preset name,
    with dotted-key ``overrides`` (``{"train.max_steps": 20}``) applied last."""
    if isinstance(config, RunConfig):
        base = config
    elif isinstance(config, Mapping):
        base = validate_config(dict(config))
    elif isinstance(config, str | Path):
        base = build_config([config])
    elif config is None:
        base = build_config()
    else:
        raise ConfigError(
            f"config must be a RunConfig, dict, YAML path or preset name, got {type(config).__name__}"
        )
    if not overrides:
        return base
    data = base.model_dump(mode="json")
    # entries first, so that a new entry drops the old one's options but keeps the given ones
    switches = {k: v for k, v in overrides.items() if k.removesuffix(".name") in COMPONENTS}
    for key, value in switches.items():
        set_component(data, key.removesuffix(".name"), str(value))
    for key, value in overrides.items():
        if key not in switches:
            set_dotted(data, key, value)
    return validate_config(data)


def run(
    config: ConfigLike = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    seeds: Iterable[int] | None = None,
    out: str | Path | None = None,
) -> TaskResult | MultiSeedResult:
    """Run ``config`` (see :func:`resolve`) as ``suite run`` does; with ``seeds``, once per
    seed under one MLflow parent run (as ``suite run --seeds``).

    Returns the ``TaskResult`` (or ``MultiSeedResult`` with ``seeds``) also written under
    ``tracking.results_dir``.
    """
    resolved = resolve(config, overrides)
    if seeds is not None:
        from suite.runs.multiseed import execute_seeds, seeds_from

        return execute_seeds(resolved, seeds_from(list(seeds)), out=out)
    from suite.runs.single import execute

    return execute(resolved, out=out)


IDENTITY_COLUMNS = [
    "task",
    "model",
    "embedding",
    "dataset",
    "protocol",
    "seed",
    "config_hash",
    "group",
    "data_fingerprint",
    "mlflow_run_id",
    "mlflow_tracking_uri",
    "created",
    "duration_s",
    "path",
]


def group_hash(result: TaskResult) -> str:
    """The hash shared by a config's runs over seeds (its identity without ``seed``);
    equals ``suite.runs.multiseed.seedless_hash`` of the run's config."""
    return stable_hash({k: v for k, v in result.config.items() if k != "seed"})


def read_results(results_dir: str | Path = DEFAULT_RESULTS_DIR) -> list[tuple[Path, TaskResult]]:
    """Every single-run result JSON under ``results_dir`` (multi-seed aggregates skipped:
    each of their seeds has its own file)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ConfigError(f"results directory {root} does not exist")
    found = []
    for path in sorted(root.rglob("*.json")):
        if "multiseed" in path.parts:
            continue
        try:
            found.append((path, TaskResult.read(path)))
        except (ValueError, OSError):
            continue  # not a run result (e.g. a report's own JSON)
    return found


CONFIG_PREFIX = "config."
"""Prefix of ``load_results``' config columns (as MLflow's ``params.``)."""


def flatten_config(config: Mapping[str, Any], prefix: str = CONFIG_PREFIX) -> dict[str, Any]:
    """A run's resolved config as flat columns: ``{"train": {"sparse_lr": 0.05}}`` gives
    ``{"config.train.sparse_lr": 0.05}``; lists become their JSON text (hashable, so
    they can be grouped on)."""
    import json

    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{name}."))
        elif isinstance(value, list | tuple):
            flat[name] = json.dumps(value)
        else:
            flat[name] = value
    return flat


def load_results(results_dir: str | Path = DEFAULT_RESULTS_DIR, **filters: Any) -> pd.DataFrame:
    """Runs under ``results_dir`` as a DataFrame: one row per run, the identity columns
    (``task``, ``model``, ``embedding``, ``dataset``, ``protocol``, ``seed``,
    ``config_hash``, ``group`` (the config hash without the seed), ``data_fingerprint``,
    ``mlflow_run_id``, ...), one column per metric, then the resolved config flattened
    as ``config.<dotted key>`` columns (``config.embedding.options.collisions``,
    ``config.train.sparse_lr``; see :func:`flatten_config`).

    Rows with different ``group`` or ``data_fingerprint`` are different experiments:
    group on both (``frame.groupby(["group", "data_fingerprint"])``) before averaging.

    ``filters`` keep rows whose column equals the value, or is in it for a list/tuple/set:
    ``load_results(task="accuracy", embedding=["full", "qr"])``; config columns through
    a dict: ``load_results(**{"config.train.sparse_lr": 0.05})``.
    """
    import pandas as pd

    rows, metric_names, config_names = [], {}, {}
    for path, result in read_results(results_dir):
        row = {
            **{k: getattr(result, k) for k in IDENTITY_COLUMNS if hasattr(result, k)},
            "group": group_hash(result),
            "path": str(path),
        }
        config = flatten_config(result.config)
        metric_names.update(dict.fromkeys(result.metrics))
        config_names.update(dict.fromkeys(config))
        rows.append({**row, **result.metrics, **config})
    columns = IDENTITY_COLUMNS + list(metric_names) + sorted(config_names)
    frame = pd.DataFrame(rows, columns=columns)
    for column, wanted in filters.items():
        if column not in frame.columns:
            valid = ", ".join(map(str, frame.columns))
            raise ConfigError(f"load_results: no column {column!r} to filter on (columns: {valid})")
        if isinstance(wanted, list | tuple | set | frozenset):
            frame = frame[frame[column].isin(list(wanted))]
        else:
            frame = frame[frame[column] == wanted]
    return frame.reset_index(drop=True)


RunsLike = Any
"""A result file (single or multi-seed), an MLflow run id (single or multi-seed parent),
a config or group hash, a ``TaskResult``, ``MultiSeedResult`` or list of ``TaskResult``."""


def runs_of(ref: RunsLike, results_dir: str | Path = DEFAULT_RESULTS_DIR) -> list[TaskResult]:
    """The per-seed runs ``ref`` names (see :data:`RunsLike`)."""
    if isinstance(ref, TaskResult):
        return [ref]
    if isinstance(ref, list | tuple) and all(isinstance(r, TaskResult) for r in ref):
        return list(ref)
    per_seed = getattr(ref, "per_seed", None)
    if per_seed is not None:
        return list(per_seed)
    text = str(ref)
    path = Path(text)
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise ConfigError(f"no result file {path}")
        import json

        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("kind") == "multiseed":
            return [TaskResult.model_validate(r) for r in data["per_seed"]]
        return [TaskResult.model_validate(data)]
    results = [r for _, r in read_results(results_dir)]
    for key in ("mlflow_run_id", "config_hash"):
        hits = [r for r in results if getattr(r, key) == text]
        if hits:
            return hits
    group = [r for r in results if group_hash(r) == text]
    if group:
        return group
    parent = _multiseed_by_run_id(text, results_dir)
    if parent is not None:
        return parent
    raise ConfigError(
        f"{text!r} is neither a result file nor a run id, config hash or group hash of a "
        f"run under {results_dir}"
    )


def _multiseed_by_run_id(run_id: str, results_dir: str | Path) -> list[TaskResult] | None:
    import json

    for path in Path(results_dir).rglob("multiseed/*.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("mlflow_run_id") == run_id:
            return [TaskResult.model_validate(r) for r in data["per_seed"]]
    return None


@dataclass(frozen=True)
class MetricComparison:
    """One metric of ``A - B`` over seeds paired by seed."""

    metric: str
    higher_is_better: bool
    a_mean: float
    b_mean: float
    difference: float
    low: float
    high: float
    p_value: float
    n: int
    verdict: str
    """``A better``, ``B better``, ``same within margin``, ``underpowered (needs n=...)``
    or ``not measurable`` (fewer than two paired seeds); with one seed a side, ``... on
    this test set`` (see ``note``)."""
    note: str = ""
    """How a one-seed row was tested, or what it needs (empty with two or more seeds)."""


def compare(
    a: RunsLike,
    b: RunsLike,
    metrics: Iterable[str] | None = None,
    margin: float = 0.0,
    results_dir: str | Path = DEFAULT_RESULTS_DIR,
) -> pd.DataFrame:
    """Compare the runs ``a`` and ``b`` name (see :func:`runs_of`) metric by metric.

    Runs are paired by seed (seeds both have); each row holds both means, the mean paired
    difference ``A - B`` with its 90% interval, the deciding one-sided p and a verdict by
    the reproductions' rule (``suite.decisions.compare_paired``): ``A better`` / ``B
    better`` when a one-sided test at 5% shows the difference beyond ``margin``, ``same
    within margin`` by TOST, else ``underpowered (needs n=...)``; ``not measurable`` with
    fewer than two paired seeds. ``test_auc`` adds the test set's shared DeLong variance
    where both sides kept their test predictions. With one seed a side, ``test_auc`` gets
    DeLong's paired test and ``test_logloss`` a paired test of the per-row losses on the
    kept test predictions (the test set's noise alone: ``note`` says so); a row that cannot
    be tested says in ``note`` what it needs.
    """
    import pandas as pd

    from suite.decisions import compare_on_test_set, compare_paired

    left = {r.seed: r for r in runs_of(a, results_dir)}
    right = {r.seed: r for r in runs_of(b, results_dir)}
    seeds = sorted(set(left) & set(right))
    if not seeds:
        raise ConfigError(
            f"no seed in common: A has seeds {sorted(left)}, B has {sorted(right)}; "
            "run both with the same --seeds"
        )
    fingerprints = {left[s].data_fingerprint for s in seeds} | {
        right[s].data_fingerprint for s in seeds
    }
    if len(fingerprints) > 1:
        raise ConfigError("A and B were run on different data (data fingerprints differ)")
    common = [m for m in left[seeds[0]].metrics if all(m in right[s].metrics for s in seeds)]
    names = list(metrics) if metrics is not None else common
    unknown = [m for m in names if m not in common]
    if unknown:
        raise ConfigError(
            f"metric(s) {', '.join(unknown)} not in both; shared: {', '.join(common)}"
        )
    rows = []
    for name in names:
        xa = [left[s].metrics[name] for s in seeds]
        xb = [right[s].metrics[name] for s in seeds]
        higher = left[seeds[0]].higher_is_better.get(name, True)
        test_var, test_rows = _test_set_noise(name, left, right, seeds)
        diffs = [x - y for x, y in zip(xa, xb, strict=True)]
        found = compare_paired(diffs, higher, margin, test_var, test_rows)
        note = ""
        if len(seeds) == 1:
            variance, scored, note = _one_seed_noise(name, left[seeds[0]], right[seeds[0]])
            if variance is not None:
                found = compare_on_test_set(diffs[0], variance, scored, higher, margin)
        rows.append(
            MetricComparison(
                metric=name,
                higher_is_better=higher,
                a_mean=sum(xa) / len(xa),
                b_mean=sum(xb) / len(xb),
                difference=found.test.estimate,
                low=found.test.low,
                high=found.test.high,
                p_value=found.test.p,
                n=len(seeds),
                verdict=found.label,
                note=note,
            )
        )
    return pd.DataFrame([asdict(r) for r in rows])


ONE_SEED_NEEDS = "one seed a side: needs two or more paired seeds (run both with --seeds)"
"""The note of a one-seed row that no test on the test rows applies to."""


def _one_seed_noise(
    metric: str, left: TaskResult, right: TaskResult
) -> tuple[float | None, int, str]:
    """The test-set variance of ``metric``'s ``A - B`` for one run a side, from their kept
    test predictions on the same rows: DeLong's paired variance for ``test_auc``, the
    per-row loss differences' variance of the mean for ``test_logloss``; ``(None, 0,
    what it needs)`` where neither applies."""
    if metric not in ("test_auc", "test_logloss"):
        return None, 0, ONE_SEED_NEEDS
    import numpy as np

    from suite.results import read_arrays

    found = [read_arrays(r) for r in (left, right)]
    if not all(f and {"test_labels", "test_logits"} <= set(f) for f in found):
        return None, 0, f"{ONE_SEED_NEEDS}, or both runs' test logits (tracking.keep_arrays)"
    (la, xa), (lb, xb) = ((f["test_labels"], f["test_logits"]) for f in found)  # type: ignore[index]
    if la.shape != lb.shape or not np.array_equal(la, lb):
        return None, 0, f"{ONE_SEED_NEEDS}: the two runs scored different test rows"
    rows = len(la)
    if metric == "test_auc":
        from suite.stats import auc_covariance

        try:
            cov = auc_covariance(la, np.vstack([xa, xb]))
        except ValueError:  # one class only
            return None, 0, f"{ONE_SEED_NEEDS}: the test rows hold one class only"
        variance = float(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1])
        return variance, rows, "one seed a side: DeLong's paired test on the shared test rows"
    y = la.astype(np.float64)

    def losses(z: np.ndarray) -> np.ndarray:
        z = z.astype(np.float64)
        return np.logaddexp(0.0, z) - y * z  # the log loss of logit z per row

    d = losses(xa) - losses(xb)
    variance = float(d.var(ddof=1)) / rows if rows > 1 else 0.0
    return variance, rows, "one seed a side: paired test of the per-row losses on the test rows"


def _test_set_noise(
    metric: str, left: dict[int, TaskResult], right: dict[int, TaskResult], seeds: list[int]
) -> tuple[float, int]:
    """The test set's shared DeLong variance of ``test_auc`` differences, from the runs'
    kept test predictions (0 where they were not kept or scored different rows)."""
    if metric != "test_auc":
        return 0.0, 0
    from suite.reproduce.claims import pair_noise
    from suite.results import read_arrays

    def predictions(side: str, seed: int) -> tuple[Any, Any] | None:
        arrays = read_arrays((left if side == "A" else right)[seed])
        if not arrays or not {"test_labels", "test_logits"} <= set(arrays):
            return None
        return arrays["test_labels"], arrays["test_logits"]

    found = pair_noise(predictions, "A", "B", seeds)
    if not found:
        return 0.0, 0
    first = next(iter(found.values()))
    return first.shared, first.rows
