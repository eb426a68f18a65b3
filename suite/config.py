"""The one validated, frozen run configuration, and how it is built.

Every way of starting work (CLI flags, YAML presets, ``--set`` overrides, Optuna trials,
reproductions) produces a ``RunConfig`` through :func:`build_config`. Each component
(model, embedding method, dataset, task) names a registry entry whose ``Options``
pydantic class validates and fills in its options, so the resolved config is complete.
"""

from __future__ import annotations

import copy
import os
import re
import stat
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from suite.errors import ConfigError
from suite.presets import resolve_config_file
from suite.registry import DATASETS, EMBEDDINGS, MODELS, TASKS, Registry, did_you_mean
from suite.stable_hash import stable_hash


class Frozen(BaseModel):
    """The base of every typed options/config object: immutable, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    identity_defaults: ClassVar[dict[str, Any]] = {}
    """An entry's options added after runs were recorded, and their defaults: left out of a
    run's identity (:meth:`RunConfig.identity`) at these values, so those runs' config
    hashes stay as they were."""


class NoOptions(Frozen):
    """Options of an entry that takes none."""


def _fields_at(model: Any, path: tuple[Any, ...]) -> list[str]:
    """Field names of the pydantic model reached from ``model`` along ``path``."""
    for part in path:
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return []
        model = fields[part].annotation
    return list(getattr(model, "model_fields", {}))


def format_validation_error(error: ValidationError, prefix: str = "", model: Any = None) -> str:
    """One line per problem, ``field.path: message``, joined by '; '. With ``model`` (the
    validated class), an unknown key gets a suggestion among the valid ones."""
    parts = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item["loc"] if p != "__root__")
        msg = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden" and model is not None:
            valid = _fields_at(model, tuple(item["loc"][:-1]))
            msg = f"unknown key.{did_you_mean(str(item['loc'][-1]), valid)}"
            msg += f" Valid: {', '.join(valid)}" if valid else ""
        field, sep, rest = msg.partition(": ")
        if not loc and sep and field.isidentifier():
            loc, msg = field, rest  # a model-level check naming its own field
        loc = f"{prefix}{loc}" if loc else prefix.rstrip(".")
        allowed = item.get("ctx", {}).get("expected")
        if msg.startswith(("options.", "protocol:")):
            loc, msg = f"{loc}.{msg.split(':', 1)[0]}", msg.split(":", 1)[1].strip()
        parts.append(
            f"{loc}: {msg}" + (f" (allowed: {allowed})" if allowed and allowed not in msg else "")
        )
    return "; ".join(parts)


class ComponentSpec(Frozen):
    """A registry name plus that entry's options, validated by its ``Options`` class."""

    registry: ClassVar[Registry[Any]]
    default_name: ClassVar[str]
    name: str
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _resolve_options(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"name": data}
        if not isinstance(data, dict):
            return data
        if "name" not in data:
            data = {**data, "name": cls.default_name}
        name = data["name"]
        if name not in cls.registry:
            raise ValueError(cls.registry.unknown_message(str(name)))
        options_cls = getattr(cls.registry.get(name), "Options", NoOptions)
        raw = data.get("options") or {}
        if not isinstance(raw, dict):
            raise ValueError(f"options must be a mapping, got {type(raw).__name__}")
        try:
            resolved = options_cls.model_validate(raw)
        except ValidationError as exc:
            raise ValueError(format_validation_error(exc, "options.", options_cls)) from None
        return {**data, "options": resolved.model_dump(mode="json")}

    def typed_options(self) -> Any:
        """The options as the entry's typed ``Options`` object."""
        options_cls = getattr(self.registry.get(self.name), "Options", NoOptions)
        return options_cls.model_validate(self.options)


class ModelSpec(ComponentSpec):
    registry = MODELS
    default_name = "dlrm"


class EmbeddingSpec(ComponentSpec):
    registry = EMBEDDINGS
    default_name = "full"


class TaskSpec(ComponentSpec):
    registry = TASKS
    default_name = "accuracy"


class DatasetSpec(ComponentSpec):
    """A dataset: its name, split protocol and options; where raw files and the prepared
    cache live are paths, not part of the run's identity."""

    registry = DATASETS
    default_name = "criteo-synth"
    protocol: str | None = None
    raw: str | None = None
    cache_dir: str | None = None

    @model_validator(mode="after")
    def _check_protocol(self) -> DatasetSpec:
        source = self.registry.get(self.name)
        protocols = list(getattr(source, "protocols", {}) or {})
        if self.protocol is None:
            object.__setattr__(self, "protocol", getattr(source, "default_protocol", None))
        elif protocols and self.protocol not in protocols:
            raise ValueError(
                f"protocol: unknown protocol {self.protocol!r} for dataset {self.name!r} "
                f"(allowed: {', '.join(protocols)})"
            )
        return self

    def drawn_by(self, seed: int) -> DatasetSpec:
        """This dataset as a run of seed ``seed`` trains on it: under ``options.draw:
        per_seed`` the seed is its ``draw_seed`` too (each seed its own teacher and sample);
        otherwise itself."""
        if self.options.get("draw") != "per_seed" or self.options.get("draw_seed") == seed:
            return self
        return self.model_copy(update={"options": {**self.options, "draw_seed": seed}})


# The most torch threads a config may ask for on any machine (the run refuses more than 4
# per usable CPU of the machine it runs on; thousands of OpenMP threads crash the process).
MAX_THREADS = 1024


class TrainConfig(Frozen):
    """The training budget and optimizers."""

    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="stop after this many steps")
    batch_size: int = Field(256, ge=1)
    eval_batch_size: int = Field(8192, ge=1)
    dense_optimizer: Literal["adam", "adagrad", "sgd"] = "adam"
    dense_lr: float = Field(1e-3, gt=0, allow_inf_nan=False)
    sparse_optimizer: Literal["rowwise_adagrad", "adagrad", "sgd"] = "rowwise_adagrad"
    sparse_lr: float = Field(0.05, gt=0, allow_inf_nan=False)
    eval_every_steps: int | None = Field(None, ge=1, description="validate every N steps too")
    patience: int | None = Field(
        None,
        ge=1,
        description="stop once this many validations in a row bring no new best validation "
        "AUC (by more than min_delta); epochs stays the most trained",
    )
    min_delta: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="a validation AUC must beat the best by more than this to count as better",
    )
    embedding_l2: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="L2 on the embeddings a batch looks up, FuxiCTR's embedding_regularizer "
        "form: (coefficient / 2) x their sum of squares, added to the batch's mean loss",
    )
    weight_decay: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="L2 weight decay of the dense optimizer on the backbone's parameters "
        "(FuxiCTR's net_regularizer; torch's coupled weight_decay)",
    )
    checkpoint: Literal["best", "final"] = "best"
    shuffle: bool = True
    threads: int | None = Field(
        None, ge=1, le=MAX_THREADS, description="torch CPU threads; default: torch's"
    )
    compile: bool = Field(
        False, description="torch.compile (Inductor) the backbone; same numbers within float noise"
    )
    progress: bool = True
    checkpoint_every: int | str | None = Field(
        None, description="write a checkpoint every N steps, or every 30s / 5m / 1h of training"
    )
    checkpoint_dir: str = Field("checkpoints", description="where a run's checkpoints live")

    @field_validator("checkpoint_every")
    @classmethod
    def _checkpoint_every(cls, value: int | str | None) -> int | str | None:
        if value is not None and not re.fullmatch(r"[1-9]\d*|\d+(\.\d+)?[smh]", str(value).strip()):
            raise ValueError(f"expected steps (e.g. 500) or a time (30s, 5m, 1h), got {value!r}")
        return value


class CommConfig(Frozen):
    """The codec of the embedding all-to-all payload (see ``suite.engine.comm_codec``)."""

    codec: Literal["none", "fp16", "bf16", "lossy"] = "none"
    error_bound: float = Field(
        0.01, gt=0, description="lossy: bound per value, relative to each table's value range"
    )
    start_scale: float = Field(2.0, gt=0, description="lossy: bound multiplier at step 0")
    end_scale: float = Field(0.5, gt=0, description="lossy: bound multiplier at the last step")
    zlib_level: int = Field(1, ge=0, le=9, description="lossy: zlib level of the codes")


ShardingType = Literal[
    "auto",
    "table_wise",
    "row_wise",
    "column_wise",
    "table_row_wise",
    "table_column_wise",
]


class ShardingConfig(Frozen):
    """How a distributed run (``--nproc-per-node``, ``torchrun``) shards its embedding
    tables: TorchRec's planner chooses among the allowed types (``auto``: any)."""

    default: ShardingType = Field("auto", description="sharding type of every table")
    tables: dict[str, ShardingType] = Field(
        default_factory=dict, description="per-table override: table name -> sharding type"
    )


class TrackingConfig(Frozen):
    """Where the run is recorded; not part of the run's identity."""

    enabled: bool = True
    uri: str | None = None
    experiment: str = "recsuite"
    results_dir: str = "results/runs"
    run_name: str | None = None
    log_model: Literal["auto", "always", "never"] = Field(
        "auto", description="log the trained model to MLflow (auto: if its weights <= 256 MiB)"
    )
    keep_arrays: bool = Field(
        True,
        description="keep the task's arrays (accuracy: test labels and logits) beside the "
        "result JSON and in MLflow; reproductions need them for DeLong's test",
    )
    val_curve: int = Field(
        10,
        ge=0,
        le=1000,
        description="points of validation AUC and log loss logged along an accuracy run's "
        "training (val_auc_curve, val_logloss_curve; 0: none); not with eval_every_steps, "
        "whose validations are the curve",
    )
    val_curve_rows: int = Field(
        8192, ge=1, description="the curve's points use the first this many validation rows"
    )


class RunConfig(Frozen):
    """The whole definition of one run."""

    model: ModelSpec = Field(default_factory=lambda: ModelSpec.model_validate({}))
    embedding: EmbeddingSpec = Field(default_factory=lambda: EmbeddingSpec.model_validate({}))
    dataset: DatasetSpec = Field(default_factory=lambda: DatasetSpec.model_validate({}))
    task: TaskSpec = Field(default_factory=lambda: TaskSpec.model_validate({}))
    train: TrainConfig = Field(default_factory=TrainConfig)
    seed: int = Field(0, ge=0, le=2**32 - 1, description="run seed (numpy takes 0..2**32-1)")
    device: Literal["cpu", "cuda"] = "cpu"
    comm: CommConfig = Field(default_factory=CommConfig)
    sharding: ShardingConfig = Field(default_factory=ShardingConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="after")
    def _seed_draws_the_data(self) -> RunConfig:
        """``dataset.options.draw: per_seed``: the run's seed draws the data too, as the
        dataset's ``draw_seed``, so each seed's prepared data (cache key, fingerprint) is
        its own and the methods of one seed share theirs."""
        object.__setattr__(self, "dataset", self.dataset.drawn_by(self.seed))
        return self

    def identity(self) -> dict[str, Any]:
        """The fields that define the run's result (paths and tracking left out)."""
        data = self.model_dump(mode="json", exclude={"tracking": True})
        for key in ("raw", "cache_dir"):
            data["dataset"].pop(key, None)
        # draw per_seed: the dataset's draw_seed is the run's seed, already here (its seeds
        # share one seedless identity, as other configs' seeds do)
        data["dataset"]["options"].pop("draw_seed", None)
        for key in ("progress", "checkpoint_every", "checkpoint_dir"):  # same result either way
            data["train"].pop(key, None)
        if not self.train.compile:  # eager: hashes stay those of runs before the switch
            data["train"].pop("compile", None)
        if self.train.patience is None:  # no early stopping: hashes stay as before it
            data["train"].pop("patience", None)
        if self.train.min_delta == 0.0:
            data["train"].pop("min_delta", None)
        for key in ("embedding_l2", "weight_decay"):  # unregularised: hashes stay as before
            if getattr(self.train, key) == 0.0:
                data["train"].pop(key, None)
        for field in ("model", "embedding", "dataset", "task"):  # options added since
            spec: ComponentSpec = getattr(self, field)
            options_cls = getattr(spec.registry.get(spec.name), "Options", NoOptions)
            later = getattr(options_cls, "identity_defaults", {})
            options = data[field]["options"]
            for key, default in later.items():
                if key in options and options[key] == default:
                    options.pop(key)
        if self.comm == CommConfig():  # no codec: hashes stay those of runs before codecs
            data.pop("comm", None)
        if self.sharding == ShardingConfig():  # the planner's choice: hashes stay as before
            data.pop("sharding", None)
        return data

    def config_hash(self) -> str:
        """Stable hash of the identity's canonical JSON (16 hex digits)."""
        return stable_hash(self.identity())

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def with_overrides(self, overrides: dict[str, Any]) -> RunConfig:
        """A new config with dotted-key overrides applied and validated again."""
        data = self.model_dump(mode="json")
        for key, value in overrides.items():
            set_dotted(data, key, value)
        return validate_config(data)


def validate_config(data: dict[str, Any], source: str = "config") -> RunConfig:
    """Validate a plain dict into a ``RunConfig``; errors name the field."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"invalid {source}: {format_validation_error(exc, model=RunConfig)}"
        ) from None


MAX_CONFIG_BYTES = 1 << 20
"""The largest YAML file :func:`load_yaml` reads (1 MiB; the shipped specs are a few KiB)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key written twice in one mapping (plain YAML keeps
    the last one silently), pointing at the second one's line."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class says so
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {first}); write each key once",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _read_config_bytes(path: Path) -> bytes:
    """The bytes of config file ``path``: a regular file of at most
    :data:`MAX_CONFIG_BYTES`, opened without blocking (a FIFO or a device such as
    ``/dev/zero`` is refused, not read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise ConfigError(f"config file {path} is {kind}; expected a YAML file")
    with os.fdopen(fd, "rb") as handle:
        try:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"config file {path} is over {MAX_CONFIG_BYTES >> 20} MiB; expected a YAML file"
        )
    return raw


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping safely (a regular file of at most 1 MiB, each key once); errors
    name the file and line."""
    path = Path(path)
    raw = _read_config_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {exc.start}); expected a YAML file"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"config file {path} is binary (NUL byte); expected a YAML file")
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"malformed YAML in {where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping, got {type(data).__name__}")
    return data


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for key ``a.b.c``, creating mappings on the way."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {part!r} is not a mapping")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``dotted.key=value``; the value is read as YAML (numbers, lists, ...)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects dotted.key=value, got {text!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def set_component(data: dict[str, Any], field: str, name: str) -> None:
    """Name the entry of component ``field``; options written for another entry are dropped."""
    current = data.get(field)
    current_name = current.get("name") if isinstance(current, dict) else current
    if current_name != name:
        # options written for another entry do not apply to this one
        data[field] = {"name": name, **_keep_paths(current)}
    else:
        data[field] = {**(current if isinstance(current, dict) else {}), "name": name}


def _keep_paths(spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict):
        return {}
    return {k: v for k, v in spec.items() if k in ("raw", "cache_dir")}


def build_config(
    config_files: list[str | Path] | None = None,
    components: dict[str, str | None] | None = None,
    values: dict[str, Any] | None = None,
    overrides: list[str] | None = None,
) -> RunConfig:
    """Resolve a ``RunConfig``: YAML files or preset names (later ones win), then component names
    (model/embedding/dataset/task), then plain dotted values, then ``--set`` strings."""
    data: dict[str, Any] = {}
    for path in config_files or []:
        data = deep_merge(data, load_yaml(resolve_config_file(path)))
    for field, name in (components or {}).items():
        if name is not None:
            set_component(data, field, name)
    for key, value in (values or {}).items():
        if value is not None:
            set_dotted(data, key, value)
    for text in overrides or []:
        key, value = parse_override(text)
        set_dotted(data, key, value)
    source = ", ".join(str(p) for p in config_files or []) or "config"
    return validate_config(data, source)


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
