"""A study declared in YAML: validated, frozen, and turned into trial run configs.

A study file holds a ``name``, a ``base`` run config (a mapping shaped like a run-config
YAML, or a path to one, relative to the study file), a search ``space``, the
``objectives``, optional ``constraints``, a ``budget``, the ``sampler``, the ``pruner`` and
the ``heartbeat`` that detects dead workers::

    name: qr
    base: {dataset: {name: criteo-synth}, train: {eval_every_steps: 200}}
    space:
      params:                          # every trial
        train.dense_lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
      methods:                         # embedding.name -> that method's own params
        qr:
          embedding.options.collisions: {type: int, low: 2, high: 64, log: true}
    objectives: [{metric: val_auc, direction: maximize}]
    constraints: [{metric: embedding_bytes, max: 1000000}]
    budget: {n_trials: 40}
    sampler: {name: tpe, seed: 0}

With two or more ``methods`` each trial first samples the categorical ``method`` and then
only that method's params, whose Optuna names are prefixed ``<method>:`` (a conditional
space). With one method there is no ``method`` param and names are the dotted keys.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from suite.config import Frozen, RunConfig, build_config, format_validation_error, load_yaml
from suite.errors import ConfigError
from suite.registry import EMBEDDINGS, TASKS, did_you_mean

METHOD_PARAM = "method"
"""Optuna name of the categorical over embedding methods in a multi-method study."""

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class FloatDistribution(Frozen):
    """A float in ``[low, high]``, optionally log-uniform or on a grid of ``step``."""

    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> FloatDistribution:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"log needs low > 0, got {self.low}")
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be combined")
        return self

    def suggest(self, trial: Any, name: str) -> float:
        return trial.suggest_float(name, self.low, self.high, log=self.log, step=self.step)

    def example(self) -> float:
        return self.low


class IntDistribution(Frozen):
    """An int in ``[low, high]`` on a grid of ``step``, optionally log-uniform."""

    type: Literal["int"]
    low: int
    high: int
    step: int = Field(1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> IntDistribution:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        if self.log and self.low < 1:
            raise ValueError(f"log needs low >= 1, got {self.low}")
        if self.log and self.step != 1:
            raise ValueError("log needs step 1")
        return self

    def suggest(self, trial: Any, name: str) -> int:
        return trial.suggest_int(name, self.low, self.high, step=self.step, log=self.log)

    def example(self) -> int:
        return self.low


Scalar = bool | int | float | str | None


class CategoricalDistribution(Frozen):
    """One of ``choices`` (bools, numbers, strings or null)."""

    type: Literal["categorical"]
    choices: list[Scalar] = Field(min_length=1)

    @field_validator("choices")
    @classmethod
    def _distinct(cls, choices: list[Scalar]) -> list[Scalar]:
        if len({repr(c) for c in choices}) != len(choices):
            raise ValueError("choices must be distinct")
        return choices

    def suggest(self, trial: Any, name: str) -> Scalar:
        return trial.suggest_categorical(name, self.choices)

    def example(self) -> Scalar:
        return self.choices[0]


Distribution = Annotated[
    FloatDistribution | IntDistribution | CategoricalDistribution, Field(discriminator="type")
]
ParamSpace = dict[str, Distribution]


def _check_keys(space: ParamSpace) -> ParamSpace:
    for key in space:
        if not _DOTTED.match(key):
            raise ValueError(f"{key!r} is not a dotted config key such as train.dense_lr")
        if key in ("embedding.name", "embedding.options"):
            raise ValueError(
                f"{key!r} cannot be searched directly; list methods under space.methods"
            )
    return space


class SearchSpace(Frozen):
    """Params every trial samples, and per-embedding-method conditional params."""

    params: ParamSpace = Field(default_factory=dict)
    methods: dict[str, ParamSpace] = Field(default_factory=dict)

    @field_validator("params")
    @classmethod
    def _params_keys(cls, params: ParamSpace) -> ParamSpace:
        return _check_keys(params)

    @field_validator("methods")
    @classmethod
    def _method_keys(cls, methods: dict[str, ParamSpace]) -> dict[str, ParamSpace]:
        for name, space in methods.items():
            _check_keys(space or {})
            if ":" in name:
                raise ValueError(f"method name {name!r} cannot contain ':'")
        return {name: space or {} for name, space in methods.items()}

    @model_validator(mode="after")
    def _not_empty(self) -> SearchSpace:
        if not self.params and not any(self.methods.values()) and len(self.methods) < 2:
            raise ValueError("the search space is empty: give params or methods")
        return self

    @property
    def multi_method(self) -> bool:
        return len(self.methods) > 1

    def param_name(self, method: str | None, key: str) -> str:
        """The Optuna param name of dotted ``key`` (prefixed by its method when conditional)."""
        return f"{method}:{key}" if method is not None and self.multi_method else key

    def sample(self, trial: Any) -> dict[str, Any]:
        """Suggest this trial's params; return them as dotted config overrides."""
        overrides: dict[str, Any] = {}
        method: str | None = None
        if self.multi_method:
            method = trial.suggest_categorical(METHOD_PARAM, list(self.methods))
        elif self.methods:
            method = next(iter(self.methods))
        if method is not None:
            overrides["embedding.name"] = method
            for key, dist in self.methods[method].items():
                overrides[key] = dist.suggest(trial, self.param_name(method, key))
        for key, dist in self.params.items():
            overrides[key] = dist.suggest(trial, key)
        return overrides

    def overrides_from_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """The dotted overrides a finished trial's Optuna params stand for."""
        overrides: dict[str, Any] = {}
        if self.multi_method:
            if METHOD_PARAM in params:
                overrides["embedding.name"] = params[METHOD_PARAM]
        elif self.methods:
            overrides["embedding.name"] = next(iter(self.methods))
        for name, value in params.items():
            if name != METHOD_PARAM:
                overrides[name.split(":", 1)[1] if ":" in name else name] = value
        return overrides

    def examples(self) -> list[dict[str, Any]]:
        """One override set per method (each distribution's low end / first choice), to
        check every key and method against the config before any work."""
        common = {key: dist.example() for key, dist in self.params.items()}
        if not self.methods:
            return [common]
        return [
            {"embedding.name": method, **{k: d.example() for k, d in space.items()}, **common}
            for method, space in self.methods.items()
        ]


class Objective(Frozen):
    """A metric of the task's result and whether to maximize or minimize it."""

    metric: str
    direction: Literal["maximize", "minimize"]


class Constraint(Frozen):
    """A bound on a result metric; trials outside it are infeasible."""

    metric: str
    max: float | None = None
    min: float | None = None

    @model_validator(mode="after")
    def _bound(self) -> Constraint:
        if self.max is None and self.min is None:
            raise ValueError("give max, min or both")
        return self

    def violation(self, metrics: dict[str, float]) -> float:
        """Optuna's convention: <= 0 when satisfied, the amount of violation otherwise."""
        value = metrics[self.metric]
        parts = []
        if self.max is not None:
            parts.append(value - self.max)
        if self.min is not None:
            parts.append(self.min - value)
        return float(max(parts))


class Budget(Frozen):
    """Finished trials to reach (COMPLETE or PRUNED) and/or seconds per session."""

    n_trials: int | None = Field(None, ge=1)
    timeout: float | None = Field(
        None, gt=0, description="seconds; each session stops starting trials after it"
    )

    @model_validator(mode="after")
    def _some(self) -> Budget:
        if self.n_trials is None and self.timeout is None:
            raise ValueError("give n_trials, timeout or both")
        return self


class SamplerSpec(Frozen):
    """Optuna sampler: ``tpe`` (default), ``nsga2`` or ``random``."""

    name: Literal["tpe", "nsga2", "random"] = "tpe"
    seed: int | None = 0
    n_startup_trials: int | None = Field(None, ge=0, description="tpe: random trials first")
    population_size: int | None = Field(None, ge=2, description="nsga2: individuals per generation")

    @model_validator(mode="after")
    def _options(self) -> SamplerSpec:
        if self.n_startup_trials is not None and self.name != "tpe":
            raise ValueError(f"n_startup_trials applies to tpe only, not {self.name}")
        if self.population_size is not None and self.name != "nsga2":
            raise ValueError(f"population_size applies to nsga2 only, not {self.name}")
        return self


class PrunerSpec(Frozen):
    """Median pruning of single-objective studies from intermediate validation reports."""

    name: Literal["median", "none"] = "median"
    n_startup_trials: int = Field(5, ge=0, description="trials that are never pruned")
    n_warmup_steps: int = Field(0, ge=0, description="steps before pruning starts in a trial")
    interval_steps: int = Field(1, ge=1)


class HeartbeatSpec(Frozen):
    """Dead-worker detection: a running trial whose heartbeat is older than
    ``grace_period`` seconds is marked FAIL and re-queued (at most ``max_retry`` times)."""

    interval: int = Field(30, ge=1, description="seconds between heartbeats")
    grace_period: int = Field(
        120, ge=1, description="seconds without heartbeat before a trial is stale"
    )
    max_retry: int | None = Field(3, ge=0)

    @model_validator(mode="after")
    def _grace(self) -> HeartbeatSpec:
        if self.grace_period <= self.interval:
            raise ValueError(
                f"grace_period ({self.grace_period}) must exceed interval ({self.interval})"
            )
        return self


class ExportSpec(Frozen):
    """How many best configs to write as run-config YAML."""

    best: int = Field(3, ge=0)


class StudySpec(Frozen):
    """One validated study file. ``base`` is the resolved base run config."""

    name: str
    description: str = ""
    base: RunConfig
    space: SearchSpace
    objectives: list[Objective] = Field(min_length=1)
    constraints: list[Constraint] = Field(default_factory=list)
    budget: Budget
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec | None = None
    heartbeat: HeartbeatSpec = Field(default_factory=HeartbeatSpec)
    export: ExportSpec = Field(default_factory=ExportSpec)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError(f"{name!r}: use letters, digits, '_', '.', '-' (it names files)")
        return name

    @model_validator(mode="after")
    def _consistent(self) -> StudySpec:
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"objectives: a metric appears twice in {metrics}")
        if self.pruner is not None and self.pruner.name != "none" and self.multi_objective:
            raise ValueError("pruner: pruning needs a single objective (set pruner: {name: none})")
        return self

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    @property
    def pruning(self) -> PrunerSpec | None:
        """The pruner in effect: median by default for one objective, none for several."""
        if self.multi_objective:
            return None
        pruner = self.pruner or PrunerSpec()
        return None if pruner.name == "none" else pruner

    def with_changes(
        self,
        n_trials: int | None = None,
        timeout: float | None = None,
        base_overrides: dict[str, Any] | None = None,
    ) -> StudySpec:
        """A copy with the budget or base config changed (command-line flags)."""
        budget = self.budget
        if n_trials is not None and n_trials < 1:
            raise ConfigError(f"--trials: must be an integer >= 1, got {n_trials}")
        if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
            raise ConfigError(f"--timeout: must be a number of seconds > 0, got {timeout:g}")
        if n_trials is not None or timeout is not None:
            budget = Budget(
                n_trials=n_trials if n_trials is not None else budget.n_trials,
                timeout=timeout if timeout is not None else budget.timeout,
            )
        base = self.base.with_overrides(base_overrides) if base_overrides else self.base
        return self.model_copy(update={"budget": budget, "base": base})

    def trial_config(self, overrides: dict[str, Any], run_name: str | None = None) -> RunConfig:
        """The run config of a trial: the base with the sampled dotted ``overrides``.

        When a trial switches the embedding method, the base's embedding options that the
        new method does not take (another method's settings) are dropped; shared ones
        such as ``dim`` and ``backend`` are kept.
        """
        full: dict[str, Any] = {}
        method = overrides.get("embedding.name")
        if method is not None and method != self.base.embedding.name:
            if method not in EMBEDDINGS:
                raise ConfigError(f"space.methods: {EMBEDDINGS.unknown_message(str(method))}")
            options_cls = getattr(EMBEDDINGS.get(method), "Options", None)
            fields = set(getattr(options_cls, "model_fields", {}))
            kept = {k: v for k, v in self.base.embedding.options.items() if k in fields}
            full.update({"embedding.name": method, "embedding.options": kept})
        full.update({k: v for k, v in overrides.items() if k != "embedding.name"})
        if run_name is not None:
            full["tracking.run_name"] = run_name
        return self.base.with_overrides(full)

    def check_metrics(self) -> None:
        """Every objective and constraint metric must be one the base task declares, so a
        misspelt metric fails before any trial runs. A task that declares no metrics is
        checked after its first trial instead (the worker stops at once)."""
        declared = tuple(getattr(TASKS.get(self.base.task.name), "metrics", ()) or ())
        if not declared:
            return
        names = [str(getattr(m, "name", m)) for m in declared]
        for where, metric in [("objectives", o.metric) for o in self.objectives] + [
            ("constraints", c.metric) for c in self.constraints
        ]:
            if not any(_declares(m, metric) for m in declared):
                raise ConfigError(
                    f"study {self.name}: {where}: task {self.base.task.name!r} reports no metric "
                    f"{metric!r}.{did_you_mean(metric, names)} It reports: {', '.join(names)}"
                )

    def check_space(self) -> None:
        """Build one config per method from the space's example values, so a misspelt key,
        an unknown method or an option the method does not take fails before any work."""
        for overrides in self.space.examples():
            try:
                self.trial_config(overrides)
            except ConfigError as exc:
                where = overrides.get("embedding.name")
                raise ConfigError(
                    f"study {self.name}: space{f' (method {where})' if where else ''}: {exc}"
                ) from None


def _declares(declared: Any, metric: str) -> bool:
    """Whether a task's metric declaration (a name, or a spec with ``name`` and, for a
    family such as ``test_auc_*``, ``matches``) covers ``metric``."""
    if getattr(declared, "name", declared) == metric:
        return True
    matches = getattr(declared, "matches", None)
    return callable(matches) and matches(metric) is not None


def load_study_spec(path: str | Path) -> StudySpec:
    """Read and validate a study file; errors name the file and the field."""
    path = Path(path)
    data = load_yaml(path)
    if not isinstance(data.get("base"), str | dict | None):
        raise ConfigError(
            f"invalid study file {path}: base: must be a mapping or a path to a run config"
        )
    base_raw = data.get("base") or {}
    if isinstance(base_raw, str):
        base_path = Path(base_raw)
        if not base_path.is_absolute():
            base_path = path.parent / base_path
        try:
            base = build_config([base_path])
        except ConfigError as exc:
            raise ConfigError(f"invalid study file {path}: base ({base_path}): {exc}") from None
    else:
        try:
            base = RunConfig.model_validate(base_raw)
        except ValidationError as exc:
            problems = format_validation_error(exc, "base.")
            raise ConfigError(f"invalid study file {path}: {problems}") from None
    try:
        return StudySpec.model_validate({**data, "base": base})
    except ValidationError as exc:
        raise ConfigError(f"invalid study file {path}: {format_validation_error(exc)}") from None
