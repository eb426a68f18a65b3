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
      startup_trials: 3                  # optional: TPE's random start (n_trials >= 2.5x)
      pruning: {n_warmup_steps: 1042}    # optional: median pruning (the study pruner)
      run_seed: 100                      # optional: trials' seed, none of the profile's

``--tune`` runs one Optuna study per tuned run through the suite's study machinery
(:func:`suite.studies.coordinator.run_study`: its workers, storage, MLflow tracking and
progress bar), maximizing ``val_auc`` over exactly ``n_trials`` finished trials (no
timeout). A trial trains the run's resolved config under ``run_seed`` (default: the
profile's first seed) with ``base`` and the sampled params. TPE starts with
``startup_trials`` random trials (Optuna's 10 when unset; a block that sets it needs
``n_trials >= 2.5 x startup_trials``, so blocks written before it, 6 trials under the
default, still load). With ``pruning`` (:class:`suite.studies.spec.PrunerSpec`: median,
``n_startup_trials``, ``n_warmup_steps`` in training steps, ``interval_steps``) each
validation of a trial's training (every ``train.eval_every_steps`` and each epoch's end)
reports its AUC, the one mechanism of ``suite study``, and a trial below the median of
the earlier trials at that step stops there (a pruned trial counts as finished). The best
trial's values go to ``suite/reproductions/tuned/<paper>.<profile>.yaml`` with the study's
name, its trial count, the best validation AUC, the sampler seed, the suite commit, the
command that reproduces it, the new settings a block gave (``run_seed``,
``startup_trials``, ``pruning``) and ``top3_val_auc_spread``, the max - min validation AUC
of the three best complete trials (how flat the top of the search was); from then on
every run of the profile trains with its tuned values (or those of the run it shares from).

Resumable: a second ``--tune`` keeps the entries of the tuned file that the block still asks
for as they are (the same params, budget, sampler seed, trial seed, startup trials and
pruning) and tunes only the other runs, so
adding a method to a tuned profile tunes that method alone; ``--retune`` tunes every run again.
The file is written after every study, so an interrupted ``--tune`` keeps the studies it
finished.

Determinism: with ``--workers 1`` the trials run one after another and the seeded TPE
sampler picks the same values on a rerun on the same machine (CPU training is bit for bit
deterministic). Several workers sample concurrently, so which trial sees which history
depends on timing: a rerun may pick other values. ``--workers 1`` is the reproducible way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.environment import git_commit
from suite.errors import ConfigError
from suite.reproduce.plan import run_config
from suite.reproduce.spec import (
    OBJECTIVE,
    ReproductionSpec,
    TunedFile,
    TunedRun,
    list_specs,
    load_spec,
    study_name,
    tuning_study,
)
from suite.reproduce.tuned import (
    read_tuned,
    space_mismatch,
    tune_command,
    tuned_path,
    write_tuned,
)
from suite.studies import coordinator
from suite.studies.coordinator import StudyOutcome
from suite.studies.spec import StudySpec
from suite.studies.storage import open_storage
from suite.studies.worker import METRICS_ATTR

RESULTS_ROOT = Path("results/tuning")


def untuned(spec: ReproductionSpec, profile: str) -> ReproductionSpec:
    """``spec`` with ``profile``'s tuning block removed: its runs' configs without values."""
    prof = spec.profiles[profile]
    profiles = {**spec.profiles, profile: prof.model_copy(update={"tuning": None})}
    return spec.model_copy(update={"profiles": profiles})


def study_spec(
    spec: ReproductionSpec, profile: str, run_id: str, overrides: dict[str, Any]
) -> StudySpec:
    """The study of one tuned run: its resolved config (without tuned values) under the
    profile's first seed with the tuning ``base``, then ``overrides``
    (:func:`suite.reproduce.spec.tuning_study`)."""
    prof = spec.profiles[profile]
    if prof.tuning is None:
        raise ConfigError(f"profile {profile!r} of paper {spec.paper!r} has no tuning block")
    extra = prof.tuning.trial_overrides(prof, overrides)
    base = run_config(untuned(spec, profile), profile, run_id, extra)
    return tuning_study(spec, profile, run_id, base)


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


TOP = 3
"""The best trials whose validation AUCs' spread a tuned entry records."""


def top_spread(aucs: list[float], top: int = TOP) -> float | None:
    """Max - min of the ``top`` highest of ``aucs`` (``None`` with fewer than ``top``)."""
    best = sorted(aucs, reverse=True)[:top]
    return best[0] - best[-1] if len(best) == top else None


def _best(
    study: StudySpec, outcome: StudyOutcome
) -> tuple[dict[str, Any], float, int, float | None]:
    """The best trial's dotted values, its validation AUC, the finished trials, and the
    spread of the :data:`TOP` best complete trials' validation AUCs (:func:`top_spread`)."""
    import optuna

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
    aucs = [
        float(t.user_attrs[METRICS_ATTR][OBJECTIVE])
        for t in stored.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if OBJECTIVE in t.user_attrs.get(METRICS_ATTR, {})
    ]
    auc = float(trial.user_attrs[METRICS_ATTR][OBJECTIVE])
    return values, auc, finished, top_spread(aucs)


def tune_paper(spec: ReproductionSpec, name: str, request: TuneRequest) -> Path:
    """Run the study of every tuned run of one paper; write its tuned file."""
    tuning = spec.profiles[request.profile].tuning
    assert tuning is not None
    command = tune_command(name, request.profile, request.sets or [], request.workers)
    entries = {} if request.retune else kept_entries(spec, request.profile)
    commit = git_commit()  # before the first tuned file is written: after, it is dirty
    if entries and request.progress:
        print(
            f"{spec.paper}: kept the tuned values of {', '.join(entries)} "
            f"({tuned_path(spec.paper, spec.tuned_key(request.profile))}); --retune tunes them again"
        )
    for run_id in tuning.runs:
        if run_id in entries:
            continue
        study = study_spec(spec, request.profile, run_id, request.overrides or {})
        out = RESULTS_ROOT / f"{spec.paper}.{request.profile}" / run_id.replace("/", ".")
        outcome = coordinator.run_study(
            study, request.workers, request.storage, out, quiet=not request.progress
        )
        values, auc, trials, spread = _best(study, outcome)
        entries[run_id] = TunedRun(
            values=values,
            study=study.name,
            trials=trials,
            best_val_auc=auc,
            sampler_seed=tuning.seed,
            workers=request.workers,
            commit=commit,
            command=command,
            run_seed=tuning.run_seed,
            startup_trials=tuning.startup_trials,
            pruning=tuning.pruning.model_dump(mode="json") if tuning.pruning else None,
            top3_val_auc_spread=spread,
        )
        _write_entries(spec.paper, spec.tuned_key(request.profile), tuning.runs, entries)
    return _write_entries(spec.paper, spec.tuned_key(request.profile), tuning.runs, entries)


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
    key = spec.tuned_key(profile)
    if tuning is None or not tuned_path(spec.paper, key).is_file():
        return {}
    kept = {}
    for run_id, entry in read_tuned(spec.paper, key).runs.items():
        if run_id not in tuning.runs:
            continue
        if (
            space_mismatch(entry, tuning.run_space(run_id), run_id) is None
            and entry.trials == tuning.n_trials
            and entry.sampler_seed == tuning.seed
            and entry.study == study_name(spec.paper, key, run_id)
            and entry.settings_match(tuning)
        ):
            kept[run_id] = entry
    return kept


def tune(request: TuneRequest) -> list[Path]:
    """Tune every paper (of ``request.papers``, default all) whose profile has a tuning
    block; returns the tuned files written."""
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
