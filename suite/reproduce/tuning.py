"""Every compared method tuned with the same budget: a profile's ``tuning`` block, the tuned
values recorded beside the spec, and ``suite reproduce --tune`` that finds them.

A profile may declare (format in ``suite/reproduce/spec.py``)::

    tuning:
      n_trials: 8                        # the same budget for every tuned run
      space: {train.sparse_lr: {type: float, low: 0.005, high: 0.5, log: true}}
      runs: {full: {}, qr_4: {embedding.options.operation: {type: categorical, ...}}}
      share: {qr_2: qr_4}                # runs that take another run's tuned values
      seed: 0                            # the TPE sampler's seed
      base: {train: {epochs: 1}}         # overrides for tuning trials only

``--tune`` runs one Optuna study per tuned run through the suite's study machinery
(:func:`suite.studies.coordinator.run_study`: its workers, storage, MLflow tracking and
progress bar), maximizing ``val_auc`` over exactly ``n_trials`` trials (no timeout, no
pruning). A trial trains the run's resolved config under the profile's first seed with
``base`` and the sampled params. The best trial's values go to
``suite/reproductions/tuned/<paper>.<profile>.yaml`` with the study's name, its trial
count, the best validation AUC, the sampler seed, the suite commit and the command that
reproduces it; from then on every run of the profile trains with its tuned values (or those
of the run it shares from).

Resumable: a second ``--tune`` keeps the entries of the tuned file that the block still asks
for as they are (the same params, budget and sampler seed) and tunes only the other runs, so
adding a method to a tuned profile tunes that method alone; ``--retune`` tunes every run again.
The file is written after every study, so an interrupted ``--tune`` keeps the studies it
finished.

Determinism: with ``--workers 1`` the trials run one after another and the seeded TPE
sampler picks the same values on a rerun on the same machine (CPU training is bit for bit
deterministic). Several workers sample concurrently, so which trial sees which history
depends on timing: a rerun may pick other values. ``--workers 1`` is the reproducible way.
"""

from __future__ import annotations

import argparse
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError, field_validator, model_validator

from suite.config import (
    Frozen,
    RunConfig,
    deep_merge,
    format_validation_error,
    load_yaml,
    set_dotted,
)
from suite.errors import ConfigError
from suite.studies.spec import (
    CategoricalDistribution,
    Distribution,
    ParamSpace,
    SearchSpace,
    StudySpec,
)

if TYPE_CHECKING:
    from suite.reproduce.spec import ReproductionSpec
    from suite.studies.coordinator import StudyOutcome

TUNED_ENV = "RECSUITE_TUNED_DIR"
"""Environment variable naming another folder for the tuned files (tests use it)."""
OBJECTIVE = "val_auc"
RESULTS_ROOT = Path("results/tuning")


def _check_space(space: dict[str, Any], field: str) -> None:
    """The study spec's own key checks (dotted keys, no ``embedding.name``)."""
    try:
        SearchSpace(params=space)
    except ValidationError as exc:
        raise ValueError(f"{field}: {format_validation_error(exc)}") from None


class Tuning(Frozen):
    """A profile's tuning block: one study per tuned run, all with the same budget."""

    n_trials: int = Field(ge=1, description="trials of every tuned run's study")
    space: ParamSpace = Field(default_factory=dict, description="params every tuned run searches")
    runs: dict[str, ParamSpace | None] = Field(
        min_length=1, description="tuned run -> its extra params (optional)"
    )
    share: dict[str, str] = Field(
        default_factory=dict, description="run -> the tuned run whose values it takes"
    )
    seed: int = Field(0, ge=0, description="the TPE sampler's seed")
    base: dict[str, Any] = Field(
        default_factory=dict, description="config overrides for tuning trials only"
    )

    @field_validator("runs")
    @classmethod
    def _no_none(cls, runs: dict[str, ParamSpace | None]) -> dict[str, ParamSpace | None]:
        return {run: extra or {} for run, extra in runs.items()}

    @model_validator(mode="after")
    def _check(self) -> Tuning:
        if self.space:
            _check_space(self.space, "space")
        for run, extra in self.runs.items():
            if extra:
                _check_space(extra, f"runs.{run}")
            if not self.run_space(run):
                raise ValueError(f"runs.{run}: nothing to search (give space or the run's params)")
        tuned = ", ".join(self.runs)
        for run, source in self.share.items():
            if run in self.runs:
                raise ValueError(f"share.{run}: {run!r} is tuned itself; it cannot share")
            if source not in self.runs:
                raise ValueError(
                    f"share.{run}: {source!r} is not a tuned run (tuning.runs: {tuned})"
                )
        return self

    def run_space(self, run_id: str) -> dict[str, Distribution]:
        """The params ``run_id``'s study searches: the common space plus its own."""
        return {**self.space, **(self.runs.get(run_id) or {})}

    def source(self, run_id: str) -> str | None:
        """The tuned run whose values ``run_id`` trains with (itself, its share, or None)."""
        return run_id if run_id in self.runs else self.share.get(run_id)

    def check(self, spec: ReproductionSpec, profile: str) -> None:
        """Every run named exists in the profile, and every tuned run's study (its space's
        keys against the run's config, its objective against its task) is valid.
        Raises ``ValueError`` naming the field (``profiles.<profile>.tuning...``)."""
        where = f"profiles.{profile}.tuning"
        runs = spec.run_ids(profile)
        for field, names in (("runs", list(self.runs)), ("share", list(self.share))):
            for name in names:
                if name not in runs:
                    raise ValueError(
                        f"{where}.{field}: unknown run {name!r} (runs: {', '.join(runs)})"
                    )
        for run_id in self.runs:
            try:
                study = study_spec(spec, profile, run_id, {})
                study.check_space()
                study.check_metrics()
            except ConfigError as exc:
                raise ValueError(f"{where}.runs.{run_id}: {exc}") from None


# --- tuned values beside the spec ------------------------------------------------------


class TunedRun(Frozen):
    """What one run's study chose, and how to get it again."""

    values: dict[str, Any] = Field(description="dotted config key -> tuned value")
    study: str
    trials: int = Field(ge=1)
    best_val_auc: float
    sampler_seed: int
    workers: int = Field(ge=1)
    commit: str
    command: str


class TunedFile(Frozen):
    """``suite/reproductions/tuned/<paper>.<profile>.yaml``."""

    paper: str
    profile: str
    runs: dict[str, TunedRun]


def tuned_dir() -> Path:
    """Where tuned files live: ``suite/reproductions/tuned`` (``$RECSUITE_TUNED_DIR``)."""
    from suite.reproduce.spec import SPEC_DIR

    return Path(os.environ.get(TUNED_ENV) or SPEC_DIR / "tuned")


def tuned_path(paper: str, profile: str) -> Path:
    return tuned_dir() / f"{paper}.{profile}.yaml"


def tune_command(paper: str, profile: str, sets: list[str], workers: int) -> str:
    """The one command that reproduces a paper's tuned values (``--set`` texts of tracking
    fields, which change no value, left out)."""
    words = ["suite", "reproduce", "--profile", profile, "--paper", paper, "--tune"]
    words += [f"--set={text}" for text in sets if not text.strip().startswith("tracking.")]
    words += ["--workers", str(workers)]
    return shlex.join(words)


def read_tuned(paper: str, profile: str) -> TunedFile:
    """Read a tuned file; a missing or malformed one is an error naming the file."""
    path = tuned_path(paper, profile)
    if not path.is_file():
        raise ConfigError(
            f"profile {profile!r} of paper {paper!r} tunes its runs, but {path} does not exist; "
            f"run `suite reproduce --profile {profile} --paper {paper} --tune --workers 1` first"
        )
    try:
        return TunedFile.model_validate(load_yaml(path))
    except ValidationError as exc:
        raise ConfigError(f"invalid tuned file {path}: {format_validation_error(exc)}") from None


def _inside(dist: Distribution, value: Any) -> bool:
    if isinstance(dist, CategoricalDistribution):
        return value in dist.choices
    return isinstance(value, int | float) and dist.low <= value <= dist.high


def space_mismatch(
    entry: TunedRun | None, space: dict[str, Distribution], run_id: str
) -> str | None:
    """Why a tuned entry no longer fits the space its run searches (other params, or a
    value outside it); ``None`` when it fits. One check for reading and for resuming."""
    if entry is None or set(entry.values) != set(space):
        return (
            f"run {run_id!r} was tuned over {sorted(entry.values) if entry else 'nothing'}, "
            f"the spec searches {sorted(space)}"
        )
    for key, value in entry.values.items():
        if not _inside(space[key], value):
            return f"runs.{run_id}.values.{key}: {value!r} is outside the spec's space"
    return None


def tuned_overrides(spec: ReproductionSpec, profile: str, run_id: str) -> dict[str, Any]:
    """The tuned values ``run_id`` trains with, as nested config dicts (``{}`` when the
    profile or the run is not tuned). A tuned file whose keys or values no longer fit the
    spec's space is stale: an error says to tune again."""
    tuning = spec.profiles[profile].tuning
    source = tuning.source(run_id) if tuning is not None else None
    if tuning is None or source is None:
        return {}
    entry = read_tuned(spec.paper, profile).runs.get(source)
    mismatch = space_mismatch(entry, tuning.run_space(source), source)
    if mismatch is not None:
        raise ConfigError(
            f"tuned file {tuned_path(spec.paper, profile)}: {mismatch}; "
            f"tune again: {tune_command(spec.paper, profile, [], 1)}"
        )
    assert entry is not None
    nested: dict[str, Any] = {}
    for key, value in entry.values.items():
        set_dotted(nested, key, value)
    return nested


def write_tuned(tuned: TunedFile) -> Path:
    """Write a tuned file atomically; returns its path."""
    import yaml

    from suite.fileio import write_text_atomic

    header = (
        "# Written by `suite reproduce --tune` (see suite/reproductions/tuned/README.md); "
        "do not edit.\n"
    )
    body = yaml.safe_dump(tuned.model_dump(mode="json"), sort_keys=False, width=10**6)
    return write_text_atomic(tuned_path(tuned.paper, tuned.profile), header + body)


# --- the studies -------------------------------------------------------------------------


def untuned(spec: ReproductionSpec, profile: str) -> ReproductionSpec:
    """``spec`` with ``profile``'s tuning block removed: its runs' configs without values."""
    prof = spec.profiles[profile]
    profiles = {**spec.profiles, profile: prof.model_copy(update={"tuning": None})}
    return spec.model_copy(update={"profiles": profiles})


def study_name(paper: str, profile: str, run_id: str) -> str:
    return f"tune.{paper}.{profile}.{run_id.replace('/', '.')}"


def study_spec(
    spec: ReproductionSpec, profile: str, run_id: str, overrides: dict[str, Any]
) -> StudySpec:
    """The study of one tuned run: its resolved config (without tuned values) under the
    profile's first seed with the tuning ``base``, then ``overrides``; ``val_auc``
    maximized over exactly ``n_trials`` trials by a seeded TPE sampler, no pruning."""
    from suite.reproduce.plan import run_config

    prof = spec.profiles[profile]
    tuning = prof.tuning
    if tuning is None:
        raise ConfigError(f"profile {profile!r} of paper {spec.paper!r} has no tuning block")
    extra = deep_merge(deep_merge(tuning.base, {"seed": prof.seeds[0]}), overrides)
    base: RunConfig = run_config(untuned(spec, profile), profile, run_id, extra)
    return StudySpec.model_validate(
        {
            "name": study_name(spec.paper, profile, run_id),
            "description": f"{spec.paper}/{run_id} ({profile}): tuned for the reproduction",
            "base": base,
            "space": {"params": tuning.run_space(run_id)},
            "objectives": [{"metric": OBJECTIVE, "direction": "maximize"}],
            "budget": {"n_trials": tuning.n_trials},
            "sampler": {"name": "tpe", "seed": tuning.seed},
            "pruner": {"name": "none"},
            "export": {"best": 1},
        }
    )


@dataclass
class TuneRequest:
    """What ``--tune`` was asked: the profile, papers, overrides, workers and storage."""

    profile: str
    papers: list[str] | None = None
    overrides: dict[str, Any] | None = None
    sets: list[str] | None = None
    """The ``--set`` texts, recorded in the reproducing command."""
    workers: int = 1
    storage: str | None = None
    progress: bool = True
    retune: bool = False
    """Tune every run again, also those whose tuned values the block still asks for."""


def _best(study: StudySpec, outcome: StudyOutcome) -> tuple[dict[str, Any], float, int]:
    """The best trial's dotted values, its validation AUC and the finished trials."""
    import optuna

    from suite.studies.storage import open_storage
    from suite.studies.worker import METRICS_ATTR

    summary = outcome.summary
    finished = summary.counts["complete"] + summary.counts["pruned"]
    if finished != study.budget.n_trials:
        raise ConfigError(
            f"study {study.name}: {finished} finished trials in {outcome.storage_url}, the "
            f"tuning budget is {study.budget.n_trials}; every method gets the same budget: "
            "use a fresh --storage (or delete that storage)"
        )
    if not summary.best:
        raise ConfigError(f"study {study.name}: no trial completed (see {outcome.out_dir})")
    stored = optuna.load_study(
        study_name=study.name, storage=open_storage(outcome.storage_url, study.heartbeat)
    )
    trial = stored.trials[summary.best[0]]
    values = study.space.overrides_from_params(trial.params)
    return values, float(trial.user_attrs[METRICS_ATTR][OBJECTIVE]), finished


def tune_paper(spec: ReproductionSpec, name: str, request: TuneRequest) -> Path:
    """Run the study of every tuned run of one paper; write its tuned file."""
    from suite.environment import git_commit
    from suite.studies.coordinator import run_study

    tuning = spec.profiles[request.profile].tuning
    assert tuning is not None
    command = tune_command(name, request.profile, request.sets or [], request.workers)
    entries = {} if request.retune else kept_entries(spec, request.profile)
    commit = git_commit()  # before the first tuned file is written: after, it is dirty
    if entries and request.progress:
        print(
            f"{spec.paper}: kept the tuned values of {', '.join(entries)} "
            f"({tuned_path(spec.paper, request.profile)}); --retune tunes them again"
        )
    for run_id in tuning.runs:
        if run_id in entries:
            continue
        study = study_spec(spec, request.profile, run_id, request.overrides or {})
        out = RESULTS_ROOT / f"{spec.paper}.{request.profile}" / run_id.replace("/", ".")
        outcome = run_study(
            study, request.workers, request.storage, out, quiet=not request.progress
        )
        values, auc, trials = _best(study, outcome)
        entries[run_id] = TunedRun(
            values=values,
            study=study.name,
            trials=trials,
            best_val_auc=auc,
            sampler_seed=tuning.seed,
            workers=request.workers,
            commit=commit,
            command=command,
        )
        _write_entries(spec.paper, request.profile, tuning.runs, entries)
    return _write_entries(spec.paper, request.profile, tuning.runs, entries)


def _write_entries(
    paper: str, profile: str, order: dict[str, Any], entries: dict[str, TunedRun]
) -> Path:
    """The tuned file with the entries finished so far, in the block's order: written after
    every study, so an interrupted ``--tune`` keeps its finished studies."""
    ordered = {run_id: entries[run_id] for run_id in order if run_id in entries}
    return write_tuned(TunedFile(paper=paper, profile=profile, runs=ordered))


def kept_entries(spec: ReproductionSpec, profile: str) -> dict[str, TunedRun]:
    """The entries of the paper's tuned file that the tuning block still asks for as they
    are: a tuned run whose study searched the same params (values inside the space) with the
    same budget and sampler seed. ``--tune`` tunes only the other runs (a run added to the
    block, or one whose space, budget or seed changed)."""
    tuning = spec.profiles[profile].tuning
    if tuning is None or not tuned_path(spec.paper, profile).is_file():
        return {}
    kept = {}
    for run_id, entry in read_tuned(spec.paper, profile).runs.items():
        if run_id not in tuning.runs:
            continue
        if (
            space_mismatch(entry, tuning.run_space(run_id), run_id) is None
            and entry.trials == tuning.n_trials
            and entry.sampler_seed == tuning.seed
            and entry.study == study_name(spec.paper, profile, run_id)
        ):
            kept[run_id] = entry
    return kept


def tune(request: TuneRequest) -> list[Path]:
    """Tune every paper (of ``request.papers``, default all) whose profile has a tuning
    block; returns the tuned files written."""
    from suite.reproduce.spec import list_specs, load_spec

    if request.workers < 1:
        raise ConfigError(f"--workers: expected a number of processes >= 1, got {request.workers}")
    chosen = []
    for name in request.papers or list_specs():
        spec = load_spec(name)
        prof = spec.profiles.get(request.profile)
        if prof is not None and prof.tuning is not None:
            chosen.append((name, spec))
    if not chosen:
        raise ConfigError(
            f"--tune: no reproduction spec has a tuning block in profile {request.profile!r}"
        )
    return [tune_paper(spec, name, request) for name, spec in chosen]


def handle_tune(args: argparse.Namespace) -> int:
    """``suite reproduce --profile P --tune [--retune] [--paper X] [--workers N] [--storage URL]``."""
    from suite.config import parse_override

    overrides: dict[str, Any] = {}
    for text in args.overrides:
        set_dotted(overrides, *parse_override(text))
    if args.tracking_uri:
        set_dotted(overrides, "tracking.uri", args.tracking_uri)
    set_dotted(overrides, "tracking.experiment", f"reproduce-{args.profile}-tuning")
    request = TuneRequest(
        profile=args.profile,
        papers=args.paper,
        overrides=overrides,
        sets=list(args.overrides),
        workers=1 if args.workers is None else args.workers,
        storage=args.storage,
        progress=not args.quiet,
        retune=args.retune,
    )
    for path in tune(request):
        print(f"tuned values: {path}")
    return 0
