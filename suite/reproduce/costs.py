"""What each job of a :class:`~suite.reproduce.plan.ReproductionPlan` costs before it runs:
its memory against its device's, its expected time from the measured training rates, and
the plan's device-hours and wall time for a number of workers (``suite reproduce --plan``).

Nothing here trains or prepares data. A dataset's sizes (:func:`data_shape`) come from its
prepared manifest where it is cached, else from what is known without it: Criteo Kaggle's
vocabularies as the DLRM reference counts them and its row count, or a synthetic
generator's settings. A job's memory (:func:`job_memory`) is its model built on the meta
device (every tensor its real shape, no values): the embedding method's own parameters,
auxiliary structures and sparse optimizer state, the dense parameters with their gradients
and dense optimizer state, and an activation estimate. Its expected time is its training
examples over the samples/s measured for the same device kind and embedding method in the
stored run records (``results/<profile>/runs`` and ``results/reproduce/<profile>/runs``).

``RECSUITE_DEVICE_MEMORY`` (bytes, or a figure with a unit: ``64GiB``, ``500MB``) stands in
for every device's memory: to plan for a machine other than this one, or to see a job
refused.
"""

from __future__ import annotations

import functools
import heapq
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from suite.config import DatasetSpec, RunConfig
from suite.data.location import prepared_dir
from suite.embeddings.budget import sized_method
from suite.errors import ConfigError
from suite.models.base import RecModel
from suite.reproduce.plan import ReproductionPlan
from suite.stable_hash import stable_hash
from suite.units import human_bytes

MEMORY_ENV = "RECSUITE_DEVICE_MEMORY"
"""Environment variable: every device's memory in bytes (overrides what is measured)."""

ACTIVATION_FACTOR = 3
"""A training step holds about this many copies of its forward activations (the
activations kept for backward, their gradients, and the kernels' workspace)."""

DENSE_OPTIMIZER_FLOATS = {"adam": 2, "adagrad": 1, "sgd": 0}
"""Dense optimizer state per dense parameter (Adam's two moments, Adagrad's sum)."""

KAGGLE_TRAIN_SHARE = {"dlrm": 6 / 7, "random-811": 0.8}
"""Criteo Kaggle's training share of its rows per split protocol (days 1-6 of 7; 8:1:1)."""

RATE_COMMAND = "suite reproduce --profile quick --set device={device}"
"""The command that measures a device kind's training rate of every method (its runs are
stored under results/reproduce/quick/runs, where the plan reads them)."""

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


# --------------------------------------------------------------------------- data sizes
@dataclass(frozen=True)
class DataShape:
    """What a plan needs of a dataset: ``cardinalities [F]``, dense features, training rows."""

    cardinalities: tuple[int, ...]
    num_dense: int
    train_rows: int
    source: str
    """Where the sizes come from (the prepared cache, known figures, the generator)."""


def data_shape(spec: DatasetSpec) -> DataShape:
    """The sizes of ``spec`` without preparing it (see the module docstring). Raises
    :class:`ConfigError` for a dataset whose sizes only preparing it can tell."""
    manifest = prepared_dir(spec) / "manifest.json"
    if manifest.is_file():
        try:
            data = json.loads(manifest.read_text())
            schema = data["schema"]
            return DataShape(
                tuple(int(c) for c in schema["cardinalities"]),
                len(schema["dense"]),
                int(data["rows"]["train"]),
                "prepared cache",
            )
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a broken cache: the estimates below (the run itself will refuse it)
    source = spec.registry.get(spec.name)
    if spec.name == "criteo-kaggle":
        from suite.datasets.criteo import CRITEO_CARDINALITIES, DENSE, KAGGLE_ROWS

        share = KAGGLE_TRAIN_SHARE.get(str(spec.protocol), 6 / 7)
        return DataShape(
            tuple(CRITEO_CARDINALITIES),
            len(DENSE),
            int(KAGGLE_ROWS * share),
            "Criteo Kaggle's vocabularies as the DLRM reference counts them (not prepared)",
        )
    profile = getattr(source, "profile", None)
    if profile is not None and hasattr(source, "settings"):
        from suite.data.teacher import scaled_cardinalities

        options = spec.typed_options()
        settings = source().settings(options)
        cards = settings.cardinalities or scaled_cardinalities(
            profile.real_cardinalities, settings.vocab_scale, settings.keep_below
        )
        return DataShape(
            tuple(int(c) for c in cards),
            len(profile.dense_names),
            int(options.train_rows),
            "the generator's settings (not prepared; prepare may keep fewer ids)",
        )
    raise ConfigError(
        f"dataset.name: the sizes of {spec.name!r} are known only once it is prepared; "
        f"run `suite prepare {spec.name}` first"
    )


def shape_cardinalities(spec: DatasetSpec) -> tuple[int, ...]:
    """:func:`data_shape`'s cardinalities: a plan's curve options chosen without the data."""
    return data_shape(spec).cardinalities


# --------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class JobMemory:
    """Bytes one job holds on its device while it trains."""

    embedding: int
    """The method's parameters, auxiliary structures and its own (sparse) optimizer state."""
    dense: int
    """Backbone parameters (the method's dense parameters are in ``embedding``)."""
    gradients: int
    """Gradients of every parameter a dense optimizer updates."""
    dense_optimizer: int
    """The dense optimizer's state."""
    activations: int
    """:data:`ACTIVATION_FACTOR` x the forward activations of a training batch, or one
    evaluation batch's, whichever is larger."""

    @property
    def total(self) -> int:
        return (
            self.embedding + self.dense + self.gradients + self.dense_optimizer + self.activations
        )


def _linear_widths(module: nn.Module) -> tuple[int, int]:
    """``(first input width, sum of output widths)`` of the ``nn.Linear`` layers in ``module``."""
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    if not linears:
        return 0, 0
    return linears[0].in_features, sum(m.out_features for m in linears)


def activation_floats(model: RecModel, num_sparse: int) -> int:
    """Forward activations of one example, in floats: its ``[F, D]`` embeddings, the
    backbone's layer outputs and an interaction of ``F + 1`` vectors (``(F + 1)^2``), and
    the embedding method's own layers once per lookup (``F`` times: DHE's encoder)."""
    first, widths = _linear_widths(model.backbone)
    method_first, method_widths = _linear_widths(model.embedding)
    features = num_sparse * model.embedding.dim
    return (
        first
        + widths
        + features
        + (num_sparse + 1) ** 2
        + num_sparse * (method_first + method_widths)
    )


@functools.lru_cache(maxsize=512)
def _memory(config_json: str, cards: tuple[int, ...], num_dense: int) -> JobMemory:
    config = RunConfig.model_validate_json(config_json)
    train = config.train
    embedding = sized_method(
        config.embedding.name,
        config.embedding.options,
        cards,
        train.sparse_optimizer,  # type: ignore[arg-type]
    )
    backbone_cls = config.model.registry.get(config.model.name)
    with torch.device("meta"):
        backbone = backbone_cls(num_dense, len(cards), embedding.dim, config.model.typed_options())
    model = RecModel(embedding, backbone, None)
    dense = sum(p.numel() * p.element_size() for p in backbone.parameters())
    updated = sum(p.numel() * p.element_size() for p in model.dense_parameters())
    floats = activation_floats(model, len(cards))
    activations = 4 * floats * max(ACTIVATION_FACTOR * train.batch_size, train.eval_batch_size)
    return JobMemory(
        embedding=embedding.memory().total,
        dense=dense,
        gradients=updated,
        dense_optimizer=DENSE_OPTIMIZER_FLOATS.get(train.dense_optimizer, 2) * updated,
        activations=activations,
    )


def job_memory(config: RunConfig, shape: DataShape) -> JobMemory:
    """The bytes ``config`` holds while it trains on data of ``shape``."""
    return _memory(config.model_dump_json(), shape.cardinalities, shape.num_dense)


@dataclass(frozen=True)
class DeviceMemory:
    """A device kind's memory for one job (``available`` None: not known here)."""

    kind: str
    available: int | None
    source: str


def parse_bytes(text: str, what: str = MEMORY_ENV) -> int:
    """``"64GiB"``, ``"500 MB"``, ``"1e9"`` -> bytes; :class:`ConfigError` naming ``what``."""
    found = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    unit = found.group(2).lower() if found else ""
    try:
        value = float(found.group(1)) if found and unit in _UNITS else -1.0
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"{what}: expected a number of bytes such as 17179869184, 64GiB or 500MB, got {text!r}"
        )
    return int(value * _UNITS[unit])


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def device_memory(kind: str) -> DeviceMemory:
    """The memory a job of device ``kind`` (``cpu``, ``cuda``) has here: ``$RECSUITE_DEVICE_MEMORY``,
    else the available RAM (``/proc/meminfo``) or the free memory of the first CUDA device."""
    given = os.environ.get(MEMORY_ENV)
    if given:
        return DeviceMemory(kind, parse_bytes(given), MEMORY_ENV)
    if kind == "cuda":
        if not torch.cuda.is_available():
            return DeviceMemory(kind, None, "no CUDA device here")
        free, _ = torch.cuda.mem_get_info()
        return DeviceMemory(kind, int(free), f"free on {torch.cuda.get_device_name()}")
    available = _meminfo_available()
    return DeviceMemory(kind, available, "available RAM" if available else "RAM not known")


# --------------------------------------------------------------------------- rates
@dataclass(frozen=True)
class RateRecord:
    """One stored run's measured training rate."""

    device: str
    model: str
    embedding: str
    batch_size: int
    flops: float
    samples_per_s: float
    path: str
    """The report directory whose ``runs/`` holds it."""
    key: str
    """Its run's config hash (its folder under ``runs/``)."""


def stored_rate_records(root: Path = Path("results")) -> list[RateRecord]:
    """Every measured training rate in the stored run records under ``root`` (committed
    profiles' ``<profile>/runs`` and the default report directories' ``reproduce/*/runs``)."""
    return list(_rate_records(str(root)))


@functools.lru_cache(maxsize=4)
def _rate_records(root: str) -> tuple[RateRecord, ...]:
    found = []
    base = Path(root)
    for path in sorted(
        [*base.glob("*/runs/*/seed-*.json"), *base.glob("reproduce/*/runs/*/seed-*.json")]
    ):
        try:
            data = json.loads(path.read_text())
            rate = float(data["metrics"]["train_samples_per_s"])
            found.append(
                RateRecord(
                    device=str(data["environment"]["device"]),
                    model=str(data["model"]),
                    embedding=str(data["embedding"]),
                    batch_size=int(data["config"]["train"]["batch_size"]),
                    flops=float(data["metrics"].get("flops_per_example") or 0.0),
                    samples_per_s=rate,
                    path=str(path.parent.parent.parent),
                    key=path.parent.name,
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    found += _gpu_check_records(base / "bench")
    return tuple(r for r in found if r.samples_per_s > 0)


GPU_CHECK_BATCH = 1024
"""The batch size of the GPU check's accuracy runs (``suite.gpu_check.steps.TRAIN``), on
criteo-synth with DLRM's default options."""


def _gpu_check_records(bench: Path) -> list[RateRecord]:
    """The per-method CUDA training rates of the GPU check (``python -m suite.gpu_check``,
    stored as ``results/bench/gpu-*-methods.json``)."""
    found = []
    for path in sorted(bench.glob("gpu-*-methods.json")):
        try:
            data = json.loads(path.read_text())
            for step in data["steps"]:
                for method, figures in (step.get("figures") or {}).items():
                    if isinstance(figures, dict) and "train_samples_per_s" in figures:
                        found.append(
                            RateRecord(
                                device=str(step.get("device", "cuda")),
                                model="dlrm",
                                embedding=method,
                                batch_size=GPU_CHECK_BATCH,
                                flops=0.0,
                                samples_per_s=float(figures["train_samples_per_s"]),
                                path=str(path),
                                key="",
                            )
                        )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return found


@dataclass(frozen=True)
class Rate:
    """A job's expected training rate and where it comes from."""

    samples_per_s: float
    source: str


def expected_rate(
    config: RunConfig, key: str, flops: float, records: list[RateRecord]
) -> Rate | None:
    """``config``'s samples/s (``key``: its config hash) from the records of its device
    kind: the median of its own stored seeds where it ran before, else of the records of
    its embedding method at its model and the closest batch size, scaled on the CPU by the
    records' FLOPs per example over the job's (the CPU's steps are compute-bound; a GPU's
    at these sizes are not, so its rate is taken as measured). None where no record of
    that device kind and method exists."""
    kind = [r for r in records if r.device == config.device]
    chosen = [r for r in kind if r.key == key]
    if chosen:
        rates = sorted(r.samples_per_s for r in chosen)
        where = f"this run's own {len(chosen)} stored seeds ({chosen[0].path})"
        return Rate(rates[len(rates) // 2], where)
    mine = [r for r in kind if r.embedding == config.embedding.name]
    if not mine:
        return None
    same_model = [r for r in mine if r.model == config.model.name] or mine
    batch = config.train.batch_size
    nearest = min(abs(math.log(r.batch_size / batch)) for r in same_model)
    chosen = [r for r in same_model if abs(math.log(r.batch_size / batch)) == nearest]
    cpu = config.device == "cpu"
    rates = sorted(
        r.samples_per_s * (r.flops / flops if cpu and r.flops and flops else 1.0) for r in chosen
    )
    first = chosen[0]
    where = f"{first.embedding} runs at batch {first.batch_size} ({first.path})"
    if first.batch_size != batch:
        where += f", not this run's batch {batch}"
    if first.model != config.model.name:
        where += f", model {first.model}"
    if cpu:
        where += ", scaled by FLOPs/example"
    return Rate(rates[len(rates) // 2], where)


def model_flops(config: RunConfig, shape: DataShape) -> float:
    """Forward FLOPs per example of ``config``'s model (built on the meta device)."""
    return _flops(config.model_dump_json(), shape.cardinalities, shape.num_dense)


@functools.lru_cache(maxsize=512)
def _flops(config_json: str, cards: tuple[int, ...], num_dense: int) -> float:
    config = RunConfig.model_validate_json(config_json)
    embedding = sized_method(
        config.embedding.name,
        config.embedding.options,
        cards,
        config.train.sparse_optimizer,  # type: ignore[arg-type]
    )
    with torch.device("meta"):
        backbone = config.model.registry.get(config.model.name)(
            num_dense, len(cards), embedding.dim, config.model.typed_options()
        )
    return float(RecModel(embedding, backbone, None).flops_per_example())


# --------------------------------------------------------------------------- the plan's costs
@dataclass(frozen=True)
class RunCost:
    """One planned run (a distinct config) and what each of its seeds' jobs costs."""

    label: str
    """Its first role (``paper/run``) and how many more it plays."""
    config: RunConfig
    seeds: int
    memory: JobMemory
    device: DeviceMemory
    steps: int
    examples: int
    rate: Rate | None

    @property
    def fits(self) -> bool:
        """False only where the device's memory is known and below the job's."""
        return self.device.available is None or self.memory.total <= self.device.available

    @property
    def seconds(self) -> float | None:
        """Expected training seconds of one job (one seed)."""
        return None if self.rate is None else self.examples / self.rate.samples_per_s


@dataclass(frozen=True)
class PlanCosts:
    """Every run's cost, the data's sizes and the workers the wall time is for."""

    runs: list[RunCost]
    shapes: dict[str, DataShape]
    """Dataset (``name (protocol)``; one per distinct options) -> its sizes."""
    workers: int

    @property
    def device_seconds(self) -> float:
        """Seconds of one device (a core or a GPU) summed over the jobs with a rate."""
        return sum(r.seconds * r.seeds for r in self.runs if r.seconds is not None)

    @property
    def unrated_jobs(self) -> int:
        return sum(r.seeds for r in self.runs if r.seconds is None)

    @property
    def wall_seconds(self) -> float:
        """The jobs (with a rate) on :attr:`workers` workers, longest first, each to the
        first free worker."""
        times = sorted(
            (r.seconds for r in self.runs if r.seconds is not None for _ in range(r.seeds)),
            reverse=True,
        )
        loads = [0.0] * max(1, min(self.workers, len(times) or 1))
        for t in times:
            heapq.heapreplace(loads, loads[0] + t)
        return max(loads)


def run_steps(config: RunConfig, train_rows: int) -> int:
    """Training steps of ``config`` at most (early stopping may end it sooner)."""
    train = config.train
    steps = train.epochs * math.ceil(train_rows / train.batch_size)
    return min(steps, train.max_steps) if train.max_steps else steps


def plan_costs(
    plan: ReproductionPlan,
    workers: int | None = None,
    root: Path = Path("results"),
    rates: bool = True,
) -> PlanCosts:
    """The cost of every run of ``plan`` (see the module docstring); wall time for
    ``workers`` (default: the runner's, one per core or per visible GPU). ``rates``: False
    for memory alone (the check before a real run reads no stored runs)."""
    from suite.executors.local import default_workers

    records = stored_rate_records(root) if rates else []
    shapes: dict[str, DataShape] = {}
    names: dict[str, str] = {}
    devices: dict[str, DeviceMemory] = {}
    runs = []
    for key, entry in plan.runs.items():
        config = entry.config
        data_key = config.dataset.model_dump_json()
        if data_key not in shapes:
            shapes[data_key] = data_shape(config.dataset)
            options = stable_hash(config.dataset.options)[:8]
            names[data_key] = (
                f"{config.dataset.name} ({config.dataset.protocol}, options {options})"
            )
        shape = shapes[data_key]
        if config.device not in devices:
            devices[config.device] = device_memory(config.device)
        steps = run_steps(config, shape.train_rows)
        more = f" (+{len(entry.roles) - 1} roles)" if len(entry.roles) > 1 else ""
        runs.append(
            RunCost(
                label=entry.roles[0] + more,
                config=config,
                seeds=len(plan.seeds),
                memory=job_memory(config, shape),
                device=devices[config.device],
                steps=steps,
                examples=steps * config.train.batch_size,
                rate=(
                    expected_rate(config, key, model_flops(config, shape), records)
                    if rates
                    else None
                ),
            )
        )
    jobs = sum(r.seeds for r in runs)
    cuda = any(r.config.device == "cuda" for r in runs)
    chosen = default_workers(jobs, cuda) if workers is None else workers
    return PlanCosts(runs, {names[k]: v for k, v in shapes.items()}, chosen)


def check_fit(costs: PlanCosts) -> None:
    """Raise :class:`ConfigError` (one line, exit 2) naming the first job that cannot fit
    its device, with the bytes it needs and the bytes there are; on the CPU, whose memory
    the workers share, also where the :attr:`~PlanCosts.workers` largest jobs cannot fit
    together (on CUDA each worker has its own GPU)."""
    for run in costs.runs:
        if not run.fits:
            assert run.device.available is not None
            raise ConfigError(
                f"device: job {run.label} needs {human_bytes(run.memory.total)} "
                f"({run.memory.total:,} bytes) but the {run.device.kind} has "
                f"{human_bytes(run.device.available)} ({run.device.available:,} bytes, "
                f"{run.device.source}); nothing was trained"
            )
    shared = shared_memory_jobs(costs)
    if shared is None:
        return
    jobs, together, available = shared.jobs, shared.together, shared.available
    if len(jobs) > shared.fitting:
        raise ConfigError(
            f"device: {len(jobs)} workers may run the {len(jobs)} largest jobs at once "
            f"({', '.join(dict.fromkeys(r.label for r in jobs))}), needing "
            f"{human_bytes(together)} ({together:,} bytes), but the cpu has "
            f"{human_bytes(available)} ({available:,} bytes, {shared.source}); use "
            f"--workers {shared.fitting} or fewer; nothing was trained"
        )


@dataclass(frozen=True)
class SharedMemory:
    """The CPU jobs that the workers may run at once at worst, against the CPU's memory."""

    jobs: list[RunCost]  # the largest, one per worker, a run's seeds counted apart
    together: int  # their summed memory, bytes
    available: int  # the CPU's memory, bytes
    source: str  # where ``available`` was read

    @property
    def fitting(self) -> int:
        """How many of the workers' jobs fit together (>= 1)."""
        return max_concurrent(self.jobs, self.available)


def shared_memory_jobs(costs: PlanCosts) -> SharedMemory | None:
    """The CPU jobs that ``costs.workers`` workers may run at once at worst and the CPU's
    memory; None where no CPU job runs, one worker does, or the memory is unknown."""
    cpu = [r for r in costs.runs if r.device.kind == "cpu"]
    if not cpu or costs.workers < 2 or cpu[0].device.available is None:
        return None
    jobs = sorted((r for r in cpu for _ in range(r.seeds)), key=lambda r: -r.memory.total)
    largest = jobs[: costs.workers]
    return SharedMemory(
        jobs=largest,
        together=sum(r.memory.total for r in largest),
        available=cpu[0].device.available,
        source=cpu[0].device.source,
    )


def max_concurrent(largest: list[RunCost], available: int) -> int:
    """How many of ``largest`` (largest first) fit ``available`` bytes together (>= 1)."""
    total, count = 0, 0
    for run in largest:
        total += run.memory.total
        if total > available:
            break
        count += 1
    return max(1, count)


def rate_advice(device: str) -> str:
    """What to run to measure a device kind's training rates."""
    return f"no rate measured for this device: run `{RATE_COMMAND.format(device=device)}`"


def describe_shape(shape: DataShape) -> dict[str, Any]:
    """A dataset's sizes as the plan prints them."""
    return {
        "embedding rows": sum(shape.cardinalities),
        "features": len(shape.cardinalities),
        "train rows": shape.train_rows,
        "from": shape.source,
    }
